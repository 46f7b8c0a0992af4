package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Every grant takes the call's entry out of the key's queue: the release
// that handed the key over, or the acquire that found it free. Checked
// here for the first: after a chain of handovers between Clients, every
// call having waited, the queue and its expiries are empty at once (an
// entry left behind would only expire a re-check later, and a release
// would hand the key to it), and no two calls overlapped. (The release
// still takes the caller's entry out too: see sendRelease.)
func TestHandoverChainLeavesQueueEmpty(t *testing.T) {
	const clients, calls = 4, 25
	key := uniqueKey(t)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second}
	var in, overlaps, waited atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		c, rec := newClient(t, rdb)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < calls; j++ {
				err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
					if in.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					in.Add(-1)
					return nil
				})
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
			waited.Add(int64(rec.Count(lease.EventWaiting)))
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d calls overlapped", overlaps.Load())
	}
	if waited.Load() < calls {
		t.Fatalf("only %d of %d calls waited: the chain did not queue", waited.Load(), clients*calls)
	}
	rdb := shared.Client(t)
	ctx := context.Background()
	q, x := "lease:{"+key+"}:q", "lease:{"+key+"}:x"
	if n, err := rdb.Exists(ctx, q, x, lockKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("after the chain: %d of the queue, its expiries and the lock exist (%v): want none; queue %v",
			n, err, rdb.ZRange(ctx, q, 0, -1).Val())
	}
	t.Logf("%d calls, %d waited", clients*calls, waited.Load())
}

// The other kind of grant to a waiter: the holder's lease runs out (no
// release, no handover), and the waiter's next acquire finds the key free.
// That acquire takes the waiter's entry out of the queue (checked inside
// fn, before the call's own release); the release leaves nothing behind.
func TestWaiterGrantedOnExpiryLeavesQueueEmpty(t *testing.T) {
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	// A holder that never releases: the key runs out in 300ms.
	if err := rdb.Set(ctx, lockKey(key), "0123456789abcdef0123456789abcdef:0", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	q, x := "lease:{"+key+"}:q", "lease:{"+key+"}:x"
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second}
	err := c.Do(ctx, key, s, func(ctx context.Context) error {
		if n := rdb.ZCard(ctx, q).Val(); n != 0 {
			t.Errorf("in the function: %d entries queued, want 0 (the grant takes the call's out)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Count(lease.EventWaiting) != 1 {
		t.Fatalf("events %v: want the call to have waited", kinds(rec.Events()))
	}
	if n, err := rdb.Exists(ctx, q, x, lockKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("after the call: %d of the queue, its expiries and the lock exist (%v): want none", n, err)
	}
}
