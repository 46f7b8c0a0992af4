package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The runtime on a 3-master Redis Cluster: the client New derives, scripts
// whose keys share one slot, notifications across nodes, batched renewals
// through the Cluster pipeline, and increasing tokens on every shard.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	if _, err := lease.New(cl.Client(t, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = false })); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("New(ClusterClient without ContextTimeoutEnabled) = %v, want an error naming the option", err)
	}
	withDeadlines := func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true }
	user := cl.Client(t, withDeadlines)
	a, recA := newClient(t, user)
	if a.Redis() != user {
		t.Fatalf("Redis() = %p, want the user's own ClusterClient %p", a.Redis(), user)
	}
	b, _ := newClient(t, cl.Client(t, withDeadlines))
	ctx := context.Background()

	// Keys spread over the slots of all masters; fencing on each.
	for i := range 12 {
		key := fmt.Sprint("order-", i)
		var first, second lease.Token
		for _, tok := range []*lease.Token{&first, &second} {
			err := a.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
				*tok, _ = lease.TokenFrom(ctx)
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
		}
		if first == 0 || second <= first {
			t.Fatalf("%s: tokens %d then %d", key, first, second)
		}
	}

	// A waiter on another client wakes on the release notification.
	release := make(chan struct{})
	done := hold(t, a, "contended", spec(20*time.Second, 30*time.Second), release)
	time.AfterFunc(150*time.Millisecond, func() { close(release) })
	s := spec(20*time.Second, 30*time.Second)
	s.Wait = 10 * time.Second
	start := time.Now()
	if err := b.Do(ctx, "contended", s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %v: the release notification did not arrive across the cluster", waited)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Renewal keeps several leases on different shards alive: four
	// renewals each at least. A TTL of 1.2s leaves its renewals (every
	// 400ms) room for the process stalls of -race on a loaded machine; at
	// 300ms one stall of ~200ms lost a lease.
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			errs <- a.Do(ctx, fmt.Sprint("renew-", i), spec(1200*time.Millisecond, 5*time.Second), func(ctx context.Context) error {
				select {
				case <-time.After(2 * time.Second):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatalf("renewal on the cluster: %v", err)
		}
	}
	if recA.Count(lease.EventRenewed) < 12 {
		t.Fatalf("%d renewals, want at least 12", recA.Count(lease.EventRenewed))
	}
}
