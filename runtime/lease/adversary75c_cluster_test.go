package lease_test

// Adversary round 75c: the operator paths on a Redis Cluster across a
// slot migration and a failover.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A Watch and a loop of Lists run while two held leases' slots migrate to
// other masters (MIGRATING/IMPORTING, every key moved, the slot assigned
// 400ms later), one unfenced without waiters, one fenced with a waiter
// queued; a third lease's slot stays. README: during a migration "Inspect
// ... and ForceRelease wait for the migration to end (each retried within
// its own budget ...)"; List: "a slot migration can repeat or miss keys.
// (Watch reports each key once.)"; Watch: each read bounded by its
// interval (here 1s, longer than the migration's split), a failed read
// ends it with its error. So the Watch reports no ending and no new grant
// of a lease held throughout (or ends with an error), each List answers
// within its 3s context, and afterwards an operator's ForceRelease of the
// moved lease reaches its holder (ErrLost, released from outside) and the
// Watch names it.
func TestAdversary75c_ClusterWatchAcrossSlotMigration(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	a, _ := newClient(t, cl.Client(t), lease.WithRecheck(200*time.Millisecond))
	b, _ := newClient(t, cl.Client(t), lease.WithRecheck(200*time.Millisecond))
	op, _ := newClient(t, cl.Client(t))
	k1, k2, k3 := "adv75c:m:plain", "adv75c:m:fenced", "adv75c:m:still"
	if leasetest.Slot(lockKey(k1)) == leasetest.Slot(lockKey(k2)) || leasetest.Slot(lockKey(k3)) == leasetest.Slot(lockKey(k1)) || leasetest.Slot(lockKey(k3)) == leasetest.Slot(lockKey(k2)) {
		t.Fatal("keys share a slot")
	}
	h1 := holdUntil(t, a, k1, lease.Spec{TTL: ttl, Deadline: time.Minute})
	h2 := holdUntil(t, a, k2, lease.Spec{TTL: ttl, Deadline: time.Minute, Fence: true})
	// The waiter's Do returns once A releases (before the cleanups, which
	// run the waiter's first).
	defer close(h2.release)
	holdUntil(t, a, k3, lease.Spec{TTL: ttl, Deadline: time.Minute})
	startHolding(t, b, k2, lease.Spec{TTL: ttl, Deadline: time.Minute, Wait: 30 * time.Second, Fence: true})
	if !waitFor(3*time.Second, func() bool { return len(inspect(t, op, k2).Waiters) == 1 }) {
		t.Fatalf("no waiter on %s: %+v", k2, inspect(t, op, k2))
	}
	id1 := inspect(t, op, k1).Holder

	var w adv75cChanges
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wdone := make(chan error, 1)
	go func() { wdone <- op.Watch(wctx, "adv75c:m:*", time.Second, w.add) }()
	if !waitFor(5*time.Second, func() bool { return len(w.all()) >= 3 }) {
		t.Fatalf("the watch's first listing: %v", w.all())
	}
	// Lists meanwhile.
	var lists, listErrs atomic.Int32
	var lastListErr atomic.Value
	lstop := make(chan struct{})
	ldone := make(chan struct{})
	go func() {
		defer close(ldone)
		for {
			select {
			case <-lstop:
				return
			default:
			}
			lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
			for cursor := ""; ; {
				_, next, err := op.List(lctx, "adv75c:m:*", cursor)
				if err != nil {
					listErrs.Add(1)
					lastListErr.Store(err.Error())
					break
				}
				if cursor = next; cursor == "" {
					break
				}
			}
			lcancel()
			lists.Add(1)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	for _, k := range []string{k1, k2} {
		m := adv33Migration(t, cl, k)
		time.Sleep(400 * time.Millisecond)
		if err := m.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("moved %s (slot %d) from %s to %s", k, m.Slot, m.From.Addr(), m.To.Addr())
	}
	time.Sleep(1500 * time.Millisecond) // a listing or two after the moves
	close(lstop)
	<-ldone
	t.Logf("%d listings, %d failed (last: %v)", lists.Load(), listErrs.Load(), lastListErr.Load())
	if listErrs.Load() > 0 {
		t.Errorf("List (3s contexts) failed %d of %d times during the migrations: %v", listErrs.Load(), lists.Load(), lastListErr.Load())
	}
	running := true
	select {
	case err := <-wdone:
		running = false
		t.Logf("the watch ended with its error (allowed): %v", err)
		if err == nil {
			t.Errorf("the watch returned nil while its ctx was live")
		}
	default:
	}
	for _, k := range []string{k1, k2, k3} {
		got := w.of(k)
		if len(got) != 1 || !strings.HasPrefix(got[0], "held@") {
			t.Errorf("watch across the migrations, %s (held throughout by one holder): %v, want one held", k, got)
		}
	}
	// The moved lease, force-released from its new master.
	var res lease.ForceResult
	err := adv75cRetry(3*time.Second, time.Second, func(ctx context.Context) (err error) {
		res, err = op.ForceRelease(ctx, k1, id1)
		return err
	})
	forced := time.Now()
	if err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease(%s) after its slot moved: %v %v", k1, res, err)
	}
	select {
	case c := <-h1.cause:
		if !errors.Is(c, lease.ErrLost) || !strings.Contains(c.Error(), "released from outside") {
			t.Errorf("holder of the moved lease: %v, want ErrLost, released from outside", c)
		}
		t.Logf("holder told %v after the forced release", time.Since(forced).Round(time.Millisecond))
	case <-time.After(ttl/3 + 1500*time.Millisecond):
		t.Errorf("holder of the moved lease not told within TTL/3 + 1.5s of its forced release")
	}
	if running {
		if !waitFor(3*time.Second, func() bool {
			got := w.of(k1)
			return len(got) >= 2 && strings.HasPrefix(got[1], "ended(force-released)")
		}) {
			t.Errorf("watch: the forced release of the moved lease %s: %v, want ended(force-released)", k1, w.of(k1))
		}
	}
}

// A Cluster master is killed (kill -9) under four leases of one holder on
// its slots: a running call, a kept lease, a leader's term and a
// hold-min; its replica takes over. An operator's Client made before the
// kill then inspects (the same holders: the replica had them) and
// force-releases each (retried while the slot map reloads). Each holder
// learns of it as ForceRelease's doc says (the next renewal, within a
// third of the TTL: ErrLost, released from outside; a kept lease: its
// calls get ErrLost or acquire afresh from then on; a hold: ended, the key
// free), and no answer says released while the new master's key still
// holds the identity.
func TestAdversary75c_ClusterForceReleaseAfterKill(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	victim, err := cl.MasterForKey(ctx, lockKey("adv75c:k:0"))
	if err != nil {
		t.Fatal(err)
	}
	ks := adv67KeysOn(t, cl, victim, "adv75c:k:", 4)
	f := &adv75cFour{ttl: 9 * time.Second}
	f.a, f.recA = newClient(t, cl.Client(t), lease.WithRecheck(200*time.Millisecond))
	f.op, _ = newClient(t, cl.Client(t))
	f.b, _ = newClient(t, cl.Client(t))
	adv75cHoldFour(t, f, [4]string{ks[0], ks[1], ks[2], ks[3]}, 20*time.Second)
	reps, err := cl.ReplicasOf(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	if err := victim.WaitSync(sctx, reps...); err != nil {
		t.Fatal(err)
	}
	scancel()
	kctx, kcancel := context.WithTimeout(ctx, 15*time.Second)
	to, err := cl.KillMaster(kctx, lockKey(f.plain))
	kcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; %s took over in %v", to.Killed.Addr(), to.Promoted.Addr(), to.Took)
	f.forceAfterFailover(t, to.Promoted.Client(t), 6*time.Second, time.Second)
}
