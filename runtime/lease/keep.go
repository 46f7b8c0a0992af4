package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kept leases (Spec.Keep). A call with Keep > 0 does not release its lease
// when fn returns: the Client keeps it, renewed, for up to Keep, and the
// next call on the key in this Client enters at once (no round trip) with
// the same fencing token, if the lease has enough validity left. A waiter
// in another process announces itself (its acquire publishes "w" on the
// key's channel when it joins the queue, and again at each re-check, so
// that a keeper that missed one hears the next); the Client then releases the
// lease as soon as no call is using it, handing it to that waiter. A kept
// lease that is lost is forgotten; the next call acquires afresh.

// kept is one lease the Client keeps between calls.
type kept struct {
	l      *Lease
	inUse  bool // a call is using it
	wanted bool // a waiter elsewhere asked for it: release after the call
	end    tick // ends the keep (see fire)
}

// keep is called when a call using l returns with the lease intact: it
// keeps l for a.spec.Keep, or reports false (the caller then releases).
func (c *Client) keep(l *Lease, a *call) bool {
	if a.spec.Keep <= 0 || a.spec.TTL != l.a.spec.TTL {
		c.unkeep(l)
		return false
	}
	if l.kept.Load() && !c.hub.trusted(l.a.k.channel) {
		// A later call of the episode, but a notice may have said the
		// key changed hands (or the subscription is not live): ask Redis
		// before keeping, as the first call does.
		if c.verifyKept(l, a.end, false) != keptOK {
			return false // run releases (a handoff) and reports a loss
		}
	}
	c.keptMu.Lock()
	if c.closed.Load() { // decided under keptMu: Close releases what is kept
		c.keptMu.Unlock()
		c.unkeep(l)
		return false
	}
	e := c.kept[l.key]
	switch {
	case e != nil && e.l != l:
		c.keptMu.Unlock()
		return false
	case e != nil && e.wanted:
		c.forgetLocked(e)
		c.keptMu.Unlock()
		c.hub.keeper(l.a.k.channel, -1)
		return false
	}
	first := e == nil
	if first {
		// The first call of a keep episode ends as a release would: by
		// asking Redis whether the key is still its own (and whether
		// anyone waits), one round trip. Until the Client subscribes to
		// the key's channel nothing else would tell it of a release from
		// outside during that call.
		c.keptMu.Unlock()
		switch c.verifyKept(l, a.end, false) {
		case keptLost, keptWanted:
			return false // run releases (a handoff) and reports the loss
		}
		// Registered as a keeper of the channel before the lease can be
		// found kept: whatever forgets it (its keep ending, a loss, an
		// unsuitable call) unregisters after this, never before (a -1
		// that came first would be dropped, and this +1 would leave the
		// channel subscribed for good).
		c.hub.keeper(l.a.k.channel, +1)
		c.keptMu.Lock()
		if c.closed.Load() || c.kept[l.key] != nil {
			c.keptMu.Unlock()
			c.hub.keeper(l.a.k.channel, -1)
			return false
		}
		e = &kept{l: l}
		c.kept[l.key] = e
		c.keptByChannel[l.a.k.channel] = l.key
	}
	until := time.Now().Add(a.spec.Keep)
	c.clock.set(&e.end, until, e)
	// Renewed until the keep ends, before the lease can be taken (inUse
	// false, under keptMu): a call that takes it sets its own end, which
	// this must not overwrite afterwards (renewals would stop at the
	// keep's end while that call's fn runs). extend takes the watcher's
	// and the renewer's locks, never keptMu.
	l.w.extend(until)
	e.inUse = false
	l.kept.Store(true)
	c.keptMu.Unlock()
	if first {
		// Hear of waiters and of releases from outside from now on (their
		// messages on the key's channel, registered above), and look once
		// more for what came before the subscription took effect.
		go c.checkKept(l.a.k.channel)
	}
	return true
}

// takeKept hands a kept lease on key to a new call with spec, if there is
// one free that suits it (same TTL, fenced if the call wants fencing, at
// least spec.MinValidity left). A kept lease that does not suit is
// released, within the call's budget (by deadline), and the call acquires
// afresh.
func (c *Client) takeKept(key string, spec Spec, deadline time.Time) *Lease {
	c.keptMu.Lock()
	e := c.kept[key]
	if e == nil || e.inUse {
		c.keptMu.Unlock()
		return nil
	}
	l := e.l
	if l.isLost() || e.wanted || spec.TTL != l.a.spec.TTL || spec.Fence && !l.fenced || l.Remaining() < spec.MinValidity {
		c.forgetLocked(e)
		c.keptMu.Unlock()
		c.hub.keeper(l.a.k.channel, -1)
		c.releaseKeptFor(l, deadline)
		return nil
	}
	e.inUse = true
	c.clock.stop(&e.end)
	c.keptMu.Unlock()
	if !c.hub.trusted(l.a.k.channel) {
		// A release from outside would not be heard, or may have been
		// missed (the subscription is not live, or came back and has not
		// been checked since): ask Redis instead, one round trip.
		switch c.verifyKept(l, deadline, false) {
		case keptLost:
			return nil // forgotten by the loss; the call acquires afresh
		case keptOK:
			// Unless it ran out, or fell below what this call needs,
			// while the answer came, or the answer took what was left of
			// the call's budget (its function would start with its
			// context ended, and the call's own release after it, within
			// the spent budget, fail).
			if !l.isLost() && l.Remaining() >= spec.MinValidity && time.Now().Before(deadline) {
				return l
			}
		}
		// Wanted by a waiter, no answer, no longer suitable, or no budget.
		c.unkeep(l)
		c.releaseKeptFor(l, deadline)
		return nil
	}
	return l
}

// releaseKeptFor releases kept lease l that a call with budget until
// deadline gave up: on the call's path, so that the call may acquire the
// key next; or, with too little left to bound a release (minReleaseBound),
// outside the budget (releaseKeptLater). Bounded by a budget that the
// check of the lease had spent, the release failed at once and left the
// key held for its TTL, the Client's own next call busy
// (TestAdversary55_KeptReleaseWithSpentBudget).
func (c *Client) releaseKeptFor(l *Lease, deadline time.Time) {
	if time.Until(deadline) >= minReleaseBound {
		c.releaseKept(l, deadline, nil)
		return
	}
	c.releaseKeptLater(l)
}

// minReleaseBound is the least time that bounds a release of a kept
// lease on a call's path: under it (a budget all but spent) the release
// could not make its round trip, and goes out within the release timeout
// instead.
const minReleaseBound = 2 * time.Millisecond

// releaseKeptLater releases kept lease l within the release timeout,
// outside the budget of the call that gave it up: on a goroutine that
// Close waits for, as for a keep that ended; once Close has looked (the
// lease was in use then), on the caller's path, since Close no longer
// waits and the go-redis client may be closed as soon as the call
// returns, within releaseOverrun (as a call's own release past its
// budget: Do stays that near its deadline, also when Redis is silent).
// Decided under keptMu, which Close's look takes after marking the
// Client closed: no release is added to keptReleases after Close waits
// for them.
func (c *Client) releaseKeptLater(l *Lease) {
	c.keptMu.Lock()
	if c.closed.Load() {
		c.keptMu.Unlock()
		c.releaseKept(l, time.Now().Add(min(c.releaseTimeout, releaseOverrun)), nil)
		return
	}
	c.keptReleases.Add(1)
	c.keptMu.Unlock()
	go c.releaseKept(l, time.Time{}, c.keptReleases.Done)
}

// unkeep forgets l if it is kept (a call that reused it without Keep of
// its own is about to release it).
func (c *Client) unkeep(l *Lease) {
	if !l.kept.Load() {
		return
	}
	c.keptMu.Lock()
	e := c.kept[l.key]
	if e == nil || e.l != l {
		c.keptMu.Unlock()
		return
	}
	c.forgetLocked(e)
	c.keptMu.Unlock()
	c.hub.keeper(l.a.k.channel, -1)
}

func (c *Client) forgetLocked(e *kept) {
	delete(c.kept, e.l.key)
	delete(c.keptByChannel, e.l.a.k.channel)
	c.clock.stop(&e.end)
	e.l.kept.Store(false)
}

// fire is the end of the keep, on the Client's clock.
func (e *kept) fire() { e.l.a.c.keepEnded(e) }

// keepEnded releases a kept lease whose keep ran out unused.
func (c *Client) keepEnded(e *kept) {
	c.keptMu.Lock()
	if c.kept[e.l.key] != e || e.inUse {
		c.keptMu.Unlock()
		return
	}
	c.forgetLocked(e)
	c.keptReleases.Add(1) // under keptMu: before Close can look (see releaseAllKept)
	c.keptMu.Unlock()
	c.hub.keeper(e.l.a.k.channel, -1)
	c.releaseKept(e.l, time.Time{}, c.keptReleases.Done)
}

// wanted is told that a waiter in another process joined the queue of the
// key whose release channel is channel: a kept lease not in use is
// released to it now, one in use as soon as its call returns.
func (c *Client) wanted(channel string) {
	c.keptMu.Lock()
	e := c.kept[c.keptByChannel[channel]]
	if e == nil {
		c.keptMu.Unlock()
		return
	}
	e.wanted = true
	if e.inUse {
		c.keptMu.Unlock()
		return
	}
	c.forgetLocked(e)
	c.keptReleases.Add(1)
	c.keptMu.Unlock()
	c.hub.keeper(e.l.a.k.channel, -1)
	go c.releaseKept(e.l, time.Time{}, c.keptReleases.Done) // not on the hub's reader goroutine: it does I/O
}

// keptNotice is told of a message on channel naming who now holds its key
// (a handoff) or that the lease was released from outside ("x"): a lease
// this Client keeps on that key may no longer be its own. The message may
// also be an old one, read late (a handoff of an earlier lease on the key,
// before this one was granted), so it is not taken for a loss by itself:
// the key is no longer trusted for reuse without asking Redis, and is
// checked at once (a lease found gone is lost, its call cancelled).
func (c *Client) keptNotice(channel, payload string) {
	c.keptMu.Lock()
	e := c.kept[c.keptByChannel[channel]]
	c.keptMu.Unlock()
	if e == nil || noteID(payload) == e.l.a.id {
		return
	}
	c.hub.suspect(channel)
	go c.checkKept(channel)
}

// checkKept looks at the key of a lease this Client keeps, after it starts
// keeping it and whenever the channel's subscription is confirmed again
// (notifications may have been missed): a lease the key no longer holds is
// lost; one with waiters in the queue is released to them.
func (c *Client) checkKept(channel string) {
	c.keptMu.Lock()
	e := c.kept[c.keptByChannel[channel]]
	c.keptMu.Unlock()
	if e == nil {
		return
	}
	if h := testHookCheckKept.Load(); h != nil {
		(*h)()
	}
	if c.verifyKept(e.l, time.Time{}, true) == keptWanted {
		c.wanted(channel)
	}
}

// testHookCheckKept, when set by a test, runs in checkKept between finding
// the kept lease and asking Redis about it (a goroutine scheduled late).
var testHookCheckKept atomic.Pointer[func()]

type keptState uint8

const (
	keptOK     keptState = iota
	keptLost             // the key no longer holds the lease (l is lost now)
	keptWanted           // waiters are queued
	keptUnsure           // no answer: the renewals will tell
)

// verifyKept asks Redis whether l's key still holds it and whether anyone
// waits, bounded by the release timeout (and by deadline, when set); a
// lease found gone is lost. An answer that the key holds it, to a question
// sent while the key's channel was live, lets later calls trust the
// channel (see waitHub.trusted).
//
// With whileKept (a check made outside any call: checkKept), an answer
// that the key no longer holds it counts only if the Client still keeps
// it: a call may have taken it meanwhile and released it, and the answer
// may come after that release.
func (c *Client) verifyKept(l *Lease, deadline time.Time, whileKept bool) keptState {
	start := time.Now()
	dl := start.Add(c.releaseTimeout)
	if !deadline.IsZero() && deadline.Before(dl) {
		dl = deadline
	}
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	pipe := c.rdb.Pipeline()
	get := pipe.Get(ctx, l.a.k.lock)
	queued := pipe.Exists(ctx, l.a.k.queue)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return keptUnsure
	}
	v, err := get.Result()
	if err != nil && err != redis.Nil {
		return keptUnsure // no reply parsed (a hook may have cleared Exec's error)
	}
	if err == redis.Nil || !holds(v, l.a.id) {
		if whileKept && !c.keeps(l) {
			return keptUnsure // released by the call that took it
		}
		what := "the key no longer holds it (deleted from outside, handed over, or lost in a restart or failover)"
		if c.forcedFromOutside(ctx, l.a.k, l.a.id) {
			what = "the lease was released from outside (ForceRelease, e.g. leasectl release)"
		}
		l.lose(fmt.Errorf("%w: key %q: kept lease: %s", ErrLost, l.key, what))
		c.dropEntry(l.a, dl)
		return keptLost
	}
	if n, _ := queued.Result(); n > 0 {
		return keptWanted
	}
	if !c.hub.checked(l.a.k.channel, start) {
		// A notice came after the question was sent: the answer may
		// predate what it announced.
		return keptUnsure
	}
	return keptOK
}

// keeps reports whether the Client keeps l now (in use by a call or not).
func (c *Client) keeps(l *Lease) bool {
	c.keptMu.Lock()
	defer c.keptMu.Unlock()
	e := c.kept[l.key]
	return e != nil && e.l == l
}

// holds reports whether lock value v is identity id's lease.
func holds(v, id string) bool {
	return len(v) > len(id) && v[:len(id)] == id && v[len(id)] == ':'
}

// dropKept forgets a kept lease that was lost, and releases what may be
// left of it in the background (its validity may have run out while the
// key is still ours).
func (c *Client) dropKept(l *Lease) {
	c.keptMu.Lock()
	e := c.kept[l.key]
	if e == nil || e.l != l {
		c.keptMu.Unlock()
		return
	}
	inUse := e.inUse
	c.forgetLocked(e)
	if !inUse {
		c.keptReleases.Add(1)
	}
	c.keptMu.Unlock()
	c.hub.keeper(l.a.k.channel, -1)
	if !inUse {
		go c.releaseKept(l, time.Time{}, c.keptReleases.Done)
	}
}

// releaseAllKept releases every kept lease not in use (Close), together,
// and returns when they are released (each bounded by the release
// timeout), and when the releases already under way on goroutines of their
// own have been sent; those in use are released when their calls return.
// (Once Close has looked, no lease is kept that is not in use, so nothing
// is added to keptReleases while it waits.)
func (c *Client) releaseAllKept(until time.Time) {
	c.keptMu.Lock()
	var free []*Lease
	for _, e := range c.kept {
		if !e.inUse {
			free = append(free, e.l)
			c.forgetLocked(e)
		}
	}
	c.keptMu.Unlock()
	var wg sync.WaitGroup
	for _, l := range free {
		c.hub.keeper(l.a.k.channel, -1)
		wg.Add(1)
		// Done once the release is answered, before its Observer runs
		// (which may call Close: TestAdversary48_SecondCloseFromObserverStallsToBound).
		go c.releaseKept(l, until, wg.Done)
	}
	// Within the bound: the releases themselves are, and an Observer slow
	// with their report must not hold Close past it
	// (TestAdversary47_CloseWaitsForSlowObserverOfKeptRelease).
	done := make(chan struct{})
	go func() {
		wg.Wait()
		c.keptReleases.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// releaseKept releases a lease no call is using: stops its renewals and
// sends the release, bounded by the release timeout (and by deadline, when
// set: the budget of the call that found the lease unsuitable). sent, if
// not nil, is called once the release has been answered or has failed,
// before any Observer is (an Observer may call Close, which waits for it).
func (c *Client) releaseKept(l *Lease, deadline time.Time, sent func()) {
	l.w.stop()
	last := l.cur.Load()
	dl := time.Now().Add(c.releaseTimeout)
	if !deadline.IsZero() && deadline.Before(dl) {
		dl = deadline
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(last.ctx), dl)
	defer cancel()
	l.mu.Lock()
	hold := time.Until(l.holdUntil)
	l.mu.Unlock()
	start := time.Now()
	a := l.a
	// With the call's queue member: a Redis that lost writes may have
	// brought its entry back (see sendRelease).
	res, err := c.releaseWith(ctx, nil, &a.k, &a.tomb, &a.id, &a.member, hold, "1")
	l.ended.Store(true)
	took := time.Since(start)
	if sent != nil {
		sent()
	}
	switch {
	case err != nil:
		class := ErrUnknown
		if classify(err) != outUnknown {
			class = ErrRefused
		}
		l.observe(Event{Kind: EventReleaseUnconfirmed, Took: took, Err: fmt.Errorf("%w: release of kept key %q: %w", class, l.key, err)})
	case res > 0:
		l.observe(Event{Kind: EventReleased, Took: took})
	default:
		l.observe(Event{Kind: EventReleaseUnconfirmed, Took: took, Err: fmt.Errorf("lease: release of kept key %q: the key no longer held this lease", l.key)})
	}
}

// dropEntry takes the queue entry of the call that acquired a kept lease
// found lost out of the key's queue, by deadline: a Redis that lost writes
// (a restart from a snapshot, a failover) may have brought it back, and the
// next release would hand the key to that finished call for its TTL. The
// release script does it: the key is not the call's, so it changes
// nothing else.
func (c *Client) dropEntry(a *call, deadline time.Time) {
	if a.member == "" {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_, _ = c.releaseWith(ctx, nil, &a.k, &a.tomb, &a.id, &a.member, 0, "1")
}
