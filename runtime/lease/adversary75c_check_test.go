package lease_test

// Adversary round 75c: Client.Check on a Sentinel deployment whose nodes
// differ (ACLs are not replicated; configuration is per node), across a
// failover.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The service's ACL user is the README's least-privilege recipe on the
// primary, but the replicas' copy lacks +pubsub|numsub (users are set up
// node by node). Check on the service's failover client passes before the
// failover (it tries the primary); after SENTINEL FAILOVER the same
// Client's Check must try the new primary and fail naming PUBSUB NUMSUB
// (README: Check "names the command Redis refused in each step that
// failed"). Then the new primary is given min-replicas-to-write 3 (it has
// fewer): every write is refused NOREPLICAS, and Check must fail saying
// so.
func TestAdversary75c_CheckSentinelNodesDiffer(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	rdb := sn.ACLUser(t, "svc75c", "pw", leastPrivilege...)
	for _, r := range sn.Data[1:] {
		if err := r.Client(t).Do(ctx, "ACL", "SETUSER", "svc75c", "-pubsub|numsub").Err(); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := newClient(t, rdb)
	steps, err := c.Check(ctx)
	if err != nil {
		adv70Log(t, steps)
		t.Fatalf("Check on the primary, whose user is the recipe's: %v", err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 12*time.Second)
	np, err := sn.Failover(fctx)
	fcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failed over to %s", np.Addr())
	steps, err = c.Check(ctx)
	adv70Log(t, steps)
	if err == nil {
		t.Errorf("Check after the failover to a node whose user lacks +pubsub|numsub passed")
	} else if !namesCommand(err, "pubsub|numsub") {
		t.Errorf("Check after the failover: %v; want PUBSUB NUMSUB named", err)
	}
	if err := np.SetConfig(ctx, "min-replicas-to-write", "3"); err != nil {
		t.Fatal(err)
	}
	steps, err = c.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
		adv70Log(t, steps)
		t.Errorf("Check on a primary that refuses writes (min-replicas-to-write 3): %v; want NOREPLICAS named", err)
	}
	failed := 0
	for _, s := range steps {
		if s.Err != nil {
			failed++
		}
	}
	t.Logf("NOREPLICAS: %d of %d steps failed", failed, len(steps))
	if failed == 0 {
		t.Errorf("NOREPLICAS: no step failed")
	}
}
