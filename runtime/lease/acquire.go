package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireOnce sends one acquire (retrying slot redirects within the
// budget). With waitUntil set, a busy answer also puts the call in the
// key's queue (or refreshes its place). It returns the lease on a grant,
// the holder's remaining time when busy (-1 if unknown), or an error:
// ErrRefused (not executed), ErrUnknown (possibly granted: a release was
// sent), ErrLowValidity.
func (a *call) acquireOnce(ctx context.Context, waitUntil time.Time) (*Lease, time.Duration, error) {
	ttl := a.spec.TTL
	for try := 0; ; try++ {
		a.seq++
		sent := time.Now()
		// A reply read after the lease's own end is worthless; one read
		// after valid-until − MinValidity is a known grant that cannot be
		// entered (ErrLowValidity).
		limit := sent.Add(ttl - drift(ttl))
		if lim := a.end.Add(-a.reserve); lim.Before(limit) {
			limit = lim
		}
		if !limit.After(sent) {
			return nil, 0, fmt.Errorf("%w: key %q: no time left in the budget to acquire (nothing sent)", ErrDeadline, a.key)
		}
		// Under fn's context when Do made it (a request waiting for a
		// connection then waits no longer than the call's budget), or a
		// deadline context of its own.
		var actx context.Context
		cancel := context.CancelFunc(nop)
		if a.lctx != nil {
			g := a.grant()
			g.acq = limitCtx{Context: a.lctx, limit: limit}
			actx = &g.acq
		} else {
			actx, cancel = context.WithDeadline(ctx, limit)
		}
		var (
			granted bool
			tok     Token
			pttl    time.Duration
			acked   = -1
			err     error
		)
		switch {
		case waitUntil.IsZero() && !a.spec.Fence && a.c.replicas == 0:
			granted, pttl, err = a.setNX(actx)
		case a.c.replicas > 0:
			var r int64
			r, acked, err = a.acquireReplicated(actx, a.acquireArgs(sent, waitUntil))
			if err == nil {
				granted, tok, pttl = parseAcquire(r)
			}
		default:
			var r int64
			r, err = a.c.evalArgs(actx, acquireScript, a.acquireArgs(sent, waitUntil))
			if err == nil {
				granted, tok, pttl = parseAcquire(r)
			}
		}
		cancel()
		// Without it, a Client whose calls timed out on a hung master
		// that the cluster replaced kept asking it for a minute
		// (TestAdversary67_ClusterHungMasterKeysGrantedAfterFailover).
		a.c.mayReload(err)
		if err != nil && a.curAcq != nil {
			// A dial error after a send, or a final error answer after a
			// re-send: unknown (see afterWrite).
			err = a.c.afterWrite(err, a.curAcq.ttl.writes.Load())
		}
		if err != nil && !time.Now().Before(limit) {
			if !a.written() {
				// Never written to a connection (the pool stayed taken, a
				// dial or the handshake did not finish in time): not
				// executed.
				return nil, 0, a.refused("acquire", err)
			}
			// Past the limit, go-redis may have retried a request that
			// timed out at it: the last attempt's error (a dial that could
			// not start, say) does not tell whether the first was carried
			// out.
			return nil, 0, a.unknown(ctx, err, true)
		}
		if err != nil {
			switch classify(err) {
			case outRedirect:
				// The slot is moving or the cluster is reconfiguring: not
				// executed. Retry while a grant could still be entered
				// (the slot map is being reloaded, above).
				pause := min(time.Duration(try+1)*10*time.Millisecond, 100*time.Millisecond)
				if time.Now().Add(pause).Before(a.end.Add(-a.reserve-a.spec.MinValidity)) && sleepCtx(ctx, pause) {
					continue
				}
				return nil, 0, a.refused("acquire", err)
			case outRefused:
				if notSent(err) {
					if a.written() {
						// The acquire was written to a connection before
						// (go-redis's retry after a lost reply could not
						// connect, or found the pool taken): it may have
						// been carried out.
						return nil, 0, a.unknown(ctx, err, false)
					}
				}
				return nil, 0, a.refused("acquire", err)
			}
			if !a.written() {
				// Never written to a connection: a hook failed the
				// request without sending it (a circuit breaker, a rate
				// limiter), or the caller's context ended while it waited
				// for one. Not executed.
				return nil, 0, a.refused("acquire", err)
			}
			return nil, 0, a.unknown(ctx, err, false)
		}
		if !granted {
			a.busySent, a.busySeq = sent, a.seq
			return nil, pttl, nil
		}
		a.sent, a.token = sent, tok
		validUntil := sent.Add(ttl - drift(ttl))
		if left := time.Until(validUntil); left < a.spec.MinValidity {
			e := fmt.Errorf("%w: key %q: %v left, need %v", ErrLowValidity, a.key, left.Round(time.Millisecond), a.spec.MinValidity)
			a.observe(Event{Kind: EventLowValidity, Err: e})
			return nil, 0, fmt.Errorf("%w%s", e, a.releaseUnused(ctx))
		}
		if acked >= 0 && acked < a.c.replicas {
			e := fmt.Errorf("%w: key %q: grant acknowledged by %d of %d replicas", ErrUnknown, a.key, acked, a.c.replicas)
			a.observe(Event{Kind: EventUnreplicated, Err: e})
			return nil, 0, fmt.Errorf("%w%s", e, a.releaseUnused(ctx))
		}
		return a.granted(tok, validUntil), 0, nil
	}
}

// written reports whether go-redis wrote the last acquire to a connection
// (its TTL argument was marshalled): only then may it have been executed.
func (a *call) written() bool {
	return a.curAcq != nil && a.curAcq.ttl.writes.Load() > 0
}

// granted makes the call's lease for a confirmed grant (a.sent and a.token
// set).
func (a *call) granted(tok Token, validUntil time.Time) *Lease {
	l := &a.grant().lease // one allocation with the call (see newCall)
	l.c, l.a, l.key, l.owner, l.token, l.fenced = a.c, a, a.key, a.id, tok, a.spec.Fence
	l.validUntil, l.lost = validUntil, make(chan struct{})
	l.cur.Store(a)
	a.pend(nil)
	a.observe(Event{Kind: EventAcquired, Wait: time.Since(a.start)})
	return l
}

// pend lists a call just granted a lease (kept: the kept lease it took)
// in Client.granting until it enters its function, or marks it granted
// after Close.
func (a *call) pend(kept *Lease) {
	a.c.grantMu.Lock()
	defer a.c.grantMu.Unlock()
	if a.c.grantShut {
		a.gate = gateAfterClose
		return
	}
	if a.c.granting == nil {
		a.c.granting = map[*call]struct{}{}
	}
	a.c.granting[a] = struct{}{}
	a.gate, a.keptL = gatePending, kept
}

// A grant's passage to its function (call.gate, under Client.grantMu).
const (
	gateNone       uint8 = iota // entered, or never listed
	gatePending                 // granted, listed in Client.granting
	gateAfterClose              // granted after Close: not entered, released by the call
	gateAbandoned               // taken by Close, which releases it: not entered, nothing sent
)

// enter reports whether the call may enter its function, as the last
// thing before it: not once Close has taken its grant (gateAbandoned:
// Close releases it) or when it was granted after Close (the call releases
// it). It takes the call out of Client.granting.
func (a *call) enter() uint8 {
	a.c.grantMu.Lock()
	defer a.c.grantMu.Unlock()
	g := a.gate
	if g == gatePending {
		delete(a.c.granting, a)
		a.gate = gateNone
	}
	return g
}

// acquireArgs are the acquire script's command line (its first two slots
// left to evalArgs), built in the call's own argument array. A caller that
// waits (waitUntil set) keeps a place in the queue for a little longer than
// its next look (a re-check at the latest), never past its wait.
func (a *call) acquireArgs(now, waitUntil time.Time) []any {
	var fence any = "0"
	if a.spec.Fence {
		fence = "1"
	}
	x := a.newAcqArgs()
	var life any = 0
	if !waitUntil.IsZero() {
		x.life.n = ms(min(addDur(waitUntil.Sub(now), 50*time.Millisecond), 2*a.c.recheck+100*time.Millisecond))
		life = &x.life
		if a.member == "" {
			// A release hands the lease over for the full TTL when this
			// Client's inbox (its own channel) has a subscriber: the call
			// then enters on the release's message, without another round
			// trip (see enterOnNotice). Otherwise it gets a claim that
			// only has to outlast a missed notification (the call looks
			// again within a re-check and confirms it), so that a waiter
			// whose process is gone holds the key up no longer than that.
			claim := min(a.c.recheck+100*time.Millisecond, a.spec.TTL)
			// identity|ttl|fence|claim|inbox, and for a fenced call
			// |counter ttl (a release that hands it the key mints its
			// token, and lets the counter live as this Client would), in
			// one allocation.
			var buf [192]byte
			b := append(buf[:0], a.id...)
			b = strconv.AppendInt(append(b, '|'), ms(a.spec.TTL), 10)
			b = append(append(b, '|'), fence.(string)...)
			b = strconv.AppendInt(append(b, '|'), ms(claim), 10)
			b = append(append(b, '|'), a.c.hub.probe...)
			if a.spec.Fence {
				b = strconv.AppendInt(append(b, '|'), ms(a.c.counterTTL), 10)
			}
			a.member = string(b)
		}
	}
	var memberArg any = ""
	if a.member != "" {
		memberArg = sarg(&a.member)
	}
	x.ttl.n = ms(a.spec.TTL)
	x.seq.n = a.seq
	// A Lead term's grant is announced, so that WatchLeader reports a term
	// that starts on a free key at once, not a re-check later.
	var announce any = "0"
	if a.unbounded {
		announce = "1"
	}
	k := &a.k
	x.argv = [...]any{nil, nil, "4", sarg(&k.lock), sarg(&k.fence), sarg(&k.queue), sarg(&k.qexp),
		sarg(&a.id), &x.ttl, fence, a.c.counterTTLArg, life, memberArg, sarg(&k.channel), &x.seq, announce}
	return x.argv[:]
}

// setNX is the acquire of an unfenced lease that will not wait: a native
// SET NX PX, as a plain lock takes it. No queue is involved: a free key
// means no one waits, because a release hands a key with waiters to the
// first of them. When the key is taken, one more round trip (GET and PTTL,
// pipelined) tells a replay of this attempt's own grant after a lost reply
// (the key holds its identity) from a real holder, and gives the holder's
// remaining time.
func (a *call) setNX(ctx context.Context) (granted bool, pttl time.Duration, err error) {
	own := a.idValue // identity + ":0"
	x := a.newAcqArgs()
	x.ttl.n = ms(a.spec.TTL)
	x.argv = [...]any{"set", sarg(&a.k.lock), sarg(&a.idValue), "px", &x.ttl, "nx", nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
	// Only a parsed "OK" is a grant: a hook may have cleared the error of a
	// request that got no reply, or of SET's "not set" (redis.Nil).
	set := a.c.rdb.Do(ctx, x.argv[:6]...)
	notSet := false // SET answered "not set"
	switch err := set.Err(); {
	case err == nil && set.Val() == "OK":
		return true, 0, nil
	case err == redis.Nil:
		notSet = true // the key is taken: look
	case err == nil: // no reply parsed (a hook cleared the error): look
	default:
		return false, 0, err
	}
	pipe := a.c.rdb.Pipeline()
	get := pipe.Do(ctx, "get", a.k.lock)
	ttl := pipe.Do(ctx, "pttl", a.k.lock)
	_, err = pipe.Exec(ctx)
	var d int64
	if err == nil || err == redis.Nil {
		// The replies are read in order: a parsed PTTL means GET's was
		// parsed too (its nil value then is a missing key).
		d, err = parsedInt(ttl.Val(), ttl.Err())
	}
	if err != nil {
		if notSet && x.ttl.writes.Load() <= 1 {
			return false, -1, nil // the look failed, but SET, sent once, answered busy
		}
		if classify(err) != outUnknown {
			// go-redis re-sent the SET (a lost reply), or its answer was
			// not parsed: it may have granted this attempt. Unknown.
			return false, 0, fmt.Errorf("lease: SET NX may have granted the key (re-sent by go-redis, or its answer not parsed), and the look at the key failed: %v", err)
		}
		return false, 0, err
	}
	if v, _ := get.Val().(string); v == own {
		return true, 0, nil // our own grant, read back by a replay
	}
	pttl = -1
	if d >= 0 {
		pttl = time.Duration(d) * time.Millisecond
	}
	return false, pttl, nil
}

// sleepCtx sleeps for d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// acquireReplicated sends the acquire and WAIT in one pipeline on the
// connection to the key's master, and returns how many replicas acknowledged.
func (a *call) acquireReplicated(ctx context.Context, argv []any) (int64, int, error) {
	for try := 0; ; try++ {
		pipe, err := a.c.pipeliner(ctx, a.k.lock)
		if err != nil {
			return 0, 0, err
		}
		// EVALSHA, and on NOSCRIPT the same by EVAL (as Script.Run does;
		// no SCRIPT LOAD, which a least-privilege ACL need not allow).
		if try > 0 {
			argv = slices.Clone(argv) // the first command stays as sent
			argv[0], argv[1] = "eval", acquireScript.src
		} else {
			argv[0], argv[1] = "evalsha", acquireScript.sha
		}
		eval := pipe.Do(ctx, argv...)
		wait := pipe.Do(ctx, "WAIT", a.c.replicas, ms(a.c.replicaTimeout))
		_, _ = pipe.Exec(ctx)
		if err := eval.Err(); err != nil {
			if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
				forgetNoScript(argv)
				continue
			}
			return 0, 0, err
		}
		r, err := eval.Int64()
		if err != nil {
			return 0, 0, err
		}
		n, err := wait.Int()
		if err != nil {
			if r >= 0 {
				// Granted: a WAIT that failed, even by an error reply
				// (NOPERM), leaves the grant unconfirmed, not undone.
				return 0, 0, executedError{fmt.Errorf("WAIT after the grant: %w", err)}
			}
			return 0, 0, err
		}
		return r, n, nil
	}
}

// parseAcquire reads the acquire script's answer (see acquire.lua): a
// token (≥ 0) on a grant; when busy, -3 - the key's PTTL, returned as the
// holder's remaining time (-1 when unknown: no key, or no expiry).
func parseAcquire(r int64) (granted bool, tok Token, pttl time.Duration) {
	if r >= 0 {
		return true, Token(r), 0
	}
	pttl = -1
	if p := -3 - r; p >= 0 {
		pttl = time.Duration(p) * time.Millisecond
	}
	return false, 0, pttl
}

// refused reports a request that was definitely not executed: nothing to
// release.
func (a *call) refused(what string, err error) error {
	e := fmt.Errorf("%w: %s of key %q: %w", ErrRefused, what, a.key, err)
	a.observe(Event{Kind: EventRefused, Err: e})
	return e
}

// unknown handles an acquire whose outcome is unknown: fn is not called and
// one bounded conditional release is sent with the same identity. late: no
// reply came by the acquire's limit.
func (a *call) unknown(ctx context.Context, err error, late bool) error {
	var e error
	if (late || errors.Is(err, context.DeadlineExceeded)) && ctx.Err() == nil {
		// The acquire's own limit, not a deadline of the call: a grant read
		// later could not have been entered.
		e = fmt.Errorf("%w: acquire of key %q: no reply in time to enter a grant (%v)", ErrUnknown, a.key, err)
	} else {
		e = fmt.Errorf("%w: acquire of key %q: %w", ErrUnknown, a.key, err)
	}
	a.observe(Event{Kind: EventAcquireUnknown, Err: e})
	return fmt.Errorf("%w%s", e, a.releaseUnused(ctx))
}

// releaseUnused releases a grant that will not be used and returns a
// suffix for the error message when the release is unconfirmed.
func (a *call) releaseUnused(ctx context.Context) string {
	if r := a.release(ctx, 0); r.err != nil {
		return fmt.Sprintf(" (release unconfirmed: %v)", r.err)
	}
	return ""
}
