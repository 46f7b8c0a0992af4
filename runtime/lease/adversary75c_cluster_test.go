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
	const ttl = 9 * time.Second
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	victim, err := cl.MasterForKey(ctx, lockKey("adv75c:k:0"))
	if err != nil {
		t.Fatal(err)
	}
	ks := adv67KeysOn(t, cl, victim, "adv75c:k:", 4)
	plain, kept, lead, hold := ks[0], ks[1], ks[2], ks[3]
	a, recA := newClient(t, cl.Client(t), lease.WithRecheck(200*time.Millisecond))
	op, _ := newClient(t, cl.Client(t))
	b, _ := newClient(t, cl.Client(t))

	hp := holdUntil(t, a, plain, lease.Spec{TTL: ttl, Deadline: time.Minute, Fence: true})
	keepSpec := lease.Spec{TTL: ttl, Deadline: 20 * time.Second, Keep: time.Minute, Fence: true}
	var keptTok lease.Token
	if err := a.Do(ctx, kept, keepSpec, func(ctx context.Context) error { keptTok, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	ld := adv75cLead(t, a, lead, lease.LeadSpec{TTL: ttl, Owner: "adv75c-a", Backoff: 100 * time.Millisecond})
	var termTok lease.Token
	select {
	case termTok = <-ld.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no term")
	}
	if err := a.Do(ctx, hold, lease.Spec{TTL: ttl, Deadline: time.Minute, HoldMin: time.Minute}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	before := map[string]lease.Info{}
	for _, k := range ks {
		before[k] = inspect(t, op, k)
	}
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
	to, err := cl.KillMaster(kctx, lockKey(plain))
	kcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; %s took over in %v", to.Killed.Addr(), to.Promoted.Addr(), to.Took)
	for _, k := range ks {
		var info lease.Info
		err := adv75cRetry(6*time.Second, time.Second, func(ctx context.Context) (err error) {
			info, err = op.Inspect(ctx, k)
			return err
		})
		if err != nil {
			t.Fatalf("Inspect(%s) after the failover: %v", k, err)
		}
		if info.Holder != before[k].Holder || info.Token != before[k].Token || info.Hold != before[k].Hold {
			t.Errorf("Inspect(%s) after the failover: holder %q token %d hold %v; before: %q %d %v", k, info.Holder, info.Token, info.Hold, before[k].Holder, before[k].Token, before[k].Hold)
		}
	}
	want := map[string]lease.ForceResult{plain: lease.ForceReleased, kept: lease.ForceReleased, lead: lease.ForceReleased, hold: lease.ForceHoldEnded}
	forcedAt := map[string]time.Time{}
	pc := to.Promoted.Client(t)
	for _, k := range ks {
		var res lease.ForceResult
		err := adv75cRetry(6*time.Second, time.Second, func(ctx context.Context) (err error) {
			res, err = op.ForceRelease(ctx, k, before[k].Holder)
			return err
		})
		forcedAt[k] = time.Now()
		if err != nil {
			t.Errorf("ForceRelease(%s) after the failover: %v", k, err)
			continue
		}
		if res != want[k] {
			t.Errorf("ForceRelease(%s) after the failover: %v, want %v", k, res, want[k])
		}
		if v, _ := pc.Get(ctx, lockKey(k)).Result(); v != "" && strings.Contains(v, before[k].Holder) {
			t.Errorf("ForceRelease(%s) answered %v, but the promoted master still holds %q", k, res, v)
		}
	}
	bound := ttl/3 + 1500*time.Millisecond
	told := func(what string, err error, from time.Time) {
		t.Helper()
		t.Logf("%s told %v after the forced release: %v", what, time.Since(from).Round(time.Millisecond), err)
		if !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "released from outside") {
			t.Errorf("%s: %v, want ErrLost, released from outside", what, err)
		}
	}
	select {
	case c := <-hp.cause:
		told("plain holder", c, forcedAt[plain])
		if err := <-hp.done; !errors.Is(err, lease.ErrLost) {
			t.Errorf("plain holder's Do: %v, want ErrLost", err)
		}
	case <-time.After(time.Until(forcedAt[plain].Add(bound))):
		t.Errorf("plain holder not told within %v of the forced release", bound)
	}
	select {
	case c := <-ld.ended:
		told("leader term", c, forcedAt[lead])
	case <-time.After(time.Until(forcedAt[lead].Add(bound))):
		t.Errorf("leader not told within %v of the forced release", bound)
	}
	select {
	case tok := <-ld.entered:
		if tok <= termTok {
			t.Errorf("the next term's token %d, not above the forced-out term's %d", tok, termTok)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("no new term within 5s of the forced end")
	}
	if !waitFor(time.Until(forcedAt[kept].Add(bound)), func() bool {
		for _, e := range recA.Events() {
			if e.Kind == lease.EventLost && e.Key == kept && e.At.After(forcedAt[kept].Add(-time.Second)) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no EventLost for the kept lease within %v of its forced release", bound)
	}
	var nextTok lease.Token
	err = a.Do(ctx, kept, keepSpec, func(ctx context.Context) error { nextTok, _ = lease.TokenFrom(ctx); return nil })
	switch {
	case errors.Is(err, lease.ErrLost):
	case err != nil:
		t.Errorf("the kept key's next call: %v", err)
	case nextTok == keptTok:
		t.Errorf("the kept key's next call, after the forced release was reported, ran on the released grant (token %d)", keptTok)
	}
	if err := b.Do(ctx, hold, lease.Spec{TTL: time.Second, Deadline: 2 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("a call on the key whose hold was ended: %v", err)
	}
}
