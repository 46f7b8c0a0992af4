package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A function that ignores its context and runs long past its deadline:
// "No renewal past the deadline: a function that goes on past it loses
// the lease when the last renewal's validity runs out" (README). The lock
// must therefore be gone from Redis by start + Deadline + TTL, while fn
// still runs; and a kept lease (Spec.Keep) on a Client nobody closes must
// be gone by fn's return + Keep + TTL ("keeps it, renewed, for up to
// Keep").
func TestAdversary75a_StuckAndKeptLocksEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, _ := newClient(t, srv.Client(t), lease.WithCounterTTL(time.Second))

	const ttl, deadline = 300 * time.Millisecond, 600 * time.Millisecond
	start := time.Now()
	var goneAfter time.Duration
	err := c.Do(ctx, "a75-stuck", lease.Spec{TTL: ttl, Deadline: deadline, Fence: true}, func(context.Context) error {
		for time.Since(start) < 2*time.Second {
			if goneAfter == 0 && admin.Exists(ctx, "lease:{a75-stuck}:l").Val() == 0 {
				goneAfter = time.Since(start)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	t.Logf("stuck fn: Do %v; lock gone %v after the start", err, goneAfter)
	if !errors.Is(err, lease.ErrDeadline) {
		t.Errorf("Do: %v, want ErrDeadline", err)
	}
	if goneAfter == 0 || goneAfter > deadline+ttl+150*time.Millisecond {
		t.Errorf("the stuck call's lock lived until %v after its start (0: never gone in 2s), past deadline+ttl = %v", goneAfter, deadline+ttl)
	}

	const keep = 500 * time.Millisecond
	if err := c.Do(ctx, "a75-kept", lease.Spec{TTL: ttl, Deadline: time.Second, Keep: keep, Fence: true}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	for admin.Exists(ctx, "lease:{a75-kept}:l").Val() != 0 {
		if time.Since(returned) > keep+ttl+200*time.Millisecond {
			t.Fatalf("kept lease's lock still there %v after its call returned (keep %v, ttl %v)", time.Since(returned), keep, ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("kept lock gone %v after the call returned", time.Since(returned).Round(time.Millisecond))
	a75Drain(t, "after the stuck and the kept call", 1200*time.Millisecond, admin)
}
