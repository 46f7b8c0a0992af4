package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// run calls fn under the lease: renewal, loss and deadline cancellation,
// then the release. A lease whose validity ended before fn returned, or that
// the release finds no longer ours, is lost whatever the timers did.
func (a *call) run(ctx context.Context, l *Lease, fn func(context.Context) error) (err error) {
	a.c.running.Add(1)
	defer a.c.leftRun()
	if a.lctx == nil {
		a.makeContexts(ctx)
	}
	dctx, cancelLost, cancelDeadline := a.lctx, a.cancelLost, a.cancelDeadline
	l.setCall(cancelLost)
	if l.isLost() {
		// Lost while passing to this call (a kept lease): the loss
		// cancelled the previous call's context, not this one's.
		cancelLost(l.Err())
	}
	l.cur.Store(a)
	holdUntil := a.sent // no hold of this call's own
	if a.spec.HoldMin > 0 {
		// HoldMin keeps the lease at least that long after the grant:
		// counted from now, when the grant is known, not from a.sent,
		// which for a waiter handed the lease is when it last asked (the
		// grant may have come a whole wait later).
		holdUntil = time.Now().Add(a.spec.HoldMin)
	}
	heldBefore := l.holdTo(holdUntil)
	a.fctx = refCtx{Context: dctx, ref: leaseRef{l: l, a: a, parent: refFrom(ctx)}}
	fctx := &a.fctx
	w := l.w
	if w == nil {
		w = a.watch(l)
		l.w = w
	} else {
		w.extend(a.end) // a kept lease: renewed until this call's deadline
	}
	a.inFn.Store(true)

	returned, taken := false, false
	defer func() {
		now := time.Now() // when fn returned (or the call gave up entering it)
		a.unsettle()      // out of fn (or never in it)
		a.inFn.Store(false)
		entered := !a.entered.IsZero() // fn was called (see the entry check)
		// Overrun is loss: checked before the timer is disarmed, so a timer
		// that could not run in time (a busy CPU) changes nothing.
		validAtReturn := l.valid()
		if entered && now.After(validAtReturn) {
			l.lose(a.lossCause(l, "the function returned after the lease's validity ended"))
		}
		deadlineHit := !a.unbounded && budgetEnded(ctx, dctx, a.end.Add(-a.reserve), now)
		if a.nestedN.Load() > 0 {
			a.endNested() // nested calls still running: a loss to them
		}
		cancelLost(&a.endCause) // first: dctx and nested calls inherit this cause
		cancelDeadline()
		if entered && returned && !l.isLost() && a.c.keep(l, a) {
			// Kept (Spec.Keep): renewed, released later or reused. Lost
			// while keep asked Redis (fn had returned in time, so the call
			// stands): the report may have come before the lease was kept,
			// so forget it here too; its EventLost precedes EventDone.
			if l.awaitReport() {
				a.c.dropKept(l)
				a.endCause.loss.Store(l.Err())
			}
			if deadlineHit {
				// Kept, but the budget ran out while fn ran: the caller
				// must know, as without Keep.
				a.observe(Event{Kind: EventDeadlineExceeded})
				err = deadlineErr(a, err)
			}
			return
		}
		a.c.unkeep(l) // a reused kept lease whose fn panicked is released too
		w.stop()
		if taken {
			// Close took this grant before fn was entered and releases
			// it itself: nothing more to send.
			l.ended.Store(true)
			return
		}

		l.mu.Lock()
		hold := time.Until(l.holdUntil)
		l.mu.Unlock()
		if !entered {
			// No work ran in this call: only an earlier call's hold-min
			// (a kept lease's) is left to honour.
			hold = time.Until(heldBefore)
		}
		var r released
		if l.a != a && a.releaseUnbounded() {
			// A kept lease this call took, given up with its budget all
			// but spent (a keep it could not confirm): released within the
			// release timeout in the background, as takeKept does, not
			// within the spent budget, where the release failed and left
			// the key held for its TTL (TestAdversary55_KeptReleaseWithSpentBudget).
			// Its outcome is observed there (a key it finds no longer held
			// as EventReleaseUnconfirmed), not in the call's error: with
			// the budget spent, the call's own release could not have told.
			a.c.releaseKeptLater(l)
			r.res = 1
		} else {
			r = a.release(ctx, hold)
		}
		l.ended.Store(true)
		if r.err == nil && (r.res == -3 || r.res <= 0 && !r.at.After(validAtReturn)) {
			// Answered within our validity: the key was not ours while we
			// were entitled to it (deleted from outside, or a failover that
			// lost it, then possibly taken). A forced release always is.
			what := "the key no longer held this lease (deleted from outside, or lost in a failover)"
			switch r.res {
			case -1:
				what = "the key was held by another owner"
			case -3:
				what = "the lease was released from outside (ForceRelease, e.g. leasectl release)"
			}
			l.lose(fmt.Errorf("%w: key %q: at release, %s", ErrLost, a.key, what))
		}
		lost := l.awaitReport() // EventLost before the call's EventDone
		if lost {
			a.endCause.loss.Store(l.Err()) // found at the end: fn's context's cause says so too
		}
		if !returned {
			return // fn panicked: the panic goes on after the cleanup
		}
		switch {
		case !entered:
			// Not entered for want of validity: err says so, whatever the
			// validity timer reported meanwhile.
		case lost && deadlineHit:
			// Both: the budget ran out (no renewal after it), then the
			// lease, while fn went on.
			a.observe(Event{Kind: EventDeadlineExceeded})
			err, a.lostOwn = lostAfterDeadline(a, lostErr(l.Err(), err)), true
		case lost:
			err, a.lostOwn = lostErr(l.Err(), err), true
		case deadlineHit:
			a.observe(Event{Kind: EventDeadlineExceeded})
			err = deadlineErr(a, err)
		}
	}()
	// The grant (or the kept lease) had MinValidity left when it was
	// checked, but this goroutine may have been paused since (a GC pause, a
	// stopped process, a slow Observer): look again as the last thing
	// before fn, so that no call starts its work on a lease that is about
	// to expire, or has, and may be someone else's by now.
	// A kept lease may also have been found lost meanwhile (a renewal
	// refused, a notice checked): the loss does not move the validity
	// clock, so it is looked at too.
	switch a.enter() {
	case gateAbandoned:
		taken, returned = true, true
		return fmt.Errorf("%w: key %q: the Client was closed before the function was entered (Close released the lease)", ErrClosed, a.key)
	case gateAfterClose:
		returned = true
		return fmt.Errorf("%w: key %q: the Client was closed before the function was entered", ErrClosed, a.key)
	}
	// The validity clock first: a lease whose validity ran out before
	// entry (a slow Observer, a pause) is refused for that, whether or not
	// its validity timer has marked it lost yet, so the error does not
	// depend on which goroutine ran first (TestAdversary18_RefusedEntryReleasesAtOnce).
	now := time.Now()
	if left := l.valid().Sub(now); left < a.spec.MinValidity {
		err = fmt.Errorf("%w: key %q: %v left when the function was to be entered, need %v", ErrLowValidity, a.key, max(left, 0).Round(time.Millisecond), a.spec.MinValidity)
		a.observe(Event{Kind: EventLowValidity, Err: err})
		returned = true
		return err
	}
	if l.isLost() {
		// Both classes: not entered (ErrLowValidity), and the kept lease
		// is lost with validity left (ErrLost, as Spec.Keep says its calls
		// get once the loss is known; TestAdversary17_KeptReuseRightAfterForceRelease
		// saw the loss land between takeKept and this check).
		err = fmt.Errorf("%w: key %q: the lease was lost before the function was entered (%w)", ErrLowValidity, a.key, l.Err())
		a.observe(Event{Kind: EventLowValidity, Err: err})
		returned, a.lostOwn = true, true // EventDone's Lost: the call's own (kept) lease
		return err
	}
	a.entered = now
	a.settle()
	err = fn(fctx)
	returned = true
	return err
}

// makeContexts makes fn's context before the acquire, whose requests it
// also bounds (see acquireOnce): one cancelled with the loss's cause, and
// under it one with the call's deadline (none for a leader term, which
// runs until ctx ends). A call that does not enter fn stops them.
//
// The deadline stays a standard context with a runtime timer of its own,
// unlike the call's other timed work (see clock): a context of another
// type between the caller's and fn's would hear of the caller's
// cancellation only through context.AfterFunc, on a goroutine, so fn's
// context would end a moment after the caller's cancel returned instead of
// within it (TestAdversary35_CallerCancelReachesFnContextBeforeCancelReturns);
// and only the standard timer context ends its children with
// DeadlineExceeded.
func (a *call) makeContexts(ctx context.Context) {
	lctx, cancelLost := context.WithCancelCause(ctx)
	a.lctx, a.cancelLost, a.cancelDeadline = lctx, cancelLost, context.CancelFunc(nop)
	if !a.unbounded {
		a.lctx, a.cancelDeadline = context.WithDeadlineCause(lctx, a.end.Add(-a.reserve), ErrDeadline)
	}
}

func nop() {}

// budgetEnded reports whether fn's context fctx (deadline fnEnd, under
// the caller's ctx) ended because the call's budget ran out, fn having
// returned at returned: never when fn returned before fnEnd (it returned
// within its budget, whatever ended its context while the call's end ran).
// Its own deadline ends fctx with ErrDeadline itself (not an error
// wrapping it: a caller may cancel with one, as errgroup does with a
// sibling call's error). The caller's deadline comes at or after fnEnd
// (the budget is the earlier of the two), but either timer may run first
// when they come due together: a nested call whose budget is its caller's
// deadline, or any call after the process was paused across both
// (TestAdversary55_*). So, by how the caller's context ended:
//   - not at all, or cancelled: the runtime's own deadline, that of this
//     call or (a nested call) of the enclosing one;
//   - by its deadline, one at or after fnEnd: the budget, unless a loss
//     came first (its cause wraps ErrLost).
//
// Causes are told apart by identity with, or errors.Is for, the runtime's
// own errors, never compared with the caller's: == on two errors of the
// same uncomparable type (a slice error) panics; with ErrDeadline's type
// it cannot.
func budgetEnded(ctx, fctx context.Context, fnEnd, returned time.Time) bool {
	if fctx.Err() == nil || returned.Before(fnEnd) {
		return false
	}
	cause := context.Cause(fctx)
	if ctx.Err() == context.DeadlineExceeded {
		d, ok := ctx.Deadline()
		return ok && !d.Before(fnEnd) && !errors.Is(cause, ErrLost)
	}
	return cause == ErrDeadline
}

// stopContexts ends the contexts of a call that did not enter fn.
func (a *call) stopContexts() {
	if a.lctx != nil {
		a.cancelDeadline()
		a.cancelLost(nil)
	}
}

// refCtx is fn's context: the call's context and the lease reference
// that FromContext and nested calls find, in one value allocated with the
// call (context.WithValue would cost two allocations).
type refCtx struct {
	context.Context
	ref leaseRef
}

func (c *refCtx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return &c.ref
	}
	return c.Context.Value(key)
}

// limitCtx is a context with an earlier deadline than its parent's: it
// saves the allocations and timer of context.WithDeadline on the hot path.
// go-redis (ContextTimeoutEnabled) bounds a request's dial, writes and
// reads by Deadline, and its waits (a pool turn, a retry's pause) by
// Done. Done is the parent's until the limit, and a closed channel from
// then on, with Err DeadlineExceeded: a wait that begins after the limit
// (go-redis's retry of a read that timed out at the limit) ends at once,
// as under WithDeadline; one that began before it ends by the parent's
// end (the call's budget). Done changing over time is outside the Context
// contract; only go-redis sees this context, and it asks Done anew for
// every wait.
type limitCtx struct {
	context.Context
	limit time.Time
}

func (c *limitCtx) Deadline() (time.Time, bool) { return c.limit, true }

func (c *limitCtx) Done() <-chan struct{} {
	if !time.Now().Before(c.limit) {
		return closedChan
	}
	return c.Context.Done()
}

func (c *limitCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.limit) {
		return context.DeadlineExceeded
	}
	return nil
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// releaseCtx is the release's context, allocated with the call: the
// values of the caller's context (a trace span for hooks), none of its
// cancellation, and the release's own deadline. It is
// context.WithDeadline(context.WithoutCancel(ctx), dl) without their
// allocations on the hot path: its Done channel and timer are made when
// Done is first asked for (go-redis asks once per command, to bound a wait
// for a pooled connection by the deadline). Like WithDeadline's cancel,
// stop ends it when the release is over: a hook's context.AfterFunc runs,
// and a goroutine that waits on Done ends (TestAdversary27_ReleaseCtxDoneAfterRelease).
type releaseCtx struct {
	parent context.Context
	dl     time.Time

	k      *clock // the Client's: the deadline's tick runs on it
	mu     sync.Mutex
	done   chan struct{}
	dlTick tick  // closes done at dl, once Done was asked for
	err    error // set when done is closed
}

func (c *releaseCtx) Deadline() (time.Time, bool) { return c.dl, true }

func (c *releaseCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		switch d := time.Until(c.dl); {
		case c.err != nil:
			c.done = closedChan
		case d <= 0:
			c.done, c.err = closedChan, context.DeadlineExceeded
		default:
			c.done = make(chan struct{})
			c.k.set(&c.dlTick, c.dl, c)
		}
	}
	return c.done
}

// Err is DeadlineExceeded once the deadline passed, Canceled once the
// release is over, as for WithDeadline.
func (c *releaseCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && c.done == nil && !time.Now().Before(c.dl) {
		// Past the deadline before anyone asked for Done: no timer needed.
		c.done, c.err = closedChan, context.DeadlineExceeded
	}
	return c.err
}

// Value is the caller's context's, except the context package's own key
// for finding a parent's cancellation (context.Cause, and contexts made
// from this one): the caller's is not this one's. A value that is itself
// a context (a framework's request context) is the caller's like any other.
func (c *releaseCtx) Value(key any) any {
	if key == cancelCtxKey && cancelCtxKey != nil {
		return nil
	}
	v := c.parent.Value(key)
	if _, ok := v.(context.Context); ok && cancelCtxKey == nil {
		return nil // the key is unknown (see cancelCtxKey): hide any context
	}
	return v
}

// fire is the deadline, on the Client's clock.
func (c *releaseCtx) fire() { c.end(context.DeadlineExceeded) }

// end closes done with err, once.
func (c *releaseCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	if c.k != nil {
		c.k.stop(&c.dlTick)
	}
	if c.done == nil {
		c.done = closedChan
	} else {
		close(c.done)
	}
}

// stop ends the context (Canceled), once the release is done.
func (c *releaseCtx) stop() { c.end(context.Canceled) }

// cancelCtxKey is the key the context package asks a context's Value for
// to find its cancelCtx (context.Cause asks it of a done context): learnt
// once by asking Cause about a done context that records the key.
var cancelCtxKey = func() any {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := &keyProbe{Context: ctx}
	_ = context.Cause(p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

// lossCause is the cause of a loss detected by the clock, with the last
// renewal failure when there was one.
func (a *call) lossCause(l *Lease, what string) error {
	l.mu.Lock()
	last := l.lastErr
	l.mu.Unlock()
	if last != nil {
		return fmt.Errorf("%w: key %q: %s (last renewal: %w)", ErrLost, a.key, what, last)
	}
	return fmt.Errorf("%w: key %q: %s", ErrLost, a.key, what)
}

// watcher watches one lease while fn runs, with one timer: it first fires
// when the first renewal is due and hands the lease to the Client's
// renewer (a call shorter than TTL/3 never touches the renewer), then at
// valid-until, where it cancels fn's context whatever renewal is doing, so
// loss cancels fn at once rather than at the next renewal.
type watcher struct {
	a *call
	l *Lease
	r renewal
	// timer: the first renewal's due time, then valid-until. A runtime
	// timer of its own, not the Client's clock: with many leases held the
	// watchers fire thousands of times a second, which cost a tenth more
	// CPU on the clock's one heap and lock (cmd/leasebench -run 3:
	// 10.6–11.0% of a core against 8.6–9.1%).
	timer *time.Timer

	mu         sync.Mutex // orders fire's registration against stop
	registered bool
	stopped    bool
}

func (a *call) watch(l *Lease) *watcher {
	interval := a.spec.TTL / 3
	w := &a.grant().w // allocated with the call (see newCall)
	w.a, w.l = a, l
	w.r = renewal{a: a, l: l, interval: interval, slack: min(batchWindow, interval/8), index: -1, end: a.end}
	w.r.setNext(a.sent.Add(interval))
	// Armed once, at its due time (a second operation, arming far off and
	// then resetting, costs the runtime another timer update). Under w.mu:
	// fire, which reads w.timer, waits for it (a late grant's first renewal
	// may be due at once).
	w.mu.Lock()
	w.timer = time.AfterFunc(time.Until(w.r.next), w.fire)
	w.mu.Unlock()
	return w
}

func (w *watcher) fire() {
	l := w.l
	if l.isLost() {
		return
	}
	// The timer runs until stop, whether a call is in its function or the
	// lease is kept between calls: no state change in between can leave
	// the lease unwatched.
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if !w.registered {
		w.registered = true
		w.a.c.renew.add(&w.r)
	}
	if valid := l.valid(); time.Now().Before(valid) {
		// Renewed meanwhile, or the first renewal just queued. Under w.mu:
		// a stop that came after the check above would find the timer
		// already fired, and this Reset would arm it again for a call that
		// has ended (TestAdversary35_WatcherTickNotLeftAfterStop).
		w.timer.Reset(time.Until(valid))
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	what := "its validity ran out before a renewal was confirmed"
	rn := w.a.c.renew
	rn.mu.Lock()
	// flight first: while a batch is in flight, its goroutine sets next
	// under the renewal's own mu, not the renewer's (see renewer.renew).
	stoppedAtEnd := w.r.flight == nil && !w.r.next.Before(w.r.end)
	rn.mu.Unlock()
	if stoppedAtEnd {
		// No renewal failed: none is sent from the call's deadline on
		// (or a kept lease's end), and the function went on past it.
		what = "its validity ran out after renewal stopped at the call's deadline (the function went on past it)"
	}
	l.lose(l.cur.Load().lossCause(l, what))
}

// extend renews the lease until end (a kept lease, taken by a new call or
// kept again): its renewal goes back into the renewer's queue if it had
// left it because the previous end came.
func (w *watcher) extend(end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.a.c.renew.setEnd(&w.r, end, w.registered)
}

func (w *watcher) stop() {
	w.mu.Lock()
	w.stopped = true
	registered := w.registered
	w.mu.Unlock()
	if registered {
		w.a.c.renew.remove(&w.r)
	}
	w.timer.Stop()
}
