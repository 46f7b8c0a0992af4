package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Leases acquired one after another register with the renewer one after
// another (each when its first renewal is due); their renewals still go
// in shared batches, not a round trip each. Counted, not timed: commands
// sent while 1,000 leases are held for four renewal periods.
//
// The TTL leaves room for stalls: with 900ms, a renewal's attempts (150ms
// each) and the validity left after the first renewal (~600ms) did not
// outlast a -race run with a CPU hog, and a lease was lost. A call that
// ends before its fn (not granted in time) is reported, and does not hang
// the wait for all to be held.
func TestRenewalsOfStaggeredLeasesShareBatches(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	hook := &countHook{}
	rdb.AddHook(hook)
	c, _ := newClient(t, rdb)
	const n = 1000
	s := lease.Spec{TTL: 3 * time.Second, Deadline: time.Minute}
	release := make(chan struct{})
	var held, done sync.WaitGroup
	held.Add(n)
	errs := make(chan error, n)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			entered := false
			err := c.Do(context.Background(), "staggered-"+itoa(i), s, func(ctx context.Context) error {
				entered = true
				held.Done()
				select {
				case <-release:
				case <-ctx.Done():
				}
				return context.Cause(ctx)
			})
			if !entered {
				held.Done()
			}
			errs <- err
		}()
		if i%10 == 9 {
			time.Sleep(time.Millisecond) // spread the acquires over ~100ms or more
		}
	}
	held.Wait()
	before := hook.n.Load()
	const periods = 4
	time.Sleep(periods * s.TTL / 3)
	sent := hook.n.Load() - before
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil && err != context.Canceled {
			t.Fatalf("a held lease: %v", err)
		}
	}
	renewals := int64(n * periods)
	t.Logf("%d renewals due, %d commands sent (%.1f renewals per command)", renewals, sent, float64(renewals)/float64(max(sent, 1)))
	if sent*10 > renewals {
		t.Fatalf("%d commands for %d renewals: want batches of 10 or more on average", sent, renewals)
	}
}
