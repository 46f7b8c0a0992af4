package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Design section 4: an acquire answered OOM (not executed) is ErrRefused,
// with no release sent. On a Cluster whose slot has moved since go-redis
// loaded its slot map, the acquire is first sent to the old master, which
// answers MOVED (not executed), and go-redis follows the redirect to the
// new master, which answers OOM (it is at maxmemory): the request was
// written twice, and nothing ran. aec3f0b's afterWrite classed "written
// more than once, then a final error answer go-redis does not retry
// after" as unknown, so round 69c saw this never-executed acquire
// reported ErrUnknown with a release sent; since 1a099e0 that rule holds
// off Cluster only, and it is ErrRefused again.
func TestAdversary69c_ClusterMovedThenOOMAcquire(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	for _, fence := range []bool{false, true} {
		name := "setnx"
		if fence {
			name = "script"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := uniqueKey(t)
			slot := leasetest.Slot(lockKey(key))
			src, err := cl.MasterForSlot(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			dst := adv69cOtherMaster(cl, src)
			dstAdmin := dst.Client(t)
			c, rec := newClient(t, cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRetries = 3 }))
			s := lease.Spec{TTL: 5 * time.Second, Deadline: 2 * time.Second, Fence: fence}
			// Warm-up on the key: the slot map (key on src) and the scripts
			// loaded on src and dst.
			for _, k := range []string{key, key + "-warm"} {
				if err := c.Do(ctx, k, s, func(context.Context) error { return nil }); err != nil {
					t.Fatalf("warm-up: %v", err)
				}
			}
			if err := dstAdmin.ScriptLoad(ctx, "return 1").Err(); err != nil {
				t.Fatal(err)
			}
			// The slot moves to dst, which is full: go-redis's map is stale.
			m, err := cl.BeginMigration(ctx, slot, dst)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Finish(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = dstAdmin.ConfigSet(context.Background(), "maxmemory", "0").Err() })
			if err := dstAdmin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := dstAdmin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
			n0 := len(rec.Events())
			ran := false
			err = c.Do(ctx, key, s, func(context.Context) error { ran = true; return nil })
			_ = dstAdmin.ConfigSet(ctx, "maxmemory", "0").Err()
			exists := dstAdmin.Exists(ctx, lockKey(key)).Val()
			var evs []string
			for _, e := range rec.Events()[n0:] {
				evs = append(evs, e.Kind.String()+": "+errString(e.Err))
			}
			t.Logf("Do: %v (ran %v, lock on dst %d); events: %q", err, ran, exists, evs)
			if ran || exists != 0 {
				t.Fatalf("the acquire ran: the test did not play its scenario")
			}
			if !errors.Is(err, lease.ErrRefused) || errors.Is(err, lease.ErrUnknown) {
				t.Errorf("an acquire answered MOVED by the old master and OOM by the new one never ran, but Do says %v: want ErrRefused (design section 4), no release", err)
			}
			for _, e := range rec.Events()[n0:] {
				if e.Kind == lease.EventReleaseUnconfirmed || e.Kind == lease.EventReleased || e.Kind == lease.EventAcquireUnknown {
					t.Errorf("event %v (%v) for an acquire that never ran", e.Kind, e.Err)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// adv69cOtherMaster is a master of cl other than m.
func adv69cOtherMaster(cl *leasetest.Cluster, m *leasetest.Server) *leasetest.Server {
	for _, n := range cl.Nodes {
		if n != m {
			return n
		}
	}
	return nil
}
