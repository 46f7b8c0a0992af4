package lease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireOnce sends one acquire (retrying slot redirects within the
// budget). It returns the lease on a grant, the holder's remaining time when
// busy (-1 if unknown), or an error: ErrRefused (not executed), ErrUnknown
// (possibly granted: a release was sent), ErrLowValidity.
func (a *call) acquireOnce(ctx context.Context) (*Lease, time.Duration, error) {
	ttl := a.spec.TTL
	fence := "0"
	if a.spec.Fence {
		fence = "1"
	}
	keys := []string{a.k.lock, a.k.fence}
	args := []any{a.id, ms(ttl), fence, ms(a.c.counterTTL)}
	for try := 0; ; try++ {
		sent := time.Now()
		// A reply read after the lease's own end is worthless; one read
		// after valid-until − MinValidity is a known grant that cannot be
		// entered (ErrLowValidity).
		limit := sent.Add(ttl - drift(ttl))
		if lim := a.end.Add(-a.reserve); lim.Before(limit) {
			limit = lim
		}
		actx, cancel := context.WithDeadline(ctx, limit)
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
		cancel()
		if err != nil {
			switch classify(err) {
			case outRedirect:
				// The slot is moving or the cluster is reconfiguring: not
				// executed. Retry while a grant could still be entered.
				a.c.reloadTopology()
				pause := min(time.Duration(try+1)*10*time.Millisecond, 100*time.Millisecond)
				if time.Now().Add(pause).Before(a.end.Add(-a.reserve-a.spec.MinValidity)) && sleepCtx(ctx, pause) {
					continue
				}
				return nil, 0, a.refused("acquire", err)
			case outRefused:
				return nil, 0, a.refused("acquire", err)
			}
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
			e := fmt.Errorf("%w: key %q: %v left, need %v", ErrLowValidity, a.key, left.Round(time.Millisecond), a.spec.MinValidity)
			a.observe(Event{Kind: EventLowValidity, Err: e})
			return nil, 0, fmt.Errorf("%w%s", e, a.releaseUnused(ctx))
		}
		if acked >= 0 && acked < a.c.replicas {
			e := fmt.Errorf("%w: key %q: grant acknowledged by %d of %d replicas", ErrUnknown, a.key, acked, a.c.replicas)
			a.observe(Event{Kind: EventUnreplicated, Err: e})
			return nil, 0, fmt.Errorf("%w%s", e, a.releaseUnused(ctx))
		}
		l := &Lease{
			c: a.c, a: a, key: a.key, owner: a.id, token: tok, fenced: a.spec.Fence,
			validUntil: validUntil, lost: make(chan struct{}),
		}
		l.parent, _ = FromContext(ctx)
		a.observe(Event{Kind: EventAcquired, Wait: time.Since(a.start)})
		return l, 0, nil
	}
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

// refused reports a request that was definitely not executed: nothing to
// release.
func (a *call) refused(what string, err error) error {
	e := fmt.Errorf("%w: %s of key %q: %w", ErrRefused, what, a.key, err)
	a.observe(Event{Kind: EventRefused, Err: e})
	return e
}

// unknown handles an acquire whose outcome is unknown: fn is not called and
// one bounded conditional release is sent with the same identity.
func (a *call) unknown(ctx context.Context, err error) error {
	e := fmt.Errorf("%w: acquire of key %q: %w", ErrUnknown, a.key, err)
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
