package leasetest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// A slot held mid-migration: a moved key answers ASK, a script over a
// moved and an unmoved key answers TRYAGAIN, a cluster client still reads
// both; Finish hands the slot to the target.
func TestClusterMigration(t *testing.T) {
	t.Parallel()
	c := leasetest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := c.Client(t)
	a, b := "{mig}a", "{mig}b"
	for _, k := range []string{a, b} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := leasetest.Slot(a)
	from, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := c.Nodes[0]
	if to == from {
		to = c.Nodes[1]
	}
	mg, err := c.BeginMigration(ctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	if mg.From != from || mg.To != to {
		t.Fatalf("migration %s -> %s, want %s -> %s", mg.From.Addr(), mg.To.Addr(), from.Addr(), to.Addr())
	}
	if n, err := mg.MoveKeys(ctx, 1); err != nil || n != 1 {
		t.Fatalf("MoveKeys(1) = %d, %v", n, err)
	}
	src := from.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	var moved, kept string
	if err := src.Get(ctx, a).Err(); err != nil {
		moved, kept = a, b
	} else {
		moved, kept = b, a
	}
	if err := src.Get(ctx, moved).Err(); err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("ASK %d %s", slot, to.Addr())) {
		t.Fatalf("GET of the moved key on the source: %v, want ASK %d %s", err, slot, to.Addr())
	}
	err = src.Eval(ctx, "return redis.call('MGET', KEYS[1], KEYS[2])", []string{a, b}).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("script over a moved and an unmoved key: %v, want TRYAGAIN", err)
	}
	for _, k := range []string{moved, kept} {
		if v, err := cc.Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("cluster client GET %s mid-migration: %q, %v", k, v, err)
		}
	}

	if err := mg.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if owner, err := c.MasterForSlot(ctx, slot); err != nil || owner != to {
		t.Fatalf("owner after Finish: %v, %v; want %s", owner, err, to.Addr())
	}
	if err := src.Get(ctx, kept).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("GET on the old owner after Finish: %v, want MOVED", err)
	}
	if vs, err := cc.MGet(ctx, a, b).Result(); err != nil || vs[0] != a || vs[1] != b {
		t.Fatalf("cluster client MGET after Finish: %v, %v", vs, err)
	}
	if err := c.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
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
