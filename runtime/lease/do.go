package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Do runs fn while holding the lease on key, as described by spec.
//
// fn is entered only on a confirmed grant with at least spec.MinValidity
// left. Its context carries the lease (FromContext, TokenFrom) and is
// cancelled with cause ErrLost when the lease ends, or ErrDeadline when the
// total budget runs out. The lease is renewed every TTL/3 while fn runs and
// released on a context detached from ctx. Do returns by the earlier of ctx's
// deadline and start+spec.Deadline (plus a few milliseconds), unless fn
// itself ignores its context.
//
// Errors wrap ErrBusy, ErrUnknown, ErrLowValidity, ErrLost or ErrDeadline
// (test with errors.Is), or are fn's own error. A nested Do on the same Client
// and key inside fn reuses the outer lease.
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
	if c.closed.Load() {
		return errClosed
	}
	if c.held(ctx, key) != nil {
		// Reentrant: the outer lease covers this call; fn's context already
		// carries it and is cancelled when it is lost.
		return fn(ctx)
	}
	a := &call{c: c, ctx: ctx, key: key, spec: spec, start: time.Now(), k: redisKeys(c.prefix, key)}
	a.end = a.start.Add(spec.Deadline)
	if d, ok := ctx.Deadline(); ok && d.Before(a.end) {
		a.end = d
	}
	a.reserve = min(c.releaseTimeout, spec.Deadline/10)

	l, err := a.acquire(ctx)
	if err == nil {
		err = a.run(ctx, l, fn)
	} else if errors.Is(err, ErrBusy) && spec.Busy == BusySkip {
		a.observe(Event{Kind: EventSkipped, Err: err})
		noteSkip(ctx)
		err = nil
	}
	a.observe(Event{Kind: EventDone, Err: err})
	return err
}

// call is the state of one Do.
type call struct {
	c       *Client
	ctx     context.Context // the caller's, for events
	key     string
	k       keys
	spec    Spec
	id      string    // this attempt's identity
	start   time.Time // the call's start (monotonic)
	end     time.Time // start+Deadline, or ctx's deadline if earlier
	reserve time.Duration
	sent    time.Time // when the granting acquire was sent
	token   Token
}

func (a *call) observe(e Event) {
	e.Ctx, e.Name, e.Key, e.Start = a.ctx, a.spec.Name, a.key, a.start
	if e.Token == 0 {
		e.Token = a.token
	}
	a.c.obs.Observe(e)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func ms(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }

// acquire gets the lease, waiting for a busy one within spec.Wait and the
// budget.
func (a *call) acquire(ctx context.Context) (*Lease, error) {
	a.id = newID()
	// Waiting stops in time for the work to get MinValidity of the budget
	// (and the release its reserve): a lease entered later would be cut by
	// the deadline before it is worth having. The first attempt always runs.
	waitUntil := a.start.Add(a.spec.Wait)
	budgetCut := false
	if lim := a.end.Add(-a.reserve - a.spec.MinValidity); !waitUntil.Before(lim) {
		waitUntil, budgetCut = lim, true
	}
	hub := a.c.hub
	var w *waiter
	defer func() { hub.leave(w) }()

	// A newcomer that finds waiters of this Client queued on the key takes
	// its turn behind them instead of racing them.
	if a.spec.Wait > 0 {
		if queued, busyUntil := hub.ahead(a.k.channel); queued {
			var err error
			if w, err = a.join(ctx, waitUntil); err != nil {
				return nil, a.waitErr(ctx, err, budgetCut)
			}
			if r := a.sleep(ctx, w, busyUntil, waitUntil); r != wokeUp && r != expired {
				return nil, a.waitErr(ctx, nil, budgetCut)
			}
		}
	}
	for {
		if ctx.Err() != nil {
			return nil, a.waitErr(ctx, nil, budgetCut)
		}
		l, pttl, err := a.acquireOnce(ctx)
		if err != nil || l != nil {
			return l, err
		}
		now := time.Now()
		if a.spec.Wait == 0 || !now.Before(waitUntil) {
			return nil, a.busy(pttl, budgetCut && a.spec.Wait > 0)
		}
		busyUntil := time.Time{}
		if pttl >= 0 {
			busyUntil = now.Add(pttl)
		}
		if w == nil {
			// Subscribe, then look again: a release published before the
			// subscription took effect would otherwise be missed.
			if w, err = a.join(ctx, waitUntil); err != nil {
				return nil, a.waitErr(ctx, err, budgetCut)
			}
			hub.sawBusy(a.k.channel, busyUntil)
			continue
		}
		hub.sawBusy(a.k.channel, busyUntil)
		switch a.sleep(ctx, w, busyUntil, waitUntil) {
		case wokeUp, expired:
		case waitOver:
			return nil, a.busy(-1, budgetCut)
		default:
			return nil, a.waitErr(ctx, nil, budgetCut)
		}
	}
}

func (a *call) join(ctx context.Context, waitUntil time.Time) (*waiter, error) {
	jctx, cancel := context.WithDeadline(ctx, waitUntil)
	defer cancel()
	return a.c.hub.join(jctx, a.k.channel)
}

type wakeReason uint8

const (
	wokeUp   wakeReason = iota // release notification
	expired                    // the holder's lease ran out
	waitOver                   // the wait (or the budget) ended
	ctxDone                    // the caller's context ended
)

func (a *call) sleep(ctx context.Context, w *waiter, busyUntil, waitUntil time.Time) wakeReason {
	until, reason := waitUntil, waitOver
	if !busyUntil.IsZero() && busyUntil.Before(until) {
		until, reason = busyUntil, expired
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-w.wake:
		return wokeUp
	case <-t.C:
		return reason
	case <-ctx.Done():
		return ctxDone
	}
}

func (a *call) busy(pttl time.Duration, budgetEnded bool) error {
	a.observe(Event{Kind: EventBusy})
	if budgetEnded {
		return fmt.Errorf("%w: key %q: waited until the budget ran out: %w", ErrBusy, a.key, context.DeadlineExceeded)
	}
	if pttl >= 0 {
		return fmt.Errorf("%w: key %q is held by another owner for %v more", ErrBusy, a.key, pttl.Round(time.Millisecond))
	}
	return fmt.Errorf("%w: key %q is held by another owner", ErrBusy, a.key)
}

// waitErr reports why waiting stopped early: the caller's context, or the
// budget running out.
func (a *call) waitErr(ctx context.Context, err error, budgetCut bool) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			// The caller's deadline is this call's budget.
			return a.busy(-1, true)
		}
		return fmt.Errorf("lease: waiting for key %q: %w", a.key, ctxErr)
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		return a.busy(-1, budgetCut)
	}
	return fmt.Errorf("lease: waiting for key %q: %w", a.key, err)
}

// acquireOnce sends one acquire. It returns the lease on a grant, the
// holder's remaining time when busy (-1 if unknown), or an error.
func (a *call) acquireOnce(ctx context.Context) (*Lease, time.Duration, error) {
	ttl := a.spec.TTL
	sent := time.Now()
	// A reply read after the lease's own end is worthless; one read after
	// valid-until − MinValidity is a known grant that cannot be entered
	// (ErrLowValidity).
	limit := sent.Add(ttl - drift(ttl))
	if lim := a.end.Add(-a.reserve); lim.Before(limit) {
		limit = lim
	}
	actx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()

	fence := "0"
	if a.spec.Fence {
		fence = "1"
	}
	keys := []string{a.k.lock, a.k.fence}
	args := []any{a.id, ms(ttl), fence, ms(a.c.counterTTL)}
	var (
		vals  []any
		acked = -1
		err   error
	)
	if a.c.replicas > 0 {
		vals, acked, err = a.acquireReplicated(actx, keys, args)
	} else {
		vals, err = acquireScript.Run(actx, a.c.rdb, keys, args...).Slice()
	}
	if err != nil {
		return nil, 0, a.unknown(ctx, err)
	}
	granted, tok, pttl, perr := parseAcquire(vals)
	if perr != nil {
		return nil, 0, a.unknown(ctx, perr)
	}
	if !granted {
		return nil, pttl, nil
	}
	a.sent, a.token = sent, tok
	validUntil := sent.Add(ttl - drift(ttl))
	if left := time.Until(validUntil); left < a.spec.MinValidity {
		a.observe(Event{Kind: EventLowValidity})
		rerr := a.releaseAfterRefusal(ctx)
		return nil, 0, fmt.Errorf("%w: key %q: %v left, need %v%s", ErrLowValidity, a.key, left.Round(time.Millisecond), a.spec.MinValidity, rerr)
	}
	if acked >= 0 && acked < a.c.replicas {
		e := fmt.Errorf("%w: key %q: grant acknowledged by %d of %d replicas", ErrUnknown, a.key, acked, a.c.replicas)
		a.observe(Event{Kind: EventUnreplicated, Err: e})
		return nil, 0, fmt.Errorf("%w%s", e, a.releaseAfterRefusal(ctx))
	}
	l := &Lease{
		c: a.c, key: a.key, owner: a.id, token: tok, fenced: a.spec.Fence,
		validUntil: validUntil, lost: make(chan struct{}),
	}
	l.parent, _ = FromContext(ctx)
	a.observe(Event{Kind: EventAcquired, Wait: time.Since(a.start)})
	return l, 0, nil
}

// acquireReplicated sends the acquire and WAIT in one pipeline on the
// connection to the key's master, and returns how many replicas acknowledged.
func (a *call) acquireReplicated(ctx context.Context, keys []string, args []any) ([]any, int, error) {
	for try := 0; ; try++ {
		pipe, err := a.c.pipeliner(ctx, a.k.lock)
		if err != nil {
			return nil, 0, err
		}
		eval := pipe.EvalSha(ctx, acquireScript.Hash(), keys, args...)
		wait := pipe.Do(ctx, "WAIT", a.c.replicas, ms(a.c.replicaTimeout))
		_, _ = pipe.Exec(ctx)
		if err := eval.Err(); err != nil {
			if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if err := acquireScript.Load(ctx, a.c.rdb).Err(); err != nil {
					return nil, 0, err
				}
				continue
			}
			return nil, 0, err
		}
		vals, err := eval.Slice()
		if err != nil {
			return nil, 0, err
		}
		n, err := wait.Int()
		if err != nil {
			return nil, 0, err
		}
		return vals, n, nil
	}
}

func parseAcquire(vals []any) (granted bool, tok Token, pttl time.Duration, err error) {
	if len(vals) != 3 {
		return false, 0, 0, fmt.Errorf("lease: unexpected acquire reply %v", vals)
	}
	g, ok1 := vals[0].(int64)
	ts, ok2 := vals[1].(string)
	p, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return false, 0, 0, fmt.Errorf("lease: unexpected acquire reply %v", vals)
	}
	t, err := strconv.ParseUint(ts, 10, 64)
	if err != nil {
		return false, 0, 0, fmt.Errorf("lease: unexpected token %q in acquire reply", ts)
	}
	pttl = -1
	if p >= 0 {
		pttl = time.Duration(p) * time.Millisecond
	}
	return g == 1, Token(t), pttl, nil
}

// unknown handles an acquire whose outcome is unknown: fn is not called and
// one bounded conditional release is sent with the same identity.
func (a *call) unknown(ctx context.Context, err error) error {
	e := fmt.Errorf("%w: acquire of key %q: %w", ErrUnknown, a.key, err)
	a.observe(Event{Kind: EventAcquireUnknown, Err: e})
	return fmt.Errorf("%w%s", e, a.releaseAfterRefusal(ctx))
}

// releaseAfterRefusal releases a grant that will not be used and returns a
// suffix for the error message when the release is unconfirmed.
func (a *call) releaseAfterRefusal(ctx context.Context) string {
	if _, err := a.release(ctx, 0); err != nil {
		return fmt.Sprintf(" (release unconfirmed: %v)", err)
	}
	return ""
}

// release deletes the lease if this attempt still holds it (or, with hold >
// 0, sets the remaining hold as its TTL), on a context detached from the
// caller's and bounded by the budget. Its result: 1 released, 2 hold set,
// 0 not held, -1 held by another owner.
func (a *call) release(ctx context.Context, hold time.Duration) (int64, error) {
	now := time.Now()
	dl := a.end
	if floor := now.Add(min(a.reserve, 20*time.Millisecond)); dl.Before(floor) {
		dl = floor
	}
	if cap := now.Add(a.c.releaseTimeout); cap.Before(dl) {
		dl = cap
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
	defer cancel()
	holdMS := int64(0)
	if hold > 0 {
		holdMS = ms(hold)
	}
	res, err := releaseScript.Run(rctx, a.c.rdb, []string{a.k.lock, a.k.channel}, a.id, holdMS, "PUBLISH").Int64()
	if err != nil {
		a.observe(Event{Kind: EventReleaseUnconfirmed, Err: fmt.Errorf("lease: release of key %q unconfirmed: %w", a.key, err)})
		return 0, err
	}
	if res >= 0 {
		a.observe(Event{Kind: EventReleased})
	}
	return res, nil
}

// run calls fn under the lease: renewal, loss and deadline cancellation,
// then the release.
func (a *call) run(ctx context.Context, l *Lease, fn func(context.Context) error) (err error) {
	lctx, cancelLost := context.WithCancelCause(ctx)
	fctx, cancelDeadline := context.WithDeadlineCause(lctx, a.end.Add(-a.reserve), ErrDeadline)
	fctx = context.WithValue(fctx, ctxKey{}, l)
	k := a.keep(l, cancelLost)

	returned := false
	defer func() {
		deadlineHit := fctx.Err() != nil && errors.Is(context.Cause(fctx), ErrDeadline)
		k.stop()
		cancelDeadline()
		cancelLost(nil)
		hold := time.Until(a.sent.Add(a.spec.HoldMin))
		if res, _ := a.release(ctx, hold); res == -1 {
			// Another owner holds the key: ours ended unseen (deleted from
			// outside, then taken) while fn ran.
			a.lose(l, cancelLost)
		}
		if !returned {
			return // fn panicked: the panic goes on after the cleanup
		}
		switch {
		case l.isLost():
			if err != nil {
				err = fmt.Errorf("%w: key %q: %w", ErrLost, a.key, err)
			} else {
				err = fmt.Errorf("%w: key %q: the function's effects may have run partly unprotected", ErrLost, a.key)
			}
		case deadlineHit:
			a.observe(Event{Kind: EventDeadlineExceeded})
			if err != nil {
				err = fmt.Errorf("%w: key %q (%v budget): %w", ErrDeadline, a.key, a.spec.Deadline, err)
			} else {
				err = fmt.Errorf("%w: key %q (%v budget)", ErrDeadline, a.key, a.spec.Deadline)
			}
		}
	}()
	err = fn(fctx)
	returned = true
	return err
}

// lose marks the lease lost once: Lost() closes and fn's context is
// cancelled with cause ErrLost.
func (a *call) lose(l *Lease, cancel context.CancelCauseFunc) {
	l.lostOnce.Do(func() {
		close(l.lost)
		cancel(ErrLost)
		a.observe(Event{Kind: EventLost, Err: ErrLost})
	})
}

// keeper watches one lease while fn runs: the validity timer cancels fn's
// context at valid-until, whatever renewal is doing, so loss cancels fn at
// once rather than at the next renewal; the Client's renewer extends it.
type keeper struct {
	r      *renewal
	mu     sync.Mutex
	halted bool
	expiry *time.Timer
}

func (a *call) keep(l *Lease, cancelLost context.CancelCauseFunc) *keeper {
	k := &keeper{}
	k.expiry = time.AfterFunc(time.Until(l.validUntil), func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.halted {
			return
		}
		l.mu.Lock()
		left := time.Until(l.validUntil)
		l.mu.Unlock()
		if left > 0 {
			k.expiry.Reset(left)
			return
		}
		a.lose(l, cancelLost)
	})
	interval := a.spec.TTL / 3
	k.r = &renewal{a: a, l: l, cancel: cancelLost, interval: interval, next: a.sent.Add(interval), index: -1}
	a.c.renew.add(k.r)
	return k
}

func (k *keeper) stop() {
	k.r.a.c.renew.remove(k.r)
	k.mu.Lock()
	k.halted = true
	k.expiry.Stop()
	k.mu.Unlock()
}
