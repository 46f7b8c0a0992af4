package leasetest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// replicaOf returns the role s reports and, for a replica, its primary's
// port.
func replicaOf(t *testing.T, s *leasetest.Server) (role string, port int) {
	t.Helper()
	info, err := s.Client(t).Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(info) {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "role:"); ok {
			role = v
			if role == "slave" { // Redis's word; newer servers may say replica
				role = "replica"
			}
		}
		if v, ok := strings.CutPrefix(l, "master_port:"); ok {
			port, _ = strconv.Atoi(v)
		}
	}
	return role, port
}

// retry calls f until it succeeds or 5s pass, and returns how long that took.
func retry(t *testing.T, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: still failing after 5s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A manual failover with the old primary alive: the sentinels agree on a
// replica, it takes writes, a failover client follows it; the old primary
// refuses writes under min-replicas-to-write and ends up a replica.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	sn := leasetest.StartSentinel(t)
	t.Logf("StartSentinel (1 primary, 2 replicas, 3 sentinels): %v", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := sn.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old != sn.Data[0] {
		t.Fatalf("Primary = %s, want the first data node %s", old.Addr(), sn.Data[0].Addr())
	}
	sn.MinReplicas(t, 1, time.Second)
	rdb := sn.FailoverClient(t)
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}

	began = time.Now()
	p, err := sn.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Failover: %v (%s -> %s)", time.Since(began).Round(time.Millisecond), old.Addr(), p.Addr())
	if p == old {
		t.Fatalf("Failover returned the old primary %s", old.Addr())
	}
	if role, _ := replicaOf(t, p); role != "master" {
		t.Fatalf("new primary %s reports role %s", p.Addr(), role)
	}
	pc := p.Client(t)
	if err := pc.Set(ctx, "after", "1", 0).Err(); err != nil {
		t.Fatalf("write to the new primary: %v", err)
	}
	if v, err := pc.Get(ctx, "before").Result(); err != nil || v != "1" {
		t.Fatalf("new primary lost a write made before the failover: %q, %v", v, err)
	}
	took := retry(t, "failover client write", func() error { return rdb.Set(ctx, "client", "1", 0).Err() })
	if v, err := pc.Get(ctx, "client").Result(); err != nil || v != "1" {
		t.Fatalf("the failover client's write did not reach the new primary: %q, %v", v, err)
	}
	t.Logf("failover client wrote to the new primary %v after Failover returned", took.Round(time.Millisecond))

	// The old primary is still a primary, but without replicas it refuses
	// writes (min-replicas-to-write 1).
	role, _ := replicaOf(t, old)
	err = old.Client(t).Set(ctx, "stale", "1", 0).Err()
	if err == nil {
		t.Fatalf("old primary (role %s) accepted a write after the failover despite min-replicas-to-write", role)
	}
	t.Logf("old primary right after Failover: role %s, write: %v", role, err)

	began = time.Now()
	if err := sn.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("WaitSettled (old primary demoted and in sync): %v after Failover", time.Since(began).Round(time.Millisecond))
	if role, port := replicaOf(t, old); role != "replica" || port != p.Port() {
		t.Fatalf("old primary after WaitSettled: role %s of port %d, want a replica of %d", role, port, p.Port())
	}
}

// A killed primary: the sentinels fail over on their own, an ACL user's
// failover client writes to the new primary, and the restarted old
// primary rejoins as a replica.
func TestSentinelKill(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app := sn.ACLUser(t, "app", "secret", "~lease:*", "+get", "+set")
	if err := app.Set(ctx, "lease:a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := app.Set(ctx, "other", "1", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("ACL user wrote outside its keys: %v", err)
	}

	old := sn.Data[0]
	old.Kill()
	began := time.Now()
	p, err := sn.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("primary killed: WaitFailover %v (DownAfter 1s)", time.Since(began).Round(time.Millisecond))
	took := retry(t, "ACL user's failover client write", func() error { return app.Set(ctx, "lease:b", "1", 0).Err() })
	t.Logf("ACL user's failover client wrote %v after WaitFailover", took.Round(time.Millisecond))
	if v, err := p.Client(t).Get(ctx, "lease:b").Result(); err != nil || v != "1" {
		t.Fatalf("write did not reach the new primary %s: %q, %v", p.Addr(), v, err)
	}

	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := sn.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted old primary a replica again: %v", time.Since(began).Round(time.Millisecond))
	if role, port := replicaOf(t, old); role != "replica" || port != p.Port() {
		t.Fatalf("restarted old primary: role %s of port %d, want a replica of %d", role, port, p.Port())
	}
}
