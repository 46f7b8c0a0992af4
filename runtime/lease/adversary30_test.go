package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// With WithReplicas on a Cluster, renewals go to each master in a pipeline
// of its own followed by WAIT. A master that does not answer (paused, cut
// off, or one whose WAIT runs to its timeout) must not hold up the
// renewals of leases on the other masters: those are acknowledged by their
// replicas and must keep their leases. Here master A is paused for longer
// than the TTL (but shorter than the cluster's node timeout, so no
// failover): its lease is lost, as it must be, and the lease on master B,
// whose replica follows, must be kept.
func TestAdversary30_ClusterReplicatedRenewalsNotHeldUpByOtherMaster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1, func(o *leasetest.ClusterOptions) {
		o.NodeTimeout = 5 * time.Second
	})
	ctx := context.Background()
	var keyA, keyB string
	var masterA *leasetest.Server
	for i := 0; keyA == "" || keyB == ""; i++ {
		k := fmt.Sprint("adv30-hol-", i)
		m, err := cl.MasterForKey(ctx, lockKey(k))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case keyA == "":
			keyA, masterA = k, m
		case m != masterA:
			keyB = k
		}
	}
	c, rec := newClient(t, cl.Client(t), lease.WithReplicas(1, 100*time.Millisecond))
	const ttl = 900 * time.Millisecond
	s := lease.Spec{TTL: ttl, Deadline: 10 * time.Second}
	// Warm up: connections to both masters, scripts loaded, so that the
	// two calls below enter within the renewer's batch window and their
	// renewals go in one batch.
	for _, k := range []string{keyA, keyB} {
		if err := c.Do(ctx, k, s, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}

	enteredA, enteredB := make(chan struct{}), make(chan struct{})
	pausedFor := 1500 * time.Millisecond
	var errA, errB error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errA = c.Do(ctx, keyA, s, func(ctx context.Context) error {
			close(enteredA)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-enteredA
	go func() {
		defer wg.Done()
		errB = c.Do(ctx, keyB, s, func(ctx context.Context) error {
			close(enteredB)
			<-time.After(pausedFor + 2*ttl) // through the pause and beyond
			return nil
		})
	}()
	<-enteredB
	// Both leases renewed at least once together before the pause.
	for rec.Count(lease.EventRenewed) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	masterA.Pause()
	time.Sleep(pausedFor)
	masterA.Resume()
	wg.Wait()
	mustIs(t, errA, lease.ErrLost)
	if errB != nil {
		t.Errorf("lease on master B (its replica following) lost while master A was paused: %v", errB)
		for _, e := range rec.Events() {
			t.Logf("%v %v %v %v", e.At.Sub(start).Round(time.Millisecond), e.Key, e.Kind, e.Err)
		}
	}
}

// A grant that WAIT then cannot confirm because an ACL refuses WAIT
// (NOPERM: the README's WithReplicas recipe without +wait) was carried
// out: the key is held. It must not be reported ErrRefused ("not carried
// out, no release sent") with the grant left behind for the TTL.
func TestAdversary30_GrantWithWaitRefusedIsNotRefused(t *testing.T) {
	srv := leasetest.StartRedis(t)
	replica := srv.StartReplica(t)
	srv.WaitReplicas(t, replica)
	rules := readmeACL(t, false) // no +wait
	c, _ := newClient(t, srv.ACLUser(t, "nowait", "secret", rules...), lease.WithReplicas(1, 100*time.Millisecond))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 20 * time.Second, Deadline: 2 * time.Second}
	entered := false
	err := c.Do(context.Background(), key, s, func(context.Context) error { entered = true; return nil })
	if entered {
		t.Fatal("entered without a WAIT")
	}
	if err == nil {
		t.Fatal("Do returned nil")
	}
	held, xerr := srv.Client(t).Exists(context.Background(), lockKey(key)).Result()
	if xerr != nil {
		t.Fatal(xerr)
	}
	if !errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrRefused) {
		t.Errorf("a grant carried out, its WAIT refused: %v, want ErrUnknown", err)
	}
	if errors.Is(err, lease.ErrRefused) && held == 1 {
		t.Errorf("Do returned ErrRefused (%v), yet its grant holds the key (left for the TTL)", err)
	}
	if held == 1 {
		t.Errorf("grant left behind after %v", err)
	}
}

// A renewal whose WAIT an ACL refuses (NOPERM: +wait taken from the user
// while it holds a lease) was carried out on the primary: it must not
// extend the validity (the lease is lost within the TTL), and its failure
// is unknown, not ErrRefused ("not carried out").
func TestAdversary30_RenewalWithWaitRefused(t *testing.T) {
	srv := leasetest.StartRedis(t)
	replica := srv.StartReplica(t)
	srv.WaitReplicas(t, replica)
	rules := append(readmeACL(t, false), "+wait")
	c, rec := newClient(t, srv.ACLUser(t, "waitgone", "secret", rules...), lease.WithReplicas(1, 100*time.Millisecond))
	admin := srv.Client(t)
	const ttl = 600 * time.Millisecond
	s := lease.Spec{TTL: ttl, Deadline: 5 * time.Second}
	var revoked time.Time
	err := c.Do(context.Background(), uniqueKey(t), s, func(ctx context.Context) error {
		if err := admin.Do(ctx, "ACL", "SETUSER", "waitgone", "-wait").Err(); err != nil {
			t.Fatal(err)
		}
		revoked = time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
			t.Error("renewals whose WAIT was refused kept the call going 3s")
		}
		return nil
	})
	mustIs(t, err, lease.ErrLost)
	if took := time.Since(revoked); took > ttl+200*time.Millisecond {
		t.Errorf("loss reported %v after WAIT was revoked, TTL %v", took, ttl)
	}
	failed := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventRenewFailed {
			failed++
			if !errors.Is(e.Err, lease.ErrUnknown) || errors.Is(e.Err, lease.ErrRefused) {
				t.Errorf("renewal carried out, its WAIT refused, classed: %v", e.Err)
			}
		}
	}
	if failed == 0 {
		t.Error("no failed renewal reported")
	}
}

// WithReplicas asking for more replicas than exist: no grant is entered,
// each is released (ErrUnknown, EventUnreplicated), no key is left.
func TestAdversary30_MoreReplicasThanExist(t *testing.T) {
	srv := leasetest.StartRedis(t)
	replica := srv.StartReplica(t)
	srv.WaitReplicas(t, replica)
	c, rec := newClient(t, srv.Client(t), lease.WithReplicas(2, 50*time.Millisecond))
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, lease.Spec{TTL: 10 * time.Second, Deadline: 2 * time.Second},
		func(context.Context) error { t.Error("entered with 1 of 2 replicas"); return nil })
	mustIs(t, err, lease.ErrUnknown)
	if rec.Count(lease.EventUnreplicated) != 1 {
		t.Errorf("%d unreplicated events", rec.Count(lease.EventUnreplicated))
	}
	if n := srv.Client(t).Exists(context.Background(), lockKey(key)).Val(); n != 0 {
		t.Error("the unacknowledged grant was left behind")
	}
}

// Renewals with replicas through faults: SCRIPT FLUSH before each renewal
// (NOSCRIPT, then EVAL, then WAIT), replies cut (go-redis replays the
// renew+WAIT pipeline) — the lease is kept and renewed. Then the replica
// is paused: renewals are no longer acknowledged, the loss comes within
// the TTL, every failure unknown, and none confirmed after the pause.
func TestAdversary30_ReplicatedRenewalsUnderFaults(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	replica := srv.StartReplica(t)
	srv.WaitReplicas(t, replica)
	p := leasetest.StartProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { prdb.Close() })
	admin := srv.Client(t)
	c, rec := newClient(t, prdb, lease.WithReplicas(1, 100*time.Millisecond))
	const ttl = 900 * time.Millisecond
	s := lease.Spec{TTL: ttl, Deadline: 10 * time.Second, Fence: true}
	var paused time.Time
	defer replica.Resume()
	err := c.Do(context.Background(), uniqueKey(t), s, func(ctx context.Context) error {
		start := time.Now()
		before := rec.Count(lease.EventRenewed)
		// Faults go on for at least 800ms and until two renewals have
		// been confirmed through them: a renewal whose reply was cut
		// is confirmed only by its replay, which under load can take
		// a renewal interval (300ms) of its own. The bound that
		// matters is the one in the loop: the lease is never lost.
		const most = 3 * time.Second
		for i := 0; time.Since(start) < 800*time.Millisecond ||
			(rec.Count(lease.EventRenewed)-before < 2 && time.Since(start) < most); i++ {
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if i%8 == 0 {
				p.Set(leasetest.CutNextReply)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("lost under SCRIPT FLUSH and cut replies (replica following): %v", context.Cause(ctx))
			case <-time.After(30 * time.Millisecond):
			}
		}
		p.Set(leasetest.Pass)
		if n := rec.Count(lease.EventRenewed) - before; n < 2 {
			t.Errorf("%d renewals confirmed in %v of faults", n, time.Since(start).Round(time.Millisecond))
		}
		if p.Cut() == 0 {
			t.Error("no reply cut")
		}
		replica.Pause()
		paused = time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
			t.Error("renewals went on 3s with the replica paused")
		}
		return nil
	})
	replica.Resume()
	mustIs(t, err, lease.ErrLost)
	if took := time.Since(paused); took > ttl+200*time.Millisecond {
		t.Errorf("loss reported %v after the replica was paused, TTL %v", took, ttl)
	}
	for _, e := range rec.Events() {
		switch {
		case e.Kind == lease.EventRenewFailed && e.At.After(paused):
			if !errors.Is(e.Err, lease.ErrUnknown) {
				t.Errorf("renewal failure not unknown: %v", e.Err)
			}
		case e.Kind == lease.EventRenewed && e.At.Add(-e.Took).After(paused):
			t.Errorf("a renewal sent %v after the pause was confirmed", e.At.Add(-e.Took).Sub(paused))
		}
	}
}

// A slot migration that lasts longer than the TTL, the lease's keys
// already moved to the importing master (the source answers ASK): without
// WithReplicas go-redis follows ASK and the lease is kept; with it the
// renewals must be kept too.
func TestAdversary30_ClusterReplicatedRenewalsDuringLongMigration(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	for _, replicas := range []int{0, 1} {
		t.Run(fmt.Sprint("replicas=", replicas), func(t *testing.T) {
			var opts []lease.Option
			if replicas > 0 {
				opts = append(opts, lease.WithReplicas(1, 100*time.Millisecond))
			}
			c, rec := newClient(t, cl.Client(t), opts...)
			key := fmt.Sprint("adv30-mig-", replicas)
			slot := leasetest.Slot(lockKey(key))
			from, err := cl.MasterForSlot(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			var to *leasetest.Server
			for _, n := range cl.Nodes[:3] {
				if n != from {
					to = n
					break
				}
			}
			const ttl = 600 * time.Millisecond
			s := lease.Spec{TTL: ttl, Deadline: 10 * time.Second}
			err = c.Do(ctx, key, s, migrateWhileHeld(t, cl, slot, to, 3*ttl))
			if err != nil {
				t.Errorf("the held lease across a migration of 3 TTLs: %v", err)
				for _, e := range rec.Events() {
					if e.Kind != lease.EventRenewed {
						t.Logf("%v %v", e.Kind, e.Err)
					}
				}
			}
		})
	}
}

// The README's Cluster ACL recipe during a slot migration that lasts longer
// than the TTL, the lease's keys already moved: following ASK takes ASKING
// (go-redis's for a plain client, the runtime's with WithReplicas), which
// the recipe (-@all, no +asking) refuses; the renewal then goes to the
// importing master without it, is redirected back (MOVED), and the lease is
// lost, with or without WithReplicas.
func TestAdversary30_ClusterACLRecipeMigration(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	for _, replicas := range []int{0, 1} {
		t.Run(fmt.Sprint("replicas=", replicas), func(t *testing.T) {
			rules := readmeACL(t, true)
			var opts []lease.Option
			if replicas > 0 {
				rules = append(rules, "+wait")
				opts = append(opts, lease.WithReplicas(1, 100*time.Millisecond))
			}
			c, rec := newClient(t, cl.ACLUser(t, fmt.Sprint("u", replicas), "secret", rules...), opts...)
			key := fmt.Sprint("adv30-aclmig-", replicas)
			slot := leasetest.Slot(lockKey(key))
			from, _ := cl.MasterForSlot(ctx, slot)
			var to *leasetest.Server
			for _, n := range cl.Nodes[:3] {
				if n != from {
					to = n
					break
				}
			}
			const ttl = 600 * time.Millisecond
			err := c.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: 10 * time.Second}, migrateWhileHeld(t, cl, slot, to, 3*ttl))
			if err != nil {
				t.Errorf("README cluster ACL, migration of 3 TTLs: %v", err)
				logFirstRenewFailure(t, rec)
			}
		})
	}
}

// A kept lease (Spec.Keep) whose replica is promoted: its renewals are no
// longer acknowledged, it is lost within the TTL, and the next call does
// not enter on it (nor on a fresh grant, which no replica acknowledges).
func TestAdversary30_KeptLeaseReplicaPromoted(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	srv.WaitReplicas(t, rep)
	c, rec := newClient(t, srv.Client(t), lease.WithReplicas(1, 50*time.Millisecond))
	key := uniqueKey(t)
	const ttl = 600 * time.Millisecond
	s := lease.Spec{TTL: ttl, Deadline: 2 * time.Second, Keep: 10 * time.Second}
	ctx := context.Background()
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl / 2) // a renewal of the kept lease acknowledged
	if err := rep.Client(t).SlaveOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	defer func() {
		_ = rep.Client(t).SlaveOf(ctx, "127.0.0.1", fmt.Sprint(srv.Port())).Err()
	}()
	time.Sleep(ttl + 100*time.Millisecond)
	err := c.Do(ctx, key, s, func(context.Context) error {
		t.Errorf("entered %v after the promotion: the kept lease's unacknowledged renewals were counted", time.Since(promoted))
		return nil
	})
	mustIs(t, err, lease.ErrUnknown)
	for _, e := range rec.Events() {
		if e.Kind == lease.EventRenewed && e.At.Add(-e.Took).After(promoted) {
			t.Errorf("a renewal sent %v after the promotion was confirmed", e.At.Add(-e.Took).Sub(promoted))
		}
	}
}

// migrateWhileHeld is a protected function that migrates slot to the
// master to while it holds the lease: the keys move at once (then moved
// runs, if given), and the slot is assigned to it after hold (or when the
// lease's context ends). It returns the context's cause (nil when the
// lease held throughout).
func migrateWhileHeld(t *testing.T, cl *leasetest.Cluster, slot int, to *leasetest.Server, hold time.Duration, moved ...func()) func(context.Context) error {
	return func(ctx context.Context) error {
		m, err := cl.BeginMigration(ctx, slot, to)
		if err != nil {
			return err
		}
		if _, err := m.MoveKeys(ctx, 0); err != nil {
			return err
		}
		for _, f := range moved {
			f()
		}
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		if err := m.Finish(context.Background()); err != nil {
			t.Error(err)
		}
		return context.Cause(ctx)
	}
}
