package lease_test

// Round 74b: a kept lease whose Client's subscription goes silent (its
// connection blackholed, the command connection healthy), then the lease
// is released from outside and taken by another Client.

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// The Spec.Keep doc: a kept lease released from outside is known "within a
// notification's latency and one round trip"; a kept call that begins
// while the notice is on its way may run on the released lease. Here the
// notice never comes (the subscription is silent, not broken): A's kept
// calls may enter beside the new holder B only until the Client finds its
// subscription dead (its probe, about probeEvery) or its next renewal
// (TTL/3, 3s here) finds the lease gone; after that, never. Each such call
// must not outlive being told: its Do returns nil or ErrLost.
func TestAdversary74b_SilentSubscriptionForcedReleaseWhileKept(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	var dials atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if dials.Add(1) == 2 { // the keep's subscription (the first is the command connection)
				return d.DialContext(ctx, network, p.Addr())
			}
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { rdb.Close() })
	cA, recA := newClient(t, rdb, lease.WithRecheck(200*time.Millisecond))
	cB, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	ctx := context.Background()
	key := "adv74b-deaf"
	if _, err := cA.Inspect(ctx, "adv74b-deaf-warm"); err != nil {
		t.Fatal(err)
	}
	ttl := 9 * time.Second
	s := lease.Spec{TTL: ttl, Deadline: 2 * time.Second, Keep: 30 * time.Second, Fence: true}
	var tok1 lease.Token
	if err := cA.Do(ctx, key, s, func(ctx context.Context) error { tok1, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // subscribed (through the proxy) and probed
	if p.Accepted() != 1 {
		t.Fatalf("the proxy accepted %d connections, want the subscription alone", p.Accepted())
	}
	p.Set(leasetest.Blackhole)
	time.Sleep(50 * time.Millisecond)
	info, err := cB.Inspect(ctx, key)
	if err != nil || info.Holder == "" {
		t.Fatalf("inspect: %+v %v", info, err)
	}
	forcedAt := time.Now()
	if _, err := cB.ForceRelease(ctx, key, info.Holder); err != nil {
		t.Fatal(err)
	}
	var tokB lease.Token
	var spans adv74bSpans
	bEntered := make(chan time.Time, 1)
	bDone := make(chan error, 1)
	bHold := 4 * time.Second
	go func() {
		bDone <- cB.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Fence: true}, adv74bRun(&spans, "B", bHold, &tokB, bEntered))
	}()
	var bIn time.Time
	select {
	case bIn = <-bEntered:
	case err := <-bDone:
		t.Fatalf("B: %v", err)
	}
	// A calls again and again while B holds.
	var lastIn time.Time
	entered := 0
	for time.Now().Before(bIn.Add(bHold - 300*time.Millisecond)) {
		var in, told time.Time
		var tok lease.Token
		err := cA.Do(ctx, key, s, func(ctx context.Context) error {
			in = time.Now()
			tok, _ = lease.TokenFrom(ctx)
			select {
			case <-ctx.Done():
				told = time.Now()
			case <-time.After(20 * time.Millisecond):
			}
			return nil
		})
		if !in.IsZero() {
			entered++
			lastIn = in
			out := told
			if out.IsZero() {
				out = in.Add(20 * time.Millisecond)
			}
			t.Logf("A entered %v after the forced release, token %d (B %d), told %v: %v", in.Sub(forcedAt).Round(time.Millisecond), tok, tokB, !told.IsZero(), err)
			if err != nil && !errors.Is(err, lease.ErrLost) {
				t.Errorf("A's kept call on the released lease: %v", err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if entered > 0 {
		if bound := 2500 * time.Millisecond; lastIn.Sub(forcedAt) > bound {
			t.Errorf("A's kept calls still entered on the released lease %v after the forced release (want none after ≤ %v: probe or renewal)", lastIn.Sub(forcedAt).Round(time.Millisecond), bound)
		}
	}
	t.Logf("A entered %d times while B held; lost events %d, subscription failures %d", entered, recA.Count(lease.EventLost), recA.Count(lease.EventSubscriptionFailed))
	if err := <-bDone; err != nil {
		t.Errorf("B: %v", err)
	}
	p.Set(leasetest.Pass)
	_ = tok1
}
