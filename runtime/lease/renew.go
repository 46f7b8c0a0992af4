package lease

import (
	"container/heap"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed renew_many.lua
var renewManySrc string

var renewManyScript = redis.NewScript(renewManySrc)

// renewBatchMax bounds the keys of one renew-many call.
const renewBatchMax = 256

// batchWindow: leases due this soon are renewed with the current batch.
const batchWindow = 10 * time.Millisecond

// renewer renews the held leases of one Client. A goroutine runs only while
// leases are held; each round renews every lease that is due in one script
// call per 256 leases (standalone) or one pipeline (Cluster), instead of a
// goroutine, a timer and a round trip per lease.
type renewer struct {
	c      *Client
	mu     sync.Mutex
	q      renewQueue
	wake   chan struct{}
	run    bool
	until  time.Time // when the sleeping loop wakes by itself (zero: not asleep)
	closed chan struct{}
	done   chan struct{} // closed when the current loop exits
}

// renewal is one held lease's renewal state.
type renewal struct {
	a        *call
	l        *Lease
	cancel   context.CancelCauseFunc
	interval time.Duration
	next     time.Time // guarded by the renewer's mu while queued
	index    int       // in the queue; -1 when not queued (renewer's mu)

	// mu orders applying a renewal's result against Do finishing: remove
	// takes it, so Do cannot return while a loss is being applied.
	mu      sync.Mutex
	stopped atomic.Bool // Do has returned: results are ignored
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

// add schedules r's first renewal.
func (rn *renewer) add(r *renewal) {
	rn.mu.Lock()
	heap.Push(&rn.q, r)
	// Wake the loop only if it sleeps past this renewal.
	first := !rn.until.IsZero() && r.next.Before(rn.until)
	if !rn.run {
		rn.run = true
		rn.done = make(chan struct{})
		go rn.loop(rn.done)
	}
	rn.mu.Unlock()
	if first {
		select {
		case rn.wake <- struct{}{}:
		default:
		}
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
	rn.mu.Unlock()
}

func (rn *renewer) close() {
	close(rn.closed)
	rn.mu.Lock()
	done := rn.done
	rn.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (rn *renewer) loop(done chan struct{}) {
	defer close(done)
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
		if wait := rn.q[0].next.Sub(now); wait > 0 {
			rn.until = rn.q[0].next
			rn.mu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-rn.wake:
				t.Stop()
			case <-rn.closed:
				return
			}
			rn.mu.Lock()
			rn.until = time.Time{}
			rn.mu.Unlock()
			continue
		}
		var batch []*renewal
		for len(rn.q) > 0 && rn.q[0].next.Before(now.Add(batchWindow)) {
			r := heap.Pop(&rn.q).(*renewal)
			if !now.Before(r.a.end) {
				continue // renewal stops at the total deadline
			}
			batch = append(batch, r)
		}
		rn.mu.Unlock()
		if len(batch) > 0 {
			rn.renew(batch)
		}
	}
}

// renew sends one round of renewals and applies the results: a confirmed
// renewal sent at t moves valid-until to t+TTL−drift; an unknown one
// changes nothing and is retried sooner; "not the owner" is a loss.
func (rn *renewer) renew(batch []*renewal) {
	sent := time.Now()
	dl := batch[0].a.end
	for _, r := range batch {
		r.l.mu.Lock()
		v := r.l.validUntil
		r.l.mu.Unlock()
		dl = minTime(dl, minTime(v, r.a.end))
	}
	// A reply after valid-until is useless; stop waiting just before, so
	// the failure is reported before the validity timer ends the lease.
	if early := dl.Add(-2 * time.Millisecond); early.After(sent) {
		dl = early
	}
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	stop := context.AfterFunc(ctxOf(rn.closed), cancel)
	results, err := rn.send(ctx, batch)
	stop()
	cancel()

	var requeue []*renewal
	for i, r := range batch {
		if err != nil {
			// Reported even when fn has just returned: the renewal was
			// sent while the lease was in use.
			r.a.observe(Event{Kind: EventRenewFailed, Err: fmt.Errorf("%w: renewal of key %q: %w", ErrUnknown, r.a.key, err)})
		}
		r.mu.Lock()
		if r.stopped.Load() {
			r.mu.Unlock()
			continue
		}
		ttl := r.a.spec.TTL
		switch {
		case err != nil:
			r.next = time.Now().Add(r.interval / 3)
		case results[i] == 1:
			r.l.mu.Lock()
			if v := sent.Add(ttl - drift(ttl)); v.After(r.l.validUntil) {
				r.l.validUntil = v
			}
			r.l.mu.Unlock()
			r.a.observe(Event{Kind: EventRenewed})
			r.next = sent.Add(r.interval)
		default:
			r.a.observe(Event{Kind: EventRenewFailed, Err: fmt.Errorf("%w: renewal of key %q refused: no longer the owner", ErrLost, r.a.key)})
			r.a.lose(r.l, r.cancel)
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		if r.next.Before(r.a.end) {
			requeue = append(requeue, r)
		}
	}
	rn.mu.Lock()
	for _, r := range requeue {
		if !r.stopped.Load() {
			heap.Push(&rn.q, r)
		}
	}
	rn.mu.Unlock()
}

// send renews the batch: renew-many scripts on a standalone server, a
// pipeline of single renewals on a Cluster (keys of one batch span slots).
func (rn *renewer) send(ctx context.Context, batch []*renewal) ([]int64, error) {
	results := make([]int64, 0, len(batch))
	if _, cluster := rn.c.rdb.(*redis.ClusterClient); cluster {
		return rn.sendCluster(ctx, batch)
	}
	for start := 0; start < len(batch); start += renewBatchMax {
		chunk := batch[start:min(start+renewBatchMax, len(batch))]
		keys := make([]string, len(chunk))
		args := make([]any, 0, 2*len(chunk))
		for i, r := range chunk {
			keys[i] = r.a.k.lock
			args = append(args, r.a.id, ms(r.a.spec.TTL))
		}
		res, err := renewManyScript.Run(ctx, rn.c.rdb, keys, args...).Int64Slice()
		if err != nil {
			return nil, err
		}
		if len(res) != len(chunk) {
			return nil, errors.New("lease: unexpected renew reply")
		}
		results = append(results, res...)
	}
	return results, nil
}

func (rn *renewer) sendCluster(ctx context.Context, batch []*renewal) ([]int64, error) {
	for try := 0; ; try++ {
		pipe := rn.c.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, r := range batch {
			cmds[i] = pipe.EvalSha(ctx, renewScript.Hash(), []string{r.a.k.lock}, r.a.id, ms(r.a.spec.TTL))
		}
		_, err := pipe.Exec(ctx)
		if err != nil && try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err := renewScript.Load(ctx, rn.c.rdb).Err(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]int64, len(cmds))
		for i, c := range cmds {
			if out[i], err = c.Int64(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// ctxOf is a context cancelled when ch closes.
func ctxOf(ch <-chan struct{}) context.Context { return closedCtx{ch} }

type closedCtx struct{ ch <-chan struct{} }

func (closedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c closedCtx) Done() <-chan struct{}     { return c.ch }
func (c closedCtx) Err() error {
	select {
	case <-c.ch:
		return context.Canceled
	default:
		return nil
	}
}
func (closedCtx) Value(any) any { return nil }

// renewQueue is a min-heap of renewals by next renewal time.
type renewQueue []*renewal

func (q renewQueue) Len() int           { return len(q) }
func (q renewQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
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
