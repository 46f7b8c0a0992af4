package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

type released struct {
	res int64     // 1 released, 2 hold set, 0 not held, -1 held by another
	err error     // no parsed reply (ErrUnknown) or a refusal (ErrRefused)
	at  time.Time // when the reply was read
}

// releaseOverrun is the longest a release on a call's path may run past
// the call's budget (Do returns by its deadline plus a few milliseconds).
const releaseOverrun = 20 * time.Millisecond

// releaseBy is when the call's own release, sent at now, must be
// answered: the call's end, or at least its reserve (at most
// releaseOverrun) from now when the end is nearer, and at most the
// release timeout from now.
func (a *call) releaseBy(now time.Time) time.Time {
	dl := a.end
	if floor := now.Add(min(a.reserve, releaseOverrun)); dl.Before(floor) {
		dl = floor
	}
	if cap := now.Add(a.c.releaseTimeout); cap.Before(dl) {
		dl = cap
	}
	return dl
}

// releaseUnbounded reports whether a release sent now could not be
// bounded by the call's budget: less than minReleaseBound to answer it.
func (a *call) releaseUnbounded() bool {
	now := time.Now()
	return a.releaseBy(now).Sub(now) < minReleaseBound
}

// release deletes the lease if this attempt still holds it (or, with hold >
// 0, sets the remaining hold as its TTL), on a context detached from the
// caller's and bounded by the budget. A release whose reply is lost is
// reported, not retried as a plain DEL; go-redis's own replay of it finds
// the tombstone the first run left and answers "released" again.
func (a *call) release(ctx context.Context, hold time.Duration) released {
	now := time.Now()
	dl := a.releaseBy(now)
	a.rctx = releaseCtx{parent: ctx, dl: dl, k: &a.c.clock}
	defer a.rctx.stop()
	res, err := a.sendRelease(&a.rctx, hold)
	r := released{res: res, at: time.Now()}
	took := r.at.Sub(now)
	var held time.Duration
	if !a.entered.IsZero() {
		held = now.Sub(a.entered)
	}
	if err != nil {
		class := ErrUnknown
		if classify(err) != outUnknown {
			class = ErrRefused
		}
		r.err = fmt.Errorf("%w: release of key %q: %w", class, a.key, err)
		a.observe(Event{Kind: EventReleaseUnconfirmed, Took: took, Held: held, Err: r.err})
		return r
	}
	switch {
	case res > 0:
		a.observe(Event{Kind: EventReleased, Took: took, Held: held})
	case !a.entered.IsZero():
		what := "the key no longer held this lease"
		switch res {
		case -1:
			what = "the key was held by another owner"
		case -3:
			what = "the lease had been released from outside (ForceRelease)"
		}
		a.observe(Event{Kind: EventReleaseUnconfirmed, Took: took, Held: held, Err: fmt.Errorf("lease: release of key %q: %s", a.key, what)})
	}
	return r
}

// sendRelease runs the release script for this attempt's identity (and
// queue entry, if it waited). A granted call's entry is normally gone
// already (every grant took it out), but not after Redis lost writes: a
// restart from a snapshot or a failover to a replica that saw the call
// queue but not its grant brings it back, and the next release would hand
// the key to this finished call. So the release takes it out anyway
// (TestAdversary23_StaleRestartLeavesGrantedEntry) when it finds the
// queue non-empty (an empty queue holds no entry: the common release does
// not ask).
func (a *call) sendRelease(ctx context.Context, hold time.Duration) (int64, error) {
	tomb := "1"
	if a.unbounded {
		tomb = "l" // a leader term: a watch hears it step down (release.lua)
	}
	return a.c.releaseWith(ctx, a.newRelArgs(), &a.k, &a.tomb, &a.id, &a.member, hold, tomb)
}

// releaseAs runs the release script for identity id: the holder's own
// release (tomb "1", or "l" for a leader term's) or one forced from
// outside (tomb "x").
func (c *Client) releaseAs(ctx context.Context, k keys, id, member string, hold time.Duration, tomb string) (int64, error) {
	tombKey := k.tomb + id
	return c.releaseWith(ctx, nil, &k, &tombKey, &id, &member, hold, tomb)
}

// relArgs are one release's arguments: one allocation.
type relArgs struct {
	argv [3 + 6 + 7]any
	hold intArg
}

// releaseWith is releaseAs with the tombstone key already built, its
// arguments in r (nil: allocated here; a call's own release uses the
// call's). The strings it is given are read while the command is written:
// the caller keeps them unchanged until it returns. member may be nil (no
// queue entry).
func (c *Client) releaseWith(ctx context.Context, r *relArgs, k *keys, tombKey, id, member *string, hold time.Duration, tomb string) (int64, error) {
	if r == nil {
		r = new(relArgs)
	}
	// Always the argument's own: its MarshalBinary counts the writes (see
	// written).
	r.hold.n = 0
	if hold > 0 {
		// Whole milliseconds, rounded up: a hold-min is kept at least as
		// long as asked (without adding first, which wraps a hold near
		// the top of time.Duration's range: TestAdversary44_HugeHoldMinIsHonoured).
		r.hold.n = int64(hold / time.Millisecond)
		if hold%time.Millisecond != 0 {
			r.hold.n++
		}
	}
	var memberArg any = ""
	if member != nil && *member != "" {
		memberArg = sarg(member)
	}
	tombArg := tombOwn
	switch tomb {
	case "x":
		tombArg = tombForced
	case "l":
		tombArg = tombLeader
	}
	r.argv = [...]any{nil, nil, "6",
		sarg(&k.lock), sarg(&k.channel), sarg(tombKey), sarg(&k.fence), sarg(&k.queue), sarg(&k.qexp),
		sarg(id), &r.hold, "PUBLISH", c.tombTTLArg, c.counterTTLArg, memberArg, tombArg}
	res, err := c.evalArgs(ctx, releaseScript, r.argv[:])
	if err != nil && classify(err) == outRedirect {
		res, err = c.retryRelease(ctx, r, err) // reloads after its last try
	} else {
		c.mayReload(err)
	}
	// A request written before may have been carried out: a re-send that
	// found no connection, or (off Cluster) a final error answer to one,
	// is unknown (see afterWrite).
	err = c.afterWrite(err, r.hold.writes.Load())
	if res >= 10 {
		// Released (or hold set), but a message was refused.
		res -= 10
		c.publishRefused(k)
	}
	return res, err
}

// retryRelease sends a release again after a slot redirect (TRYAGAIN
// while a Cluster slot migrates: a script over several of the lease's
// keys, such as the release's, which names its channel and tombstone,
// runs on neither master until the migration ends; or CLUSTERDOWN, or
// MOVED/ASK that go-redis did not follow). Such an answer means the script
// was not run, so it is sent again for as long as the release's budget
// lasts (ctx's deadline, or the release timeout when it has none), as the
// acquire does within the call's: giving up at once would leave the key
// held for the rest of its TTL, and a waiter queued for it waiting that
// long (TestAdversary33_ReleaseDuringSlotMigrationIsRetried).
func (c *Client) retryRelease(ctx context.Context, r *relArgs, err error) (int64, error) {
	var res int64
	err = c.retryRedirected(ctx, c.releaseTimeout, err, func() (err error) {
		res, err = c.evalArgs(ctx, releaseScript, r.argv[:])
		return err
	})
	return res, err // res read after the retries (not beside the call)
}

// retryRedirected runs again, after err, a request answered by a slot
// redirect (see classify: not executed), with the slot map reloaded and a
// short pause in between, until it gets another answer or ctx ends (when
// ctx has no deadline, patience after now). It returns the last error.
func (c *Client) retryRedirected(ctx context.Context, patience time.Duration, err error, again func() error) error {
	end, ok := ctx.Deadline()
	if !ok {
		end = time.Now().Add(patience)
	}
	for try := 1; err != nil && classify(err) == outRedirect; try++ {
		c.reloadTopology()
		pause := min(time.Duration(try)*5*time.Millisecond, 25*time.Millisecond)
		if !time.Now().Add(pause).Before(end) || !sleepCtx(ctx, pause) {
			break
		}
		err = again()
	}
	c.mayReload(err)
	return err
}

// publishRefused reports a release whose messages the server refused (the
// user may not publish to the key's channel or a waiter's: an ACL without
// them). The release itself happened; waiters were not told, and find the
// key at their next re-check. Reported as an interruption of release
// notifications, at most once every ten seconds per Client.
func (c *Client) publishRefused(k *keys) {
	now := time.Now().UnixNano()
	last := c.pubRefusedAt.Load()
	if now-last < int64(10*time.Second) && last != 0 || !c.pubRefusedAt.CompareAndSwap(last, now) {
		return
	}
	c.obs.Observe(Event{Kind: EventSubscriptionFailed, Ctx: context.Background(),
		Err: fmt.Errorf("%w: a release's message on %q (or a waiter's inbox) was refused, as by an ACL without the channel: the release happened, but waiters are not told and find the key at their next re-check (every %v)", ErrRefused, k.channel, c.recheck)})
}

// Tombstone values, boxed once.
var tombOwn, tombForced, tombLeader any = "1", "x", "l"

// forcedFromOutside reports whether identity id's lease was released by
// ForceRelease (its tombstone says so), to name the cause of a loss.
func (c *Client) forcedFromOutside(ctx context.Context, k keys, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, c.releaseTimeout)
	defer cancel()
	v, err := c.rdb.Get(ctx, k.tomb+id).Result()
	return err == nil && v == "x"
}

// forcedManyFromOutside is forcedFromOutside for several leases at once,
// in one pipeline (one round trip on a standalone server): the renewer
// asks it for every refused lease of a batch before reporting their
// losses, so that N refusals cost one round trip, not N in a row.
func (c *Client) forcedManyFromOutside(ks []keys, ids []string) []bool {
	ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(ks))
	for i := range ks {
		gets[i] = pipe.Get(ctx, ks[i].tomb+ids[i])
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	forced := make([]bool, len(ks))
	for i, g := range gets {
		v, err := g.Result()
		forced[i] = err == nil && v == "x"
	}
	return forced
}

// giveUp takes a call that stops waiting out of the key's queue, and passes
// on a grant a release may have handed it meanwhile. Best effort, bounded
// by the release reserve: an entry left behind expires within a re-check,
// and a grant handed to it meanwhile is released by the Client when its
// message comes (waitHub.leave). Once the Client is closing, nothing
// releases that grant later, and Close waits for this call until its own
// bound (the release timeout from its start), after which the service may
// close the go-redis client: the giving up has until that bound, or the
// call's own deadline if that comes first (Do returns by its deadline).
func (a *call) giveUp(ctx context.Context) {
	if a.member == "" {
		return
	}
	d := min(a.reserve, 50*time.Millisecond)
	if a.c.closed.Load() {
		// closeUntil is written before closed is set, and never again.
		d = max(d, min(time.Until(a.c.closeUntil), time.Until(a.end)))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	_, _ = a.sendRelease(rctx, 0)
}

// tombTTL is how long a release's tombstone outlives it: longer than any
// replay of the release by go-redis, which happens within the release's
// own deadline.
func (c *Client) tombTTL() time.Duration { return max(time.Second, 4*c.releaseTimeout) }

// releaseOrphan releases a grant handed to a waiter that had stopped
// waiting (see waitHub.leave): if the key still holds identity id, it is
// released, or handed on to the next waiter. Best effort, bounded by the
// release timeout.
func (c *Client) releaseOrphan(k *keys, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
	defer cancel()
	_, _ = c.releaseAs(ctx, *k, id, "", 0, "1")
}
