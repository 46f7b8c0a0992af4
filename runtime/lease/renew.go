package lease

import (
	"container/heap"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed renew_many.lua
var renewManySrc string

var renewManyScript = newScript(renewManySrc)

// testHookRenewed, when set by a test, runs after a batch's answer came
// and before it is applied (a renewer goroutine scheduled late).
var testHookRenewed atomic.Pointer[func()]

// renewBatchMax bounds the keys of one renew-many call.
const renewBatchMax = 256

// batchWindow: leases due this soon are renewed with the current batch,
// and a renewal may wait this long past its due time for others to join.
const batchWindow = 10 * time.Millisecond

// renewer renews the held leases of one Client. A goroutine runs only while
// leases are held; each round renews every lease that is due, grouped into
// batches of similar validity (one script call per batch on a standalone
// server, one pipeline on a Cluster) instead of a goroutine, a timer and a
// round trip per lease.
//
// Each lease is judged by its own validity: a batch waits for its reply
// until the latest valid-until among its leases, and each lease's own
// validity timer (see call.watch) ends it on time if the reply comes too
// late for it. A lease past its validity, lost, or past its call's deadline
// leaves the queue at once. Batches run concurrently, so a slow batch does
// not hold up leases due later.
type renewer struct {
	c     *Client
	mu    sync.Mutex
	q     renewQueue
	wake  chan struct{}
	run   bool
	until time.Time // when the sleeping loop wakes by itself (zero: not asleep)
}

// renewal is one held lease's renewal state.
type renewal struct {
	a        *call // the acquiring call: identity, keys, TTL
	l        *Lease
	interval time.Duration
	next     time.Time     // renewer's mu while queued or in flight
	slack    time.Duration // how late after next the renewal may be sent (see latest)
	last     time.Time     // next + slack
	end      time.Time     // no renewal from then on (renewer's mu): the deadline of the call using the lease, or the end of its keep
	index    int           // in the queue; -1 when not queued (renewer's mu)
	flight   *flight       // the batch this renewal is in flight with (renewer's mu)

	// mu orders applying a renewal's result against Do finishing: stop
	// takes it, so Do cannot return while a loss is being applied. No
	// observer is ever called with it held.
	mu      sync.Mutex
	stopped atomic.Bool // Do has returned: results are ignored
	refused bool        // a renewal was refused: lost once the batch is applied (renew's goroutine)
}

// flight is one batch on the wire. It is cancelled when every lease in it
// has been released (their Do calls returned), so no request outlives the
// calls it serves.
type flight struct {
	live   int // members not stopped (renewer's mu)
	cancel context.CancelFunc
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, wake: make(chan struct{}, 1)}
}

// latest is when r's renewal must be sent: a little after it is due, so
// that the leases that come due meanwhile go in the same batch. A lease
// registers with the renewer only when its first renewal is due (see
// call.watch), one at a time: without the slack, each would be a batch of
// its own. The slack is at most batchWindow and an eighth of the renewal
// interval (a 24th of the TTL).
func (r *renewal) latest() time.Time { return r.last }

// setNext sets when r is next due (renewer's mu).
func (r *renewal) setNext(t time.Time) {
	r.next, r.last = t, t.Add(r.slack)
}

// push queues r, starting the loop if it is not running (rn.mu held). It
// reports whether the loop sleeps past r's renewal and must be woken
// (wakeLoop, once rn.mu is released).
func (rn *renewer) push(r *renewal) bool {
	heap.Push(&rn.q, r)
	if !rn.run {
		rn.run = true
		go rn.loop()
	}
	return !rn.until.IsZero() && r.latest().Before(rn.until)
}

func (rn *renewer) wakeLoop() {
	select {
	case rn.wake <- struct{}{}:
	default:
	}
}

// add schedules r's first renewal.
func (rn *renewer) add(r *renewal) {
	rn.mu.Lock()
	wake := rn.push(r)
	rn.mu.Unlock()
	if wake {
		rn.wakeLoop()
	}
}

// setEnd moves the time from which r is no longer renewed. A registered
// renewal that left the queue (its previous end came) goes back into it.
func (rn *renewer) setEnd(r *renewal, end time.Time, registered bool) {
	rn.mu.Lock()
	r.end = end
	wake := false
	if registered && r.index < 0 && r.flight == nil && !r.stopped.Load() && !r.l.isLost() {
		r.setNext(maxTime(r.next, time.Now()))
		wake = rn.push(r)
	}
	rn.mu.Unlock()
	if wake {
		rn.wakeLoop()
	}
}

// remove stops r's renewals. A batch already sent may still reach Redis:
// it compares identities, so it can extend only this lease (a released one
// is gone), and its result is ignored.
func (rn *renewer) remove(r *renewal) {
	r.mu.Lock()
	r.stopped.Store(true)
	r.mu.Unlock()
	rn.mu.Lock()
	if r.index >= 0 {
		heap.Remove(&rn.q, r.index)
	}
	if f := r.flight; f != nil {
		r.flight = nil
		if f.live--; f.live == 0 {
			f.cancel()
		}
	}
	// The last lease gone: a sleeping loop exits now rather than at its
	// timer, so no goroutine outlives the leases it serves.
	idle := len(rn.q) == 0 && !rn.until.IsZero()
	rn.mu.Unlock()
	if idle {
		rn.wakeLoop()
	}
}

func (rn *renewer) loop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		rn.mu.Lock()
		if len(rn.q) == 0 {
			rn.run = false
			rn.mu.Unlock()
			return
		}
		now := time.Now()
		if wait := rn.q[0].latest().Sub(now); wait > 0 {
			rn.until = rn.q[0].latest()
			rn.mu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-rn.wake:
				t.Stop()
			}
			rn.mu.Lock()
			rn.until = time.Time{}
			rn.mu.Unlock()
			continue
		}
		type due struct {
			r     *renewal
			valid time.Time
		}
		var batch []due
		for len(rn.q) > 0 && !rn.q[0].latest().After(now.Add(batchWindow)) {
			r := heap.Pop(&rn.q).(*renewal)
			v := r.l.valid()
			if !now.Before(r.end) || !now.Before(v) || r.l.isLost() {
				// Past the total deadline, or the lease already ended:
				// its validity timer reports the loss.
				continue
			}
			batch = append(batch, due{r, v})
		}
		// Leases of similar validity go together, so a long-lived lease's
		// batch never decides how long a short one waits.
		slices.SortFunc(batch, func(x, y due) int { return x.valid.Compare(y.valid) })
		var flights [][]*renewal
		var deadlines []time.Time
		for start := 0; start < len(batch); start += renewBatchMax {
			chunk := batch[start:min(start+renewBatchMax, len(batch))]
			rs := make([]*renewal, len(chunk))
			dl := chunk[0].valid
			var interval time.Duration
			for i, d := range chunk {
				rs[i] = d.r
				dl = maxTime(dl, minTime(d.valid, d.r.end))
				interval = max(interval, d.r.interval)
			}
			// Stop waiting just before the last lease of the batch ends, so
			// that its failure is reported before its validity timer fires,
			// and after half a renewal interval (at least 50ms) at most:
			// go-redis cannot interrupt a read, so this bounds how long a
			// renewal on the wire can outlive the calls it serves; an
			// unanswered one is retried.
			if early := dl.Add(-2 * time.Millisecond); early.After(now) {
				dl = early
			}
			dl = minTime(dl, now.Add(max(interval/2, 50*time.Millisecond)))
			flights = append(flights, rs)
			deadlines = append(deadlines, dl)
		}
		for i, rs := range flights {
			dl := deadlines[i]
			ctx, cancel := context.WithDeadline(context.Background(), dl)
			f := &flight{live: len(rs), cancel: cancel}
			for _, r := range rs {
				r.flight = f
			}
			go rn.renew(ctx, f, rs)
		}
		rn.mu.Unlock()
	}
}

// renew sends one batch and applies the results: a confirmed renewal sent
// at t moves valid-until to t+TTL−drift; an unknown or refused one changes
// nothing and is retried sooner; "not the owner" is a loss.
func (rn *renewer) renew(ctx context.Context, f *flight, batch []*renewal) {
	defer f.cancel()
	sent := time.Now()
	results, errs := rn.send(ctx, batch)
	took := time.Since(sent)
	if h := testHookRenewed.Load(); h != nil {
		(*h)()
	}
	for _, err := range errs {
		if mayHaveMoved(err) {
			rn.c.reloadTopology() // once for the batch
			break
		}
	}

	var events, losses []func()
	var requeue []*renewal
	var refused []int
	for i, r := range batch {
		res, err := results[i], errs[i]
		r.mu.Lock()
		if r.stopped.Load() {
			r.mu.Unlock()
			continue
		}
		a, l := r.l.cur.Load(), r.l
		ttl := r.a.spec.TTL
		switch {
		case err != nil:
			class := ErrUnknown
			if classify(err) != outUnknown {
				class = ErrRefused
			}
			e := fmt.Errorf("%w: renewal of key %q: %w", class, a.key, err)
			l.mu.Lock()
			l.lastErr = e
			l.mu.Unlock()
			events = append(events, func() { a.observe(Event{Kind: EventRenewFailed, Took: took, Err: e}) })
			r.setNext(time.Now().Add(max(r.interval/3, time.Millisecond)))
			requeue = append(requeue, r)
		case res == 1 && !l.extend(sent.Add(ttl-drift(ttl))):
			// Confirmed too late: the validity had run out before the
			// answer came, so whether the key stayed ours all along cannot
			// change what the clock said. Lost, as the validity timer
			// would have decided had it run first.
			cause := a.lossCause(l, "its validity ran out before a renewal was confirmed")
			if l.markLost(cause) {
				losses = append(losses, func() { l.reportLoss(cause) })
			}
		case res == 1:
			events = append(events, func() { a.observe(Event{Kind: EventRenewed, Took: took}) })
			r.setNext(sent.Add(r.interval))
			requeue = append(requeue, r)
		default:
			// Not ours: marked lost below, once the batch's confirmed
			// renewals are applied (a lookup for the loss's wording must
			// not hold them up).
			refused = append(refused, i)
			r.refused = true // stays in flight, out of the queue, until marked
		}
		r.mu.Unlock()
	}
	rn.mu.Lock()
	for _, r := range batch {
		if r.flight == f && !r.refused {
			r.flight = nil
		}
	}
	wake := false
	for _, r := range requeue {
		if !r.stopped.Load() && r.next.Before(r.end) {
			wake = rn.push(r) || wake
		}
	}
	rn.mu.Unlock()
	if wake {
		rn.wakeLoop()
	}
	// Losses found so far (renewals confirmed too late) are reported now,
	// each on its own goroutine: the lookup below must not delay them.
	for _, report := range losses {
		go report()
	}
	losses = nil
	// A lease found not ours: was it released from outside (ForceRelease)?
	// Asked without any lock held, for all of the batch's refused leases
	// in one round trip (bounded by the release timeout; no answer only
	// costs the wording), then each is marked lost under its r.mu (Do
	// cannot return meanwhile without seeing it) and reported after the
	// unlock (Do waits for that before its EventDone).
	if len(refused) > 0 {
		ks, ids := make([]keys, len(refused)), make([]string, len(refused))
		for j, i := range refused {
			ks[j], ids[j] = batch[i].a.k, batch[i].a.id
		}
		forced := rn.c.forcedManyFromOutside(ks, ids)
		for j, i := range refused {
			r := batch[i]
			r.mu.Lock()
			if r.stopped.Load() {
				r.mu.Unlock()
				continue
			}
			a, l := r.l.cur.Load(), r.l
			what := "the key no longer holds this lease (it expired, was deleted from outside, or was taken)"
			switch {
			case results[i] == -2:
				what = "the key holds a value of another type (overwritten from outside)"
			case forced[j]:
				what = "the lease was released from outside (ForceRelease, e.g. leasectl release)"
			}
			cause := fmt.Errorf("%w: key %q: renewal refused: %s", ErrLost, a.key, what)
			if l.markLost(cause) {
				losses = append(losses, func() {
					l.reportLoss(cause, Event{Kind: EventRenewFailed, Took: took, Err: cause})
				})
			}
			r.mu.Unlock()
		}
		rn.mu.Lock()
		for _, i := range refused {
			if r := batch[i]; r.flight == f {
				r.flight = nil
			}
		}
		rn.mu.Unlock()
	}
	// Observers run without any lock held: they may call anything,
	// Client.Close included. Each loss is reported on its own goroutine,
	// so that one lease's observer never delays another lease's
	// cancellation (losses are rare).
	for _, report := range losses {
		go report()
	}
	for _, e := range events {
		e()
	}
}

// send renews the batch: a renew-many script on a standalone server, a
// pipeline of single renewals on a Cluster (keys of one batch span slots).
// It returns a result and an error per lease.
func (rn *renewer) send(ctx context.Context, batch []*renewal) ([]int64, []error) {
	results := make([]int64, len(batch))
	errs := make([]error, len(batch))
	if rn.c.replicas > 0 {
		rn.sendReplicated(ctx, batch, results, errs)
		return results, errs
	}
	if _, cluster := rn.c.rdb.(*redis.ClusterClient); cluster {
		rn.sendCluster(ctx, batch, results, errs)
		return results, errs
	}
	// EVALSHA with the keys, then each lease's identity and TTL; the TTLs
	// count their writes (see afterWrite).
	n := len(batch)
	argv := make([]any, 3+3*n)
	ttls := make([]intArg, n)
	argv[2] = n
	for i, r := range batch {
		ttls[i].n = ms(r.a.spec.TTL)
		argv[3+i] = r.a.k.lock
		argv[3+n+2*i], argv[3+n+2*i+1] = r.a.id, &ttls[i]
	}
	res, err := rn.c.evalCmd(ctx, renewManyScript, argv).Int64Slice()
	err = rn.c.afterWrite(err, ttls[0].writes.Load())
	if err == nil && len(res) != len(batch) {
		err = errors.New("lease: unexpected renew reply")
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return results, errs
	}
	copy(results, res)
	return results, errs
}

func (rn *renewer) sendCluster(ctx context.Context, batch []*renewal, results []int64, errs []error) {
	// EVALSHA first; on NOSCRIPT (a restarted or flushed node) the same
	// renewals again by EVAL, as Script.Run does (no SCRIPT LOAD, which a
	// least-privilege ACL need not allow).
	// Counted (see afterWrite), over both passes: an EVALSHA that go-redis
	// sent twice before its NOSCRIPT answer may have run the first time.
	ttls := make([]intArg, len(batch))
	for _, eval := range []bool{false, true} {
		pipe := rn.c.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, r := range batch {
			if eval && !(errs[i] != nil && redis.HasErrorPrefix(errs[i], "NOSCRIPT")) {
				continue
			}
			if eval {
				ttls[i].writes.CompareAndSwap(1, 0) // as forgetNoScript
			}
			ttls[i].n = ms(r.a.spec.TTL)
			keys, args := []string{r.a.k.lock}, []any{r.a.id, &ttls[i]}
			if eval {
				cmds[i] = pipe.Eval(ctx, renewSrc, keys, args...)
			} else {
				cmds[i] = pipe.EvalSha(ctx, renewScript.Hash(), keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
		noscript := false
		for i, c := range cmds {
			if c == nil {
				continue
			}
			results[i], errs[i] = c.Int64()
			errs[i] = rn.c.afterWrite(errs[i], ttls[i].writes.Load())
			if errs[i] != nil && redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
				noscript = true
			}
		}
		if !noscript {
			return
		}
	}
}

// sendReplicated renews the batch with WithReplicas set: on each master,
// in one pipeline on one connection, the renewals of the leases it holds
// and then WAIT, so that a renewal counts only once the required replicas
// have it, as a grant does. A renewal that a primary demoted by a failover
// still accepted (its replicas now follow the new one) is then not
// acknowledged, and does not extend the lease's validity: the key on the
// new primary expires by the last acknowledged renewal, after that
// validity ends, so the holder's context is cancelled before another
// holder can be granted the key there.
func (rn *renewer) sendReplicated(ctx context.Context, batch []*renewal, results []int64, errs []error) {
	groups := map[redis.Pipeliner][]int{}
	var order []redis.Pipeliner
	cc, cluster := rn.c.rdb.(*redis.ClusterClient)
	nodes := map[*redis.Client]redis.Pipeliner{}
	var single redis.Pipeliner
	for i, r := range batch {
		var pipe redis.Pipeliner
		if cluster {
			node, err := cc.MasterForKey(ctx, r.a.k.lock)
			if err != nil {
				errs[i] = err
				continue
			}
			if pipe = nodes[node]; pipe == nil {
				pipe = node.Pipeline()
				nodes[node] = pipe
			}
		} else {
			if single == nil {
				single = rn.c.rdb.Pipeline()
			}
			pipe = single
		}
		if groups[pipe] == nil {
			order = append(order, pipe)
		}
		groups[pipe] = append(groups[pipe], i)
	}
	rn.sendGroups(ctx, order, groups, batch, results, errs, false)
	if !cluster {
		return
	}
	// A slot being migrated: keys already moved are answered ASK by their
	// master. Send those renewals to the importing master (ASKING before
	// each), with WAIT there, as go-redis's Cluster pipeline follows ASK:
	// a migration that lasts longer than the TTL must not lose the lease.
	asked := map[string][]int{}
	var askErr []error
	for i, err := range errs {
		if err != nil && redis.HasErrorPrefix(err, "ASK") {
			if f := strings.Fields(err.Error()); len(f) == 3 {
				if asked[f[2]] == nil {
					askErr = append(askErr, err)
				}
				asked[f[2]] = append(asked[f[2]], i)
			}
		}
	}
	groups, order = map[redis.Pipeliner][]int{}, nil
	for _, err := range askErr {
		if node := rn.c.askTarget(ctx, err); node != nil {
			pipe := node.Pipeline()
			groups[pipe] = asked[strings.Fields(err.Error())[2]]
			order = append(order, pipe)
		}
	}
	rn.sendGroups(ctx, order, groups, batch, results, errs, true)
}

// sendGroups sends each pipeline's renewals (sendWaited), the masters at
// once, as a Cluster pipeline does: a master that does not answer (or
// whose WAIT runs to its timeout) must not hold the others' renewals up to
// the flight's deadline. Each writes only its own leases' entries.
func (rn *renewer) sendGroups(ctx context.Context, order []redis.Pipeliner, groups map[redis.Pipeliner][]int, batch []*renewal, results []int64, errs []error, asking bool) {
	if len(order) == 1 {
		rn.sendWaited(ctx, order[0], batch, groups[order[0]], results, errs, asking)
		return
	}
	var wg sync.WaitGroup
	for _, pipe := range order {
		wg.Add(1)
		go func(pipe redis.Pipeliner) {
			defer wg.Done()
			rn.sendWaited(ctx, pipe, batch, groups[pipe], results, errs, asking)
		}(pipe)
	}
	wg.Wait()
}

// sendWaited sends the renewals of batch[idx] on pipe, one script call
// each (EVALSHA, then EVAL on NOSCRIPT), followed by WAIT. A renewal that
// extended the key but was acknowledged by fewer replicas than required
// gets an error (unknown: it may be lost in a failover) instead of its 1.
//
// With asking (keys a migration moved to pipe's master), each is preceded
// by ASKING.
func (rn *renewer) sendWaited(ctx context.Context, pipe redis.Pipeliner, batch []*renewal, idx []int, results []int64, errs []error, asking bool) {
	// Counted (see afterWrite), over both passes, as in sendCluster.
	ttls := make([]intArg, len(idx))
	for _, eval := range []bool{false, true} {
		cmds := make([]*redis.Cmd, 0, len(idx))
		for k, i := range idx {
			r := batch[i]
			if eval && redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
				// As forgetNoScript. The EVAL pass sends every renewal
				// again: the others keep their count (they may have run).
				ttls[k].writes.CompareAndSwap(1, 0)
			}
			ttls[k].n = ms(r.a.spec.TTL)
			keys, args := []string{r.a.k.lock}, []any{r.a.id, &ttls[k]}
			if asking {
				pipe.Do(ctx, "ASKING")
			}
			if eval {
				cmds = append(cmds, pipe.Eval(ctx, renewSrc, keys, args...))
			} else {
				cmds = append(cmds, pipe.EvalSha(ctx, renewScript.Hash(), keys, args...))
			}
		}
		// Within the flight's deadline, so that too few replicas are
		// answered as such rather than as a read that timed out (which
		// also costs the connection).
		timeout := rn.c.replicaTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(dl)-5*time.Millisecond)
		}
		wait := pipe.Do(ctx, "WAIT", rn.c.replicas, ms(timeout))
		_, _ = pipe.Exec(ctx)
		noscript := false
		for k, i := range idx {
			results[i], errs[i] = cmds[k].Int64()
			errs[i] = rn.c.afterWrite(errs[i], ttls[k].writes.Load())
			if errs[i] != nil && redis.HasErrorPrefix(errs[i], "NOSCRIPT") {
				noscript = true
			}
		}
		if noscript && !eval {
			continue // all again by EVAL: WAIT must follow the writes it confirms
		}
		acked, werr := wait.Int()
		for _, i := range idx {
			if errs[i] != nil || results[i] != 1 {
				continue // an error, or a definite "not ours"
			}
			switch {
			case werr != nil:
				errs[i] = executedError{fmt.Errorf("WAIT for %d replicas after the renewal: %w", rn.c.replicas, werr)}
			case acked < rn.c.replicas:
				errs[i] = fmt.Errorf("%w: renewal acknowledged by %d of %d replicas (it may be lost in a failover)", errUnreplicated, acked, rn.c.replicas)
			}
		}
		return
	}
}

// errUnreplicated marks a renewal that fewer replicas than WithReplicas
// requires acknowledged: not a reply lost, but unknown all the same.
var errUnreplicated = errors.New("lease: not acknowledged by the required replicas")

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// renewQueue is a min-heap of renewals by next renewal time.
type renewQueue []*renewal

func (q renewQueue) Len() int           { return len(q) }
func (q renewQueue) Less(i, j int) bool { return q[i].latest().Before(q[j].latest()) }
func (q renewQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *renewQueue) Push(x any) {
	r := x.(*renewal)
	r.index = len(*q)
	*q = append(*q, r)
}
func (q *renewQueue) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	r.index = -1
	*q = old[:len(old)-1]
	return r
}
