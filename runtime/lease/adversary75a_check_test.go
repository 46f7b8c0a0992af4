package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Client.Check "leaves nothing behind but the fencing counter of its keys,
// which it deletes" (its doc comment; README: "it takes about 2.5 s and
// leaves no key behind"). Looked at the moment it returns: every key left
// has an expiry and is a release's tombstone (the one thing a release must
// leave for a while), and those go within their life: max(1s, 4 × the
// release timeout), 2s here (WithReleaseTimeout(500ms), which Check's own
// Clients take over).
func TestAdversary75a_CheckLeavesOnlyTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, _ := newClient(t, srv.Client(t), lease.WithReleaseTimeout(500*time.Millisecond))
	steps, err := c.Check(ctx)
	if err != nil {
		t.Fatalf("Check: %v (%d steps)", err, len(steps))
	}
	ks, err := a75Scan(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("right after Check: %d keys:%v", len(ks), ks)
	a75NoPersistent(t, "right after Check", ks)
	for k, p := range ks {
		if kind := a75Kind(k); kind != "tomb" {
			t.Errorf("right after Check: %s key %q left (PTTL %v)", kind, k, p)
		}
	}
	a75Bounds(t, "right after Check", ks, map[string]time.Duration{"tomb": 2 * time.Second})
	a75Drain(t, "after Check", 2200*time.Millisecond, admin)
}
