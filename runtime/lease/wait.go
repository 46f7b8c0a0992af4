package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// obtain gets the lease: one acquire, and while it is busy and spec.Wait
// allows, keeps a place in the key's queue and sleeps until the lease is
// released to it (the release hands it to the first waiter and names it),
// the holder's lease runs out, or a re-check is due, and tries again.
// Waiting stops in time for the work to get MinValidity of the budget (and
// the release its reserve); the last try is made at that moment, so a lease
// freed without notification near the end of the wait is still taken.
func (a *call) obtain(ctx context.Context) (*Lease, error) {
	a.newAttempt()
	if err := a.c.waitCommandTable(ctx, "", a.key, a.end.Add(-a.reserve)); err != nil {
		if errors.Is(err, ErrRefused) {
			a.observe(Event{Kind: EventRefused, Err: err})
		}
		return nil, err
	}
	var waitUntil time.Time
	capped := false
	if a.spec.Wait > 0 {
		waitUntil = a.start.Add(a.spec.Wait)
		if lim := a.end.Add(-a.reserve - a.spec.MinValidity); !waitUntil.Before(lim) {
			waitUntil, capped = lim, true
		}
	}
	hub := a.c.hub
	var (
		w   *waiter
		got bool
	)
	mayWait := !waitUntil.IsZero()
	if mayWait {
		// A release may hand this call the lease between its busy answer
		// and its join: the hub keeps a message for it.
		hub.expect(a.id)
	}
	defer func() {
		hub.leave(w, got)
		if mayWait {
			hub.forget(a.id, &a.k, got)
		}
	}()
	for {
		sent := time.Now()
		l, pttl, err := a.acquireOnce(ctx, waitUntil)
		if err != nil && !errors.Is(err, ErrUnknown) && !errors.Is(err, ErrLowValidity) {
			// Refused, or no budget left: leave the queue (an unknown or
			// too-late grant was released already, with the place).
			a.giveUp(ctx)
		}
		if err != nil || l != nil {
			got = l != nil
			return l, err
		}
		now := time.Now()
		if waitUntil.IsZero() || !now.Before(waitUntil) {
			a.giveUp(ctx)
			return nil, a.busy(pttl, capped)
		}
		if !a.waiting {
			a.waiting = true
			a.observe(Event{Kind: EventWaiting})
		}
		if w == nil {
			w = hub.join(&a.k, a.id, a.member, sent)
		}
		busyUntil := time.Time{}
		if pttl >= 0 {
			busyUntil = now.Add(pttl)
		}
		switch r := a.sleep(ctx, w, busyUntil, waitUntil); r {
		case ctxDone, closed:
			if w.state.Load() != waiterAbandoned {
				a.giveUp(ctx) // else Close gave up its place (see waitHub.close)
			}
			return nil, a.waitErr(ctx, r)
		case wokeUp:
			if l := a.enterOnNotice(hub.notice(w)); l != nil {
				got = true
				return l, nil
			}
		}
	}
}

// enterOnNotice enters a lease that a release handed to this call, on the
// release's message alone: no round trip. The message ("id|seq|token|px",
// see release.lua) names the acquire whose busy answer the call's queue
// entry last came from, and how long the key was set for. When that is the
// call's last acquire and px is the call's TTL, the release ran after that
// acquire found the key busy, so after it was sent: the lease is valid
// until that send + TTL − drift, as if that acquire had granted it.
// Anything else leads to another acquire, which finds a grant and
// confirms it (extending it to a full TTL): an older message, a short
// claim (see release.lua), a grant with less than MinValidity left or past
// the acquire's share of the budget, and any grant on a Client that waits
// for replicas (only an acquire followed by WAIT confirms it). An identity
// holds no '|' (an owner in it is escaped with KeyPart).
func (a *call) enterOnNotice(note string) *Lease {
	if note == "" || a.c.replicas > 0 || a.busySeq == 0 {
		return nil
	}
	f := strings.SplitN(note, "|", 5)
	if len(f) != 4 || f[1] != strconv.FormatInt(a.busySeq, 10) {
		return nil
	}
	tok, err1 := strconv.ParseUint(f[2], 10, 64)
	px, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || a.spec.Fence != (tok != 0) || px != ms(a.spec.TTL) {
		// Only a full TTL: renewals are due by TTL/3 from the grant.
		return nil
	}
	ttl := a.spec.TTL
	validUntil := a.busySent.Add(ttl - drift(ttl))
	now := time.Now()
	if validUntil.Sub(now) < a.spec.MinValidity || !now.Before(a.end.Add(-a.reserve)) {
		return nil
	}
	a.sent, a.token = a.busySent, Token(tok)
	return a.granted(Token(tok), validUntil)
}

type wakeReason uint8

const (
	wokeUp   wakeReason = iota // a release notification, or the subscription came up
	expired                    // the holder's lease ran out
	recheck                    // the re-check interval passed
	waitOver                   // the wait (or the budget) ended: one last try
	ctxDone                    // the caller's context ended
	closed                     // the Client was closed
)

func (a *call) sleep(ctx context.Context, w *waiter, busyUntil, waitUntil time.Time) wakeReason {
	until, reason := waitUntil, waitOver
	if !busyUntil.IsZero() && busyUntil.Before(until) {
		until, reason = busyUntil, expired
	}
	// Notifications can be missed (a dropped subscription, a missing
	// permission, a failover, a hold-min that only shortened the TTL):
	// look again at least every re-check interval.
	if rc := time.Now().Add(a.c.recheck); rc.Before(until) {
		until, reason = rc, recheck
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	w.state.Store(waiterAsleep)
	var r wakeReason
	select {
	case <-w.wake:
		r = wokeUp
	case <-t.C:
		r = reason
	case <-ctx.Done():
		r = ctxDone
	case <-a.c.hub.closing:
		r = closed
	}
	if !w.state.CompareAndSwap(waiterAsleep, waiterActive) {
		// Close abandoned this waiter while it slept, and gives up its
		// place (and a lease a release handed it) on its behalf: it must
		// not enter, nor send anything more.
		return closed
	}
	return r
}

// busy is the error for a wait that ended without a grant.
func (a *call) busy(pttl time.Duration, capped bool) error {
	a.observe(Event{Kind: EventBusy})
	held := fmt.Sprintf("key %q is held by another owner", a.key)
	if pttl >= 0 {
		held += fmt.Sprintf(" for %v more", pttl.Round(time.Millisecond))
	}
	switch {
	case a.spec.Wait == 0:
		return fmt.Errorf("%w: %s", ErrBusy, held)
	case capped:
		budget, keep := a.end.Sub(a.start), a.spec.MinValidity+a.reserve
		when := fmt.Sprintf("waiting stops %v before the %v budget ends", keep.Round(time.Millisecond), budget.Round(time.Millisecond))
		if keep >= budget {
			when = fmt.Sprintf("the %v budget leaves no time to wait", budget.Round(time.Millisecond))
		}
		return fmt.Errorf("%w: %s; waited %v of Wait %v: %s, to leave MinValidity %v for the work and %v for the release",
			ErrBusy, held, time.Since(a.start).Round(time.Millisecond), a.spec.Wait, when, a.spec.MinValidity, roundShort(a.reserve))
	}
	return fmt.Errorf("%w: %s; waited %v", ErrBusy, held, a.spec.Wait)
}

// waitErr reports why waiting stopped early: the caller's context, or the
// Client closing.
func (a *call) waitErr(ctx context.Context, r wakeReason) error {
	if r == closed {
		return fmt.Errorf("%w: while waiting for key %q", ErrClosed, a.key)
	}
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		a.observe(Event{Kind: EventBusy})
		return fmt.Errorf("%w: key %q: the caller's deadline passed while waiting: %w", ErrBusy, a.key, err)
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("lease: waiting for key %q: %w (cause: %w)", a.key, err, cause)
	}
	return fmt.Errorf("lease: waiting for key %q: %w", a.key, err)
}

// roundShort rounds d for a message: to the millisecond, or to the
// microsecond below one.
func roundShort(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
