package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Leader terms (always fenced) on two keys, four candidates on three
// Clients (one behind a proxy that blackholes for a while, a leader cut
// off mid-term), terms that end by returning and by ctx, WatchLeader on
// both keys. Every look: no key without an expiry, locks within the
// term's TTL, counters within WithCounterTTL. Once the campaigns end,
// nothing is left after a tombstone's and a counter's life.
func TestAdversary75a_LeaderTermsLeaveNothing(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	p := leasetest.StartProxy(t, srv.Addr())
	const recheck = 200 * time.Millisecond
	opts := []lease.Option{lease.WithRecheck(recheck), lease.WithCounterTTL(time.Second), lease.WithReleaseTimeout(100 * time.Millisecond)}
	a, _ := newClient(t, srv.Client(t), opts...)
	b, _ := newClient(t, srv.Client(t), opts...)
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { prdb.Close() })
	cut, _ := newClient(t, prdb, opts...)

	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})
	bounds := map[string]time.Duration{
		"lock": time.Second, "tomb": time.Second, "counter": time.Second,
		"queue": 2*recheck + 100*time.Millisecond, "qexp": 2*recheck + 100*time.Millisecond,
	}
	looks := a75Sample(t, bounds, stop, admin)
	var terms sync.Map
	var wg sync.WaitGroup
	for i, c := range []*lease.Client{a, b, cut, a} {
		for _, key := range []string{"a75-lead-0", "a75-lead-1"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				err := c.Lead(ctx, key, lease.LeadSpec{TTL: time.Second, MinValidity: 100 * time.Millisecond, Owner: fmt.Sprintf("cand-%d", i), Backoff: 50 * time.Millisecond}, func(ctx context.Context) error {
					n++
					select {
					case <-time.After(time.Duration(50+30*i) * time.Millisecond):
					case <-ctx.Done():
					}
					return nil
				})
				terms.Store(fmt.Sprintf("%d/%s", i, key), n)
				if err != nil {
					t.Errorf("candidate %d on %s: %v", i, key, err)
				}
			}()
		}
	}
	watched := make(chan int, 2)
	for _, key := range []string{"a75-lead-0", "a75-lead-1"} {
		go func() {
			n := 0
			for range b.WatchLeader(ctx, key) {
				n++
			}
			watched <- n
		}()
	}
	time.Sleep(time.Second)
	p.Set(leasetest.Blackhole)
	time.Sleep(700 * time.Millisecond)
	p.Set(leasetest.Pass)
	time.Sleep(800 * time.Millisecond)
	cancel()
	wg.Wait()
	w0, w1 := <-watched, <-watched
	close(stop)
	var all []string
	terms.Range(func(k, v any) bool { all = append(all, fmt.Sprintf("%v:%v", k, v)); return true })
	t.Logf("terms per candidate %v; %d+%d leaders watched; %d looks", all, w0, w1, <-looks)
	a75Drain(t, "after the campaigns", 1500*time.Millisecond, admin)
}
