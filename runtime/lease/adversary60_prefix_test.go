package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Two services on one Redis whose prefixes are globs of each other's
// keys ("s*" and "sx:"), each under the README's recipe rewritten for its
// prefix: neither sees the other's leases, channels or queues.
func TestAdversary60_PrefixIsolationGlobPrefixes(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	mk := func(user, prefix string) (*lease.Client, *leasetest.Recorder) {
		var rules []string
		for _, r := range leastPrivilege {
			switch r {
			case "~lease:*":
				r = "~" + strings.ReplaceAll(prefix, "*", `\*`) + "*"
			case "&lease:*":
				r = "&" + strings.ReplaceAll(prefix, "*", `\*`) + "*"
			}
			rules = append(rules, r)
		}
		return newClient(t, srv.ACLUser(t, user, "pw", rules...), lease.WithPrefix(prefix), lease.WithRecheck(10*time.Second))
	}
	a, arec := mk("pa60", "s*")
	b, brec := mk("pb60", "sx:")
	admin, _ := newClient(t, srv.Client(t), lease.WithPrefix("s*"))
	adminB, _ := newClient(t, srv.Client(t), lease.WithPrefix("sx:"))

	// B holds k; A gets k at once (different namespace).
	rel := make(chan struct{})
	heldB := hold(t, b, "k", lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}, rel)
	if err := a.Do(ctx, "k", lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("A blocked by B's lease: %v", err)
	}
	// A's List/Inspect/Watch see nothing of B.
	page, _, err := admin.List(ctx, "*", "")
	if err != nil || len(page) != 0 {
		t.Errorf("List under s* while only sx: holds: %v %v", page, err)
	}
	info, err := admin.Inspect(ctx, "k")
	if err != nil || info.Holder != "" {
		t.Errorf("Inspect under s*: %+v %v", info, err)
	}
	var mu sync.Mutex
	var changes []lease.Change
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wdone <- admin.Watch(wctx, "*", 100*time.Millisecond, func(c lease.Change) {
			mu.Lock()
			changes = append(changes, c)
			mu.Unlock()
		})
	}()
	time.Sleep(300 * time.Millisecond)
	// A waiter in B; B releases (handover publishes on B's channels).
	wait := make(chan error, 1)
	go func() {
		wait <- b.Do(ctx, "k", lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}, func(context.Context) error { return nil })
	}()
	time.Sleep(200 * time.Millisecond)
	close(rel)
	if err := <-heldB; err != nil {
		t.Fatal(err)
	}
	if err := <-wait; err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	wcancel()
	<-wdone
	mu.Lock()
	if len(changes) != 0 {
		t.Errorf("Watch under s* saw %d changes of sx: leases: %+v", len(changes), changes)
	}
	mu.Unlock()
	pb, _, _ := adminB.List(ctx, "*", "")
	t.Logf("B's own list after: %d", len(pb))
	for _, rec := range []*leasetest.Recorder{arec, brec} {
		if n := rec.Count(lease.EventSubscriptionFailed) + rec.Count(lease.EventRefused) + rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
			t.Errorf("failure events %d: %v", n, adv60Events(rec, 0))
		}
	}
	if err := lease.WithPrefix("a{b")(nil); err == nil {
		t.Error("prefix with { accepted")
	}
}
