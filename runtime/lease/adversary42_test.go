package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 42 (adversary on b93bb40): attacks on a first, smaller release
// script tried for speed (quickrelease.lua, reverted). What they found is
// kept here as properties of the release itself: it is one round trip, so
// that it fits its budget, tells a loss, and is never reported refused
// after it ran.

// adv42Events is a recorder's events, for failure messages.
func adv42Events(rec *leasetest.Recorder) string {
	var b strings.Builder
	for _, e := range rec.Events() {
		fmt.Fprintf(&b, "\n  %v err=%v", e.Kind, e.Err)
	}
	return b.String()
}

// adv42Slow is a Client whose every reply takes delay (a distant Redis:
// round trip delay), with release timeout rt, on a fresh server; admin
// talks to the server directly.
func adv42Slow(t *testing.T, delay, rt time.Duration) (*lease.Client, *leasetest.Recorder, *redis.Client, *leasetest.Server) {
	t.Helper()
	c, rec, p, admin, srv := proxied(t, nil, lease.WithReleaseTimeout(rt))
	// Warm: the scripts loaded, a connection in the pool.
	if err := c.Do(context.Background(), "adv42-warm", spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(delay)
	return c, rec, admin, srv
}

// A release is one round trip, and must stay one: with a round trip of
// 60 ms and a release timeout of 100 ms, a holder that took the key without
// waiting hands it to a waiter queued behind it, and the release is
// confirmed. Round 42 (adversary on the quick release, reverted) found a
// first, smaller release script that answered "someone queued, send the
// full release" broke this: two round trips (three while release.lua was
// not in the server's script cache) did not fit the budget, the key stayed
// held for its TTL and the waiter gave up.
func TestAdversary42_SlowRedisReleaseWithWaiter(t *testing.T) {
	holder, hrec, admin, srv := adv42Slow(t, 60*time.Millisecond, 100*time.Millisecond)
	ctx := context.Background()
	waiter, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	release := make(chan struct{})
	held := hold(t, holder, key, spec(10*time.Second, 20*time.Second), release)
	waited := make(chan error, 1)
	var enteredAt atomic.Int64
	go func() {
		waited <- waiter.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second}, func(context.Context) error {
			enteredAt.Store(time.Now().UnixNano())
			return nil
		})
	}()
	if !waitFor(3*time.Second, func() bool { return admin.Exists(ctx, "lease:{"+key+"}:q").Val() == 1 }) {
		t.Fatal("the waiter did not queue")
	}
	sent := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-waited; err != nil {
		t.Errorf("waiter, queued before the holder released: %v (holder's events:%s)", err, adv42Events(hrec))
	} else if lag := time.Duration(enteredAt.Load() - sent.UnixNano()); lag > time.Second {
		t.Errorf("the waiter entered %v after the release", lag)
	}
	if hrec.Count(lease.EventReleased) != 2 || hrec.Count(lease.EventReleaseUnconfirmed) != 0 {
		t.Errorf("a release of one round trip (60 ms) within a 100 ms release timeout: want EventReleased (warm-up and this), got:%s", adv42Events(hrec))
	}
}

// The same setting: the key is deleted from outside while held; the
// release finds that out (answer 0 within the lease's validity) in its one
// round trip, and Do returns ErrLost (round 42: with two round trips the
// answer came after the budget, and Do returned nil).
func TestAdversary42_SlowRedisDeletedFromOutsideIsLost(t *testing.T) {
	c, rec, admin, _ := adv42Slow(t, 60*time.Millisecond, 100*time.Millisecond)
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, spec(10*time.Second, 20*time.Second), func(ctx context.Context) error {
		return admin.Del(ctx, lockKey(key)).Err()
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("Do = %v, want ErrLost (the key was deleted from outside while held; one round trip of 60 ms within a 100 ms release timeout tells so), events:%s", err, adv42Events(rec))
	}
}

// The same with the key taken by another owner: ErrLost "held by another
// owner".
func TestAdversary42_SlowRedisTakenByAnotherIsLost(t *testing.T) {
	c, rec, admin, _ := adv42Slow(t, 60*time.Millisecond, 100*time.Millisecond)
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, spec(10*time.Second, 20*time.Second), func(ctx context.Context) error {
		return admin.Set(ctx, lockKey(key), "someoneelse:0", 10*time.Second).Err()
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("Do = %v, want ErrLost (the key was taken by another owner while held), events:%s", err, adv42Events(rec))
	}
}

// As TestAdversary42_SlowRedisDeletedFromOutsideIsLost, with the default
// release timeout (250 ms) and a round trip of 130 ms: one round trip fits
// the release budget, two do not. A key deleted from outside while held
// must make Do return ErrLost.
func TestAdversary42_SlowRedisDefaultTimeoutDeletedIsLost(t *testing.T) {
	c, rec, admin, _ := adv42Slow(t, 130*time.Millisecond, lease.DefaultReleaseTimeout)
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, spec(10*time.Second, 20*time.Second), func(ctx context.Context) error {
		return admin.Del(ctx, lockKey(key)).Err()
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("Do = %v, want ErrLost (deleted from outside while held; round trip 130 ms, default release timeout 250 ms), events:%s", err, adv42Events(rec))
	}
}

// adv42Proxied is proxied that also returns the go-redis client through
// the proxy (for hooks).
func adv42Proxied(t *testing.T) (*lease.Client, *leasetest.Recorder, *leasetest.Proxy, *redis.Client, *redis.Client, *leasetest.Server) {
	t.Helper()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c, rec := newClient(t, rdb)
	return c, rec, p, rdb, srv.Client(t), srv
}

// adv42CutThenGone cuts the reply of the release's first script call;
// once go-redis's replay of it is answered, the go-redis client is closed
// (a service shutting down: Client.Close does not wait for the releases
// of running calls, then the service closes its go-redis client).
type adv42CutThenGone struct {
	p     *leasetest.Proxy
	rdb   *redis.Client
	armed atomic.Bool
}

func (h *adv42CutThenGone) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv42CutThenGone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *adv42CutThenGone) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) > 2 && fmt.Sprint(a[0]) == "evalsha" && fmt.Sprint(a[2]) == "6" && h.armed.CompareAndSwap(true, false) {
			h.p.Set(leasetest.CutNextReply)
			err := next(ctx, cmd)
			h.rdb.Close()
			return err
		}
		return next(ctx, cmd)
	}
}

// A release that ran is never reported refused: its reply is lost,
// go-redis's replay is answered (the tombstone: "released"), then the
// go-redis client is closed. Round 42: with the quick release, the cut
// reply was the quick script's, which ran; its replay answered "send the
// full release", which could not be sent (client closed), and the release
// was reported refused, "not carried out".
func TestAdversary42_RanReleaseNotReportedRefused(t *testing.T) {
	hk := &adv42CutThenGone{}
	c, rec, p, rdb, admin, _ := adv42Proxied(t)
	hk.p, hk.rdb = p, rdb
	ctx := context.Background()
	if err := c.Do(ctx, "adv42-warm", spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(hk)
	key := uniqueKey(t)
	err := c.Do(ctx, key, spec(5*time.Second, 10*time.Second), func(context.Context) error {
		hk.armed.Store(true)
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	if p.Cut() != 1 {
		t.Fatalf("cut %d replies, want 1", p.Cut())
	}
	if admin.Exists(ctx, lockKey(key)).Val() != 0 {
		t.Fatal("the key is still held: the release did not run (the attack did not take place)")
	}
	for _, e := range rec.Events() {
		if e.Kind == lease.EventReleaseUnconfirmed && errors.Is(e.Err, lease.ErrRefused) {
			t.Errorf("the release ran (the key is gone) but is reported refused: %v", e.Err)
		}
	}
	t.Logf("events:%s", adv42Events(rec))
	if rec.Count(lease.EventReleased)+rec.Count(lease.EventReleaseUnconfirmed) != 2 {
		t.Errorf("events:%s", adv42Events(rec))
	}
}
