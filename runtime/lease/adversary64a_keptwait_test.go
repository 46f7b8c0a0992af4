package lease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// README, Waiting: "a missed notification ... costs at most one re-check";
// Spec.Keep: "A waiter in another process makes the Client release it as
// soon as no call uses it." A reply blackhole on the keeper's connections
// longer than its subscription's probe period (the probe's own PUBLISH
// times out, so the subscription is never found dead nor confirmed again):
// every "w" of the waiter during the blackhole is lost. Once replies flow
// again, the waiter's next look (a re-check) must reach the keeper.
func TestAdversary64a_KeeperLongBlackholeBoundedByRecheck(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	krdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { krdb.Close() })
	keeper, _ := newClient(t, krdb)
	waiter, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	keep := lease.Spec{TTL: 20 * time.Second, Deadline: 5 * time.Second, Keep: 15 * time.Second}
	wspec := lease.Spec{TTL: 2 * time.Second, Deadline: 12 * time.Second, Wait: 10 * time.Second, MinValidity: 500 * time.Millisecond}
	for _, hole := range []time.Duration{1500 * time.Millisecond} {
		t.Run(fmt.Sprint(hole), func(t *testing.T) {
			key := uniqueKey(t)
			warm(t, waiter, key+"-warm")
			if err := keeper.Do(context.Background(), key, keep, nop); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			p.Set(leasetest.Blackhole)
			done := make(chan error, 1)
			var entered atomic.Int64
			go func() {
				done <- waiter.Do(context.Background(), key, wspec, func(context.Context) error {
					entered.Store(time.Now().UnixNano())
					return nil
				})
			}()
			if !waitFor(2*time.Second, func() bool { return len(adv2Waiters(t, op, key)) >= 1 }) {
				p.Set(leasetest.Pass)
				t.Fatal("the waiter never queued")
			}
			time.Sleep(hole)
			p.Set(leasetest.Pass)
			passed := time.Now()
			var err error
		loop:
			for {
				select {
				case err = <-done:
					break loop
				case <-time.After(200 * time.Millisecond):
					_ = keeper.Do(context.Background(), key, keep, nop)
				}
			}
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			lag := time.Duration(entered.Load() - passed.UnixNano())
			t.Logf("blackhole %v: the waiter entered %v after replies flowed again", hole, lag.Round(time.Millisecond))
			if lag > 1500*time.Millisecond {
				t.Errorf("the waiter entered %v after the keeper's replies flowed again (re-check 500ms)", lag.Round(time.Millisecond))
			}
		})
	}
}
