package leasetest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A cluster with a replica per master: killing the master of a key hands
// its slots to that master's replica, a cluster client writes the key
// again, and the restarted old master rejoins as a replica.
func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := leasetest.StartClusterReplicas(t, 3, 1)
	t.Logf("StartClusterReplicas(3 masters, 1 replica each): %v", time.Since(began).Round(time.Millisecond))
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, m := range c.Nodes[:3] {
		rs, err := c.ReplicasOf(ctx, m)
		if err != nil || len(rs) != 1 || rs[0] != c.Nodes[3+i] {
			t.Fatalf("replicas of master %d: %v, %v; want node %d", i, rs, err, 3+i)
		}
	}

	const key = "order-1"
	m, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := c.ReplicasOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client(t).Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m.WaitReplicas(t, replicas...)

	tk, err := c.KillMaster(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KillMaster: cluster ok again after %v (cluster-node-timeout 2s)", tk.Took.Round(time.Millisecond))
	if tk.Killed != m || tk.Promoted != replicas[0] {
		t.Fatalf("KillMaster killed %s and promoted %s; want %s and its replica %s", tk.Killed.Addr(), tk.Promoted.Addr(), m.Addr(), replicas[0].Addr())
	}
	if now, err := c.MasterForKey(ctx, key); err != nil || now != tk.Promoted {
		t.Fatalf("MasterForKey after KillMaster: %v, %v", now, err)
	}
	fresh := c.Client(t)
	if v, err := fresh.Get(ctx, key).Result(); err != nil || v != "1" {
		t.Fatalf("GET %s from the promoted replica: %q, %v", key, v, err)
	}
	if err := fresh.Set(ctx, key, "2", 0).Err(); err != nil {
		t.Fatalf("SET %s after the failover: %v", key, err)
	}
	began = time.Now()
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err := c.ReplicasOf(ctx, tk.Promoted)
	if err != nil || !slices.Contains(rs, m) {
		t.Fatalf("restarted old master is not a replica of %s: %v, %v", tk.Promoted.Addr(), rs, err)
	}
	t.Logf("restarted old master rejoined as a replica: %v", time.Since(began).Round(time.Millisecond))
}

// Slot agrees with the server's CLUSTER KEYSLOT, and an ACL user made on
// every node can use the cluster within its rules (go-redis's cluster
// client needs CLUSTER SLOTS to find the nodes).
func TestClusterSlotAndACL(t *testing.T) {
	t.Parallel()
	c := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	node := c.Nodes[0].Client(t)
	for _, k := range []string{"", "a", "order-1", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "{bar", "lease:{k}:ch", "日本"} {
		want, err := node.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := leasetest.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}

	app := c.ACLUser(t, "app", "secret", "~lease:*", "+get", "+set", "+cluster|slots")
	for i := range 20 { // keys on every master
		if err := app.Set(ctx, fmt.Sprint("lease:", i), "1", 0).Err(); err != nil {
			t.Fatalf("ACL user SET: %v", err)
		}
	}
	if err := app.Set(ctx, "other", "1", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("ACL user SET outside its keys: %v, want NOPERM", err)
	}
}
