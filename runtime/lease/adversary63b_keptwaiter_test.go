package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Spec.Keep (spec.go): "A waiter in another process makes the Client
// release it as soon as no call uses it." README, Runtime semantics,
// Waiting: "a missed notification — a dropped subscription, a missing
// permission, a failover, a hold-min that only shortened the TTL — costs
// at most one re-check."
//
// The keeper hears of a waiter only by the single "w" its first busy
// acquire publishes (acquire.lua: ZADD NX added == 1). A short reply
// blackhole on the keeper's connections (tens of ms, between two of its
// subscription's probes) drops that one message while the subscription
// stays up: nothing is reconnected, no confirmation comes, checkKept never
// runs. The waiter's re-checks find its entry queued already and publish
// nothing more. The keeper, idle or calling the key now and then, keeps the
// lease (every reuse trusts the live channel and extends the keep), and the
// waiter in the other Client waits out its whole Wait and gets ErrBusy.
func TestAdversary63b_KeeperMissesWaiterInShortBlackhole(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	krdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { krdb.Close() })
	keeper, _ := newClient(t, krdb)
	waiter, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))

	keep := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second, Keep: 4 * time.Second}
	wspec := lease.Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second, Wait: 2500 * time.Millisecond, MinValidity: 500 * time.Millisecond}

	var worst, hole time.Duration
	var worstErr error
	for round := 0; round < 3; round++ {
		key := uniqueKey(t)
		warm(t, waiter, key+"-warm")
		// The keeper's first call keeps the lease; its Client subscribes
		// to the key's channel and checks the queue (empty).
		if err := keeper.Do(context.Background(), key, keep, nop); err != nil {
			t.Fatal(err)
		}
		// Let the keeper's subscription come up and its first check end.
		time.Sleep(300 * time.Millisecond)

		// The fault: replies to the keeper's Client are dropped for a
		// moment, while the waiter in the other Client joins the queue.
		p.Set(leasetest.Blackhole)
		start := time.Now()
		done := make(chan error, 1)
		var entered atomic.Int64
		go func() {
			done <- waiter.Do(context.Background(), key, wspec, func(context.Context) error {
				entered.Store(int64(time.Since(start)))
				return nil
			})
		}()
		if !waitFor(2*time.Second, func() bool { return len(adv2Waiters(t, op, key)) >= 1 }) {
			p.Set(leasetest.Pass)
			t.Fatal("the waiter never queued")
		}
		time.Sleep(30 * time.Millisecond)
		p.Set(leasetest.Pass)
		blackhole := time.Since(start)

		// The keeper goes on using its key now and then (a consumer of a
		// partition): each call finds nobody waiting, as far as it knows.
		var err error
	loop:
		for {
			select {
			case err = <-done:
				break loop
			case <-time.After(300 * time.Millisecond):
				_ = keeper.Do(context.Background(), key, keep, nop)
			}
		}
		waited := time.Since(start)
		if e := time.Duration(entered.Load()); e > 0 {
			waited = e
		}
		t.Logf("round %d: blackhole %v; waiter returned %v after %v", round, blackhole.Round(time.Millisecond), err, waited.Round(time.Millisecond))
		if err != nil || waited > worst {
			worst, worstErr, hole = waited, err, blackhole
		}
		if err != nil || waited > 1500*time.Millisecond {
			break // reproduced
		}
	}
	// Release "as soon as no call uses it": the keeper's calls take
	// microseconds; a missed announcement may cost a re-check (500ms) and
	// the probe's detection (about 2s), not the waiter's whole Wait.
	if worstErr != nil || worst > 1500*time.Millisecond {
		if errors.Is(worstErr, lease.ErrBusy) {
			t.Fatalf("the waiter in another Client got ErrBusy after waiting %v while the keeper only kept the lease between calls (its \"w\" was dropped in a %v reply blackhole on the keeper's connections): %v", worst.Round(time.Millisecond), hole.Round(time.Millisecond), worstErr)
		}
		t.Fatalf("the waiter waited %v for a kept lease that no call used (err %v)", worst.Round(time.Millisecond), worstErr)
	}
}
