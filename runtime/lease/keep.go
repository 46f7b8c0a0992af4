package lease

import (
	"context"
	"fmt"
	"time"
)

// Kept leases (Spec.Keep). A call with Keep > 0 does not release its lease
// when fn returns: the Client keeps it, renewed, for up to Keep, and the
// next call on the key in this Client enters at once (no round trip) with
// the same fencing token, if the lease has enough validity left. A waiter
// in another process announces itself (its acquire publishes "w" on the
// key's channel when it joins the queue); the Client then releases the
// lease as soon as no call is using it, handing it to that waiter. A kept
// lease that is lost is forgotten; the next call acquires afresh.

// kept is one lease the Client keeps between calls.
type kept struct {
	l      *Lease
	inUse  bool        // a call is using it
	wanted bool        // a waiter elsewhere asked for it: release after the call
	timer  *time.Timer // ends the keep
}

// keep is called when a call using l returns with the lease intact: it
// keeps l for a.spec.Keep, or reports false (the caller then releases).
func (c *Client) keep(l *Lease, a *call) bool {
	if a.spec.Keep <= 0 || c.closed.Load() || a.spec.TTL != l.a.spec.TTL {
		c.unkeep(l)
		return false
	}
	c.keptMu.Lock()
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
		e = &kept{l: l}
		c.kept[l.key] = e
		c.keptByChannel[l.a.k.channel] = l.key
		e.timer = time.AfterFunc(a.spec.Keep, func() { c.keepEnded(e) })
	} else {
		e.timer.Reset(a.spec.Keep)
	}
	e.inUse = false
	l.kept.Store(true)
	c.keptMu.Unlock()
	c.renew.setEnd(&l.w.r, time.Now().Add(a.spec.Keep))
	if first {
		// Hear of waiters from now on (their acquires publish "w").
		c.hub.keeper(l.a.k.channel, +1)
	}
	return true
}

// takeKept hands a kept lease on key to a new call with spec, if there is
// one free that suits it (same TTL, fenced if the call wants fencing, at
// least spec.MinValidity left). A kept lease that does not suit is
// released, and the call acquires afresh.
func (c *Client) takeKept(key string, spec Spec) *Lease {
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
		c.releaseKept(l)
		return nil
	}
	e.inUse = true
	e.timer.Stop()
	c.keptMu.Unlock()
	return l
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
	e.timer.Stop()
	e.l.kept.Store(false)
}

// keepEnded releases a kept lease whose keep ran out unused.
func (c *Client) keepEnded(e *kept) {
	c.keptMu.Lock()
	if c.kept[e.l.key] != e || e.inUse {
		c.keptMu.Unlock()
		return
	}
	c.forgetLocked(e)
	c.keptMu.Unlock()
	c.hub.keeper(e.l.a.k.channel, -1)
	c.releaseKept(e.l)
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
	c.keptMu.Unlock()
	c.hub.keeper(e.l.a.k.channel, -1)
	go c.releaseKept(e.l) // not on the hub's reader goroutine: it does I/O
}

// checkKeptWaiters releases the kept lease on channel's key if its queue
// has waiters: their "w" may have come before the Client subscribed.
func (c *Client) checkKeptWaiters(channel string) {
	c.keptMu.Lock()
	e := c.kept[c.keptByChannel[channel]]
	c.keptMu.Unlock()
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
	defer cancel()
	if n, err := c.rdb.Exists(ctx, e.l.a.k.queue).Result(); err == nil && n > 0 {
		c.wanted(channel)
	}
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
	c.keptMu.Unlock()
	c.hub.keeper(l.a.k.channel, -1)
	if !inUse {
		go c.releaseKept(l)
	}
}

// releaseAllKept releases every kept lease not in use (Close), in the
// background; those in use are released when their calls return.
func (c *Client) releaseAllKept() {
	c.keptMu.Lock()
	var free []*Lease
	for _, e := range c.kept {
		if !e.inUse {
			free = append(free, e.l)
			c.forgetLocked(e)
		}
	}
	c.keptMu.Unlock()
	for _, l := range free {
		c.hub.keeper(l.a.k.channel, -1)
		go c.releaseKept(l)
	}
}

// releaseKept releases a lease no call is using: stops its renewals and
// sends the release, bounded by the release timeout.
func (c *Client) releaseKept(l *Lease) {
	l.w.stop()
	last := l.cur.Load()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(last.ctx), c.releaseTimeout)
	defer cancel()
	l.mu.Lock()
	hold := time.Until(l.holdUntil)
	l.mu.Unlock()
	start := time.Now()
	a := l.a
	res, err := c.releaseWith(ctx, a.k, a.tomb, a.id, "", hold, "1")
	l.ended.Store(true)
	took := time.Since(start)
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
