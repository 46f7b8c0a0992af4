package lease

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Do runs fn while holding the lease on key, as described by spec.
//
// fn is entered only on a confirmed grant with at least spec.MinValidity
// left. Its context carries the lease (FromContext, TokenFrom) and is
// cancelled with a cause wrapping ErrLost when the lease ends, or
// ErrDeadline when the total budget runs out. The lease is renewed every
// TTL/3 while fn runs and released on a context detached from ctx. Do returns
// by the earlier of ctx's deadline and start+spec.Deadline (plus a few
// milliseconds), unless fn itself ignores its context.
//
// Errors wrap ErrBusy, ErrUnknown, ErrRefused, ErrLowValidity, ErrLost,
// ErrDeadline or ErrClosed (test with errors.Is), or are fn's own error.
//
// A nested Do on the same Client and key inside fn reuses the outer lease
// (no acquire, same token) while the outer call is still running and its
// lease is valid; the nested spec's Deadline, MinValidity (against the outer
// lease's remaining validity), HoldMin and Fence still apply. A context that
// outlived its call, or whose lease is gone, gets no reuse: Do acquires
// afresh.
func (c *Client) Do(ctx context.Context, key string, spec Spec, fn func(ctx context.Context) error) error {
	if c == nil {
		return errors.New("lease: Do on a nil *Client")
	}
	if fn == nil {
		return errors.New("lease: Do with a nil function")
	}
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrBadKey)
	}
	spec, err := spec.normalize()
	if err != nil {
		return err
	}
	start := time.Now()
	if c.callObs != nil {
		ctx = c.callObs.StartCall(ctx, key, spec)
	}
	// A call with Keep is made without the parts only an acquire uses:
	// it usually takes the lease the Client kept from the previous call.
	a := newCall(spec.Keep > 0)
	a.c, a.ctx, a.key, a.spec, a.start = c, ctx, key, spec, start
	a.unsettle()
	a.end = a.start.Add(spec.Deadline)
	if d, ok := ctx.Deadline(); ok && d.Before(a.end) {
		a.end = d
	}
	// Every call that started ends with EventDone, a panicking fn included
	// (the panic goes on).
	done := false
	reentered := false
	defer func() {
		if !done {
			a.settle()
			a.observe(Event{Kind: EventDone, Reentered: reentered, Entered: !a.entered.IsZero(), Lost: a.lostOwn, Err: errPanicked})
		}
	}()
	finish := func(err error) error {
		done = true
		a.settle()
		a.observe(Event{Kind: EventDone, Reentered: reentered, Entered: !a.entered.IsZero(), Lost: a.lostOwn, Err: err})
		return err
	}
	if c.closed.Load() {
		// Before the reuse of an enclosing lease too: Close makes every
		// later call return ErrClosed, a nested one on the same key
		// included (TestAdversary63a_NestedSameKeyAfterCloseReturnsErrClosed).
		return finish(fmt.Errorf("%w: key %q", ErrClosed, key))
	}
	if r := c.held(ctx, key); r != nil && r.reusable() {
		if ctx.Err() != nil {
			// As a call that acquires: not attempted (the enclosing call's
			// deadline passed, or the caller cancelled).
			return finish(a.notStarted(ctx))
		}
		reentered = true
		if err := a.reenter(ctx, r, fn); err != errNotReusable {
			return finish(err)
		}
		// The enclosing call returned (or its lease ended) while this one
		// was getting ready: no reuse, as if it had not been reusable.
		reentered, a.token = false, 0
		if c.closed.Load() {
			return finish(fmt.Errorf("%w: key %q", ErrClosed, key))
		}
	}
	if ctx.Err() != nil {
		return finish(a.notStarted(ctx))
	}
	// The release's share of the budget: of the real budget (a caller's
	// deadline may be shorter than Spec.Deadline).
	a.reserve = min(c.releaseTimeout, a.end.Sub(a.start)/10)
	fnEnd := a.end.Add(-a.reserve)
	if !time.Now().Before(fnEnd) {
		// No time left for the function (the caller's deadline all but
		// spent): as for an acquire, nothing is sent, and a lease this
		// Client keeps stays kept for a call that can use it.
		return finish(noTimeForFn(key))
	}
	if l := c.takeKept(key, spec, fnEnd); l != nil {
		// A lease this Client kept from an earlier call: no round trip.
		k := l.a
		a.k, a.id, a.idValue, a.tomb, a.token, a.sent = k.k, k.id, k.idValue, k.tomb, l.token, time.Now()
		l.cur.Store(a)
		a.pend(l)
		a.observe(Event{Kind: EventAcquired, Kept: true, Wait: a.sent.Sub(a.start)})
		return finish(a.run(ctx, l, fn))
	}
	a.makeContexts(ctx)
	l, err := a.obtain(ctx)
	if err != nil {
		a.stopContexts() // fn will not run
	}
	if err == nil {
		err = a.run(ctx, l, fn)
	} else if errors.Is(err, ErrBusy) && spec.Busy == BusySkip {
		a.observe(Event{Kind: EventSkipped, Err: err})
		noteSkip(ctx)
		err = nil
	}
	return finish(err)
}

// errPanicked is EventDone's Err when fn did not return: it panicked,
// or called runtime.Goexit (t.FailNow in a test).
var errPanicked = errors.New("lease: the function panicked or called runtime.Goexit")

// call is the state of one Do.
type call struct {
	c       *Client
	ctx     context.Context // the caller's, for events
	key     string
	counted atomic.Bool // in Client.unsettled (only the call's goroutine sets it)
	gid     uint64      // the call's goroutine, once asked (see unsettle)
	k       keys
	spec    Spec
	id      string    // this attempt's identity
	member  string    // its entry in the key's queue, once it waited
	tomb    string    // its release tombstone key
	start   time.Time // the call's start (monotonic)
	end     time.Time // start+Deadline, or ctx's deadline if earlier
	reserve time.Duration
	idValue string          // id + ":0": the lock's value for an unfenced grant
	sent    time.Time       // when the granting acquire was sent
	entered time.Time       // when fn was entered (zero if it was not)
	lostOwn bool            // the call returns its own lease's loss (EventDone's Lost)
	inFn    atomic.Bool     // fn is running (nested calls may reuse the lease)
	lctx    context.Context // fn's context without the lease value (see reenter)
	// endCause is fn's context's cause once the call returned (see
	// endedErr); nested are the nested calls reusing the lease, told of
	// the loss first when the call returns under them (see endNested).
	endCause endedErr
	nestMu   sync.Mutex
	nested   map[*call]context.CancelCauseFunc
	nestedN  atomic.Int32

	// fn's contexts (makeContexts), its context with the lease (run), and
	// the release's context, allocated with the call.
	cancelLost     context.CancelCauseFunc
	cancelDeadline context.CancelFunc
	fctx           refCtx
	rctx           releaseCtx // the release's context
	waiting        bool       // EventWaiting was reported
	seq            int64      // acquires sent by the call (each one's number in acquire.lua)
	busySeq        int64      // the number of the last acquire answered busy
	busySent       time.Time  // when that acquire was sent
	token          Token

	// Command arguments (see args.go): the first acquire's in g, the
	// call's own release's here; a later acquire (a waiter's next look, a
	// retry) gets new ones, so that a command a go-redis hook kept never
	// changes under it.
	curAcq  *acqArgs // the last acquire's (see written)
	acqUsed bool
	rel     relArgs // the call's own release's (sendRelease)
	relUsed bool
	gate    uint8  // see enter (under Client.grantMu)
	keptL   *Lease // the kept lease the call took, until it enters (see pend)

	// A leader term (Lead) has no total deadline (end is far away: no
	// deadline context for fn) and an owner, escaped with KeyPart, that
	// newAttempt puts into its identity.
	unbounded bool
	owner     string

	// What only a call that acquires uses (see grantPart): allocated with
	// the call, or on first use by a call that meant to take a kept lease.
	g *grantPart
}

// grantPart is the part of a call that only a call that acquires uses: its
// first acquire's context and arguments, the lease it grants and its
// watcher. A call with Spec.Keep usually takes a lease the Client kept
// from an earlier call, which has all of these already: it is made
// without them (a third of the call's size, as much less for the
// collector per kept call), and gets them if it acquires after all.
type grantPart struct {
	acq     limitCtx
	acqArgs acqArgs
	lease   Lease
	w       watcher
}

// callWithGrant is a call and its grantPart in one allocation.
type callWithGrant struct {
	call
	g grantPart
}

// newCall allocates a call, with its grantPart unless the call is likely
// to take a kept lease (light).
func newCall(light bool) *call {
	if light {
		return new(call)
	}
	f := new(callWithGrant)
	f.call.g = &f.g
	return &f.call
}

// grant is the call's grantPart, allocated now if the call was made
// without it.
func (a *call) grant() *grantPart {
	if a.g == nil {
		a.g = new(grantPart)
	}
	return a.g
}

// observe reports e to the Client's Observer. While the callback of a
// loss's report runs, the goroutine it runs on and the call are listed in
// Client.obsRuns (see Close).
func (a *call) observe(e Event) {
	c := a.c
	if c.quiet {
		return
	}
	e.Ctx, e.Name, e.Key, e.Start, e.At = a.ctx, a.spec.Name, a.key, a.start, time.Now()
	if e.Token == 0 {
		e.Token = a.token
	}
	if e.Kind == EventLost {
		// A loss's report may come from another goroutine (a renewal, the
		// lease's watcher) while the call waits for it (awaitReport): a
		// Close from this Observer must not wait for the call. Other
		// reports from elsewhere (a renewal's) are nothing the call waits
		// for (TestAdversary48_CloseFromRenewedObserverSkipsReleasingCall);
		// those on the call's own goroutine are covered by unsettle's
		// listing.
		run := obsRun{goid(), a}
		c.addRun(run)
		defer c.dropRun(run)
	}
	c.obs.Observe(e)
}

func (c *Client) addRun(r obsRun) {
	c.obsMu.Lock()
	if c.obsRuns == nil {
		c.obsRuns = map[obsRun]int{}
	}
	c.obsRuns[r]++
	c.obsMu.Unlock()
}

func (c *Client) dropRun(r obsRun) {
	c.obsMu.Lock()
	if c.obsRuns[r]--; c.obsRuns[r] <= 0 {
		delete(c.obsRuns, r)
	}
	c.obsMu.Unlock()
}

// obsRun is a goroutine and a call that cannot go on while that goroutine
// is held up: the call's own goroutine while the call is outside its
// function (with an Observer: only an Observer can call Close from there),
// or one running an Observer callback on the call (a renewal's report of a
// loss, which the call may wait for).
type obsRun struct {
	gid uint64
	a   *call
}

// blocked counts the calls outside their function (Client.unsettled)
// that a goroutine running Close holds up (see obsRun, Client.closers): a
// Close does not wait for them, since they cannot go on until an Observer
// that called Close (this one, or another one waiting for this one)
// returns.
func (c *Client) blocked() int64 {
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	var held map[*call]bool
	for r := range c.obsRuns {
		if c.closers[r.gid] > 0 && r.a.counted.Load() {
			if held == nil {
				held = map[*call]bool{}
			}
			held[r.a] = true
		}
	}
	return int64(len(held))
}

// closing lists goroutine gid as running Close until the returned func
// is called.
func (c *Client) closing(gid uint64) func() {
	c.obsMu.Lock()
	if c.closers == nil {
		c.closers = map[uint64]int{}
	}
	c.closers[gid]++
	c.obsMu.Unlock()
	return func() {
		c.obsMu.Lock()
		if c.closers[gid]--; c.closers[gid] == 0 {
			delete(c.closers, gid)
		}
		c.obsMu.Unlock()
	}
}

// goid returns the current goroutine's id, read from the first line of
// its stack trace ("goroutine 123 [running]:"). Asked only where an
// Observer is set (once per call, by a loss's report, by Close): a Close
// called from an Observer must tell the calls it holds up from the others
// (Go has no goroutine-local state).
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, _ = bytes.CutPrefix(b, []byte("goroutine "))
	var id uint64
	for _, d := range b {
		if d < '0' || d > '9' {
			break
		}
		id = id*10 + uint64(d-'0')
	}
	return id
}

// unsettle counts the call in Client.unsettled (outside its function),
// settle takes it out: Close waits for the calls counted there, so that
// the go-redis client may be closed once Close returned and no call is in
// its function (TestAdversary44_CloseWithAcquireInFlightThenRedisClose).
// Only on the call's own goroutine; each is a no-op when already done.
func (a *call) unsettle() {
	if !a.counted.Load() {
		a.counted.Store(true)
		a.c.unsettled.Add(1)
		if !a.c.quiet {
			if a.gid == 0 {
				a.gid = goid()
			}
			a.c.addRun(obsRun{a.gid, a})
		}
	}
}

func (a *call) settle() {
	if a.counted.Load() {
		a.counted.Store(false)
		a.c.unsettled.Add(-1)
		if !a.c.quiet {
			a.c.dropRun(obsRun{a.gid, a})
		}
	}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// newAttempt gives the call a new identity, and its unfenced lock value
// and tombstone key, in one allocation, with the call's keys when they are
// not made yet. The identity is 128 random bits in hex; a leader
// candidate's identity also names its owner (Lead): hex "/" KeyPart(owner),
// so that the owner is stored with the grant (see redisKeys) and no script
// needs to know about it.
func (a *call) newAttempt() {
	a.busySeq = 0 // no busy answer for the new identity yet (see enterOnNotice)
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	n := 32
	if a.owner != "" {
		n += 1 + len(a.owner)
	}
	var b strings.Builder
	if a.k.lock == "" {
		tomb := keyBase(a.c.prefix, a.key) + len(":r:")
		b.Grow(keysLen(a.c.prefix, a.key) + n + 2 + tomb + n)
		a.k = writeKeys(&b, a.c.prefix, a.key)
	} else {
		b.Grow(n + 2 + len(a.k.tomb) + n)
	}
	from := b.Len()
	var h [32]byte
	hex.Encode(h[:], raw[:])
	b.Write(h[:])
	if a.owner != "" {
		b.WriteByte(ownerSep)
		b.WriteString(a.owner)
	}
	b.WriteString(":0")
	b.WriteString(a.k.tomb)
	b.Write(h[:])
	if a.owner != "" {
		b.WriteByte(ownerSep)
		b.WriteString(a.owner)
	}
	s := b.String()[from:]
	a.id, a.idValue, a.tomb = s[:n], s[:n+2], s[n+2:]
}

func ms(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }

// addDur is d + e (e >= 0), at most the longest time.Duration: a sum of a
// user's duration and a margin must not wrap (a Wait of math.MaxInt64
// gave a queue place a life of 1 ms: TestAdversary45_HugeWaitDropsQueuePlace).
func addDur(d, e time.Duration) time.Duration {
	if d > math.MaxInt64-e {
		return math.MaxInt64
	}
	return d + e
}

// notStarted is the error for a call whose context ended before it began:
// nothing was sent.
func (a *call) notStarted(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		err = ErrDeadline
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("lease: key %q: not attempted, the context had ended: %w (cause: %w)", a.key, err, cause)
	}
	return fmt.Errorf("lease: key %q: not attempted, the context had ended: %w", a.key, err)
}

// reusable reports whether a nested call may run under r's lease: only
// while r's call is in its function (and is still the lease's call: a kept
// lease passes to later calls), and the lease is provably valid.
func (r *leaseRef) reusable() bool {
	return r.a.inFn.Load() && r.l.cur.Load() == r.a && !r.l.isLost() && time.Now().Before(r.l.valid())
}

// errNotReusable is reenter's answer when the enclosing call stopped
// being reusable before fn was entered: Do then goes on as for a lease
// that was not reusable.
var errNotReusable = errors.New("lease: the enclosing lease is no longer reusable")

// endedErr is the cause of fn's context when its call returns. It is
// not a loss (no ErrLost) unless the call's end finds one (the release
// finds the key no longer ours, a kept lease's check finds it gone): a
// context fn let escape, used after a clean return, must not make a later
// call on it claim the work ran unprotected
// (TestAdversary63a_EscapedCtxAfterCleanReturnIsNotLost), and one used
// after a loss found at the end must (TestAdversary64a_ReleaseFoundLossFnCauseIsLoss).
// The context ends before the release (nested calls stop first), so the
// loss found after it is added here: errors.Is looks at it through
// Unwrap.
type endedErr struct {
	loss atomic.Value // error: the loss the call's end found
}

func (e *endedErr) Unwrap() error {
	err, _ := e.loss.Load().(error)
	return err
}

func (e *endedErr) Error() string {
	if err := e.Unwrap(); err != nil {
		return "lease: the call holding the lease returned, and its end found the lease lost: " + err.Error()
	}
	return "lease: the call holding the lease returned"
}

// errEnded is Lease.Err once the lease's call has returned without a loss.
var errEnded error = &endedErr{}

// errNestedEnded is the loss a nested call reusing the lease (from a
// goroutine its enclosing call started) reports when that call returned
// while it ran: the lease was released, or kept for later calls, under it.
var errNestedEnded = fmt.Errorf("%w: the call holding the lease returned while this nested call used it", ErrLost)

// addNested records n, a nested call reusing a's lease, with the cancel
// of its function's context; endNested ends those still running when a
// returns, with a loss, before a's own context ends (a nested function's
// context is a child of a's, and would take the cause a's ends with:
// TestAdversary64a_NestedOutlivingOuterFnCauseIsLoss).
func (a *call) addNested(n *call, cancel context.CancelCauseFunc) {
	a.nestMu.Lock()
	if a.nested == nil {
		a.nested = map[*call]context.CancelCauseFunc{}
	}
	a.nested[n] = cancel
	a.nestedN.Add(1)
	a.nestMu.Unlock()
}

func (a *call) dropNested(n *call) {
	a.nestMu.Lock()
	delete(a.nested, n)
	a.nestedN.Add(-1)
	a.nestMu.Unlock()
}

func (a *call) endNested() {
	a.nestMu.Lock()
	defer a.nestMu.Unlock()
	for n, cancel := range a.nested {
		cancel(fmt.Errorf("%w (key %q)", errNestedEnded, n.key))
	}
}

// reenter runs fn under l, the enclosing call's lease on the same key. The
// nested spec's Fence, MinValidity, HoldMin and Deadline apply; fn is
// cancelled when l ends, and an overrun of l's validity is a loss.
func (a *call) reenter(ctx context.Context, r *leaseRef, fn func(context.Context) error) error {
	l := r.l
	a.token = l.token
	if a.spec.Fence && !l.fenced {
		return fmt.Errorf("lease: key %q: Spec.Fence is set, but this nested call reuses the enclosing lease on the same key, which was granted without fencing: fence the outer call", a.key)
	}
	// ctx may not be cancelled when l ends (a goroutine's context derived
	// with context.WithoutCancel): follow l's own context.
	ictx, cancel := context.WithCancelCause(ctx)
	lctx := r.a.lctx
	// Registered before the reuse is checked (below): the enclosing call,
	// if it returns meanwhile, ends this one with its loss (endNested)
	// before lctx ends, or this one finds it returned and does not enter.
	r.a.addNested(a, cancel)
	defer r.a.dropNested(a)
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	fctx, cancelDeadline := context.WithDeadlineCause(ictx, a.end, ErrDeadline)
	// The nested call cannot outlast the enclosing call's function: its
	// budget ends with the enclosing one's, also where ctx hides that
	// deadline (context.WithoutCancel), so that the enclosing deadline
	// ending both is the nested call's deadline too, and its error names
	// that budget. (Not fctx's own deadline: the enclosing call's ends
	// fctx through lctx, after the enclosing fn's context has ended, so
	// that an enclosing fn that returns when the nested call does is past
	// its own deadline by then.)
	if !r.a.unbounded {
		if e := r.a.end.Add(-r.a.reserve); e.Before(a.end) {
			a.end = e
		}
	}
	defer func() {
		stop()
		cancelDeadline()
		cancel(nil)
	}()
	if !time.Now().Before(a.end) {
		// Started after the budget ended (the enclosing call's, on a
		// context that hides it): not entered, as a call with no time
		// left for its function.
		return noTimeForFn(a.key)
	}
	// Looked at as the last thing before fn (deriving the contexts may
	// have taken a while): the enclosing call (in another goroutine) may
	// have returned meanwhile, and released the lease or kept it for the
	// next call, and its validity may have run down.
	if !r.reusable() {
		return errNotReusable
	}
	if a.c.closed.Load() {
		// Closed while this call got ready: not entered, as any call
		// after Close.
		return fmt.Errorf("%w: key %q", ErrClosed, a.key)
	}
	if left := l.Remaining(); left < a.spec.MinValidity {
		err := fmt.Errorf("%w: key %q: the enclosing lease has %v left, the nested call needs %v", ErrLowValidity, a.key, left.Round(time.Millisecond), a.spec.MinValidity)
		a.observe(Event{Kind: EventLowValidity, Err: err})
		return err
	}
	if a.spec.HoldMin > 0 {
		l.holdTo(time.Now().Add(a.spec.HoldMin)) // from the reuse, as run's
	}

	a.settle()
	a.entered = time.Now()
	err := fn(fctx)
	returned := time.Now()
	a.unsettle()

	deadlineHit := budgetEnded(ctx, fctx, a.end, returned)
	if r.a.inFn.Load() && time.Now().After(l.valid()) {
		// Not once the outer call has returned (a nested call in a
		// goroutine that outlived it): the lease was released then, and
		// its loss would be reported after the outer call's EventDone.
		l.lose(fmt.Errorf("%w: key %q: a nested call returned after the lease's validity ended", ErrLost, a.key))
	}
	lost := l.awaitReport() // EventLost before the nested call's EventDone
	if lost || !r.a.inFn.Load() {
		cause := l.Err()
		if !lost {
			cause = fmt.Errorf("%w (key %q)", errNestedEnded, a.key)
		}
		a.lostOwn = true
		if deadlineHit {
			// The nested budget ran out, then the lease, while fn went on.
			a.observe(Event{Kind: EventDeadlineExceeded})
			return lostAfterDeadline(a, lostErr(cause, err))
		}
		return lostErr(cause, err)
	}
	switch {
	case deadlineHit:
		a.observe(Event{Kind: EventDeadlineExceeded})
		return deadlineErr(a, err)
	}
	return err
}

// lostErr is what Do returns when the lease was lost while fn ran.
func lostErr(cause, fnErr error) error {
	if fnErr != nil {
		return fmt.Errorf("%w; the function returned: %w", cause, fnErr)
	}
	return fmt.Errorf("%w; the function's effects may have run partly unprotected", cause)
}

// lostAfterDeadline is what Do returns when the budget ran out while fn
// ran and the lease was lost too (fn went on past its deadline, when no
// renewal extends the lease): both classes, ErrLost's error first.
func lostAfterDeadline(a *call, lost error) error {
	return fmt.Errorf("%w (after the %s ran out: %w)", lost, a.budget(), ErrDeadline)
}

func deadlineErr(a *call, fnErr error) error {
	if fnErr != nil {
		return fmt.Errorf("%w: key %q (%s): %w", ErrDeadline, a.key, a.budget(), fnErr)
	}
	return fmt.Errorf("%w: key %q (%s)", ErrDeadline, a.key, a.budget())
}

// noTimeForFn is the error of a call whose budget ended before its
// function could start: nothing was sent.
func noTimeForFn(key string) error {
	return fmt.Errorf("%w: key %q: no time left in the budget for the function (nothing sent)", ErrDeadline, key)
}

// budget names the call's budget in its errors: Spec.Deadline, or the
// caller's deadline when that came first.
func (a *call) budget() string {
	if a.end.Before(a.start.Add(a.spec.Deadline)) {
		d := a.end.Sub(a.start)
		if d >= time.Millisecond {
			d = d.Round(time.Millisecond)
		} else {
			d = d.Round(time.Microsecond)
		}
		return fmt.Sprintf("%v budget, the caller's deadline", d)
	}
	return fmt.Sprintf("%v budget", a.spec.Deadline)
}
