package lease_test

// Adversary round 33: Redis Cluster slot migration and Sentinel edge
// cases, on real servers started by runtime/leasetest.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// adv33Migration starts moving the slot of key's lease to another master
// and moves all its keys there: every script over several of the lease's
// keys (the release's includes its channel and tombstone, which never
// exist) is answered TRYAGAIN until the migration is finished.
func adv33Migration(t *testing.T, cl *leasetest.Cluster, key string) *leasetest.Migration {
	t.Helper()
	ctx := context.Background()
	slot := leasetest.Slot(lockKey(key))
	from, err := cl.MasterForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	var to *leasetest.Server
	for _, n := range cl.Nodes {
		if n != from {
			to = n
			break
		}
	}
	m, err := cl.BeginMigration(ctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.MoveKeys(ctx, 0); err != nil {
		t.Fatal(err)
	}
	return m
}

// A release that meets a slot migration's last moment (the keys moved, the
// slot not yet assigned) is answered TRYAGAIN: not executed. Like the
// acquire, it must be retried within its budget (the release timeout),
// not given up after go-redis's own few retries: otherwise the key stays
// held for the rest of its TTL, and a waiter queued for it (here with a
// wait shorter than that TTL) is answered busy although the holder
// released in time.
func TestAdversary33_ReleaseDuringSlotMigrationIsRetried(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	holder, hrec := newClient(t, cl.Client(t))
	waiterC, _ := newClient(t, cl.Client(t))
	key := "adv33-release"

	release := make(chan struct{})
	held := hold(t, holder, key, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second}, release)
	waited := make(chan error, 1)
	var enteredAt time.Time
	go func() {
		waited <- waiterC.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2500 * time.Millisecond, MinValidity: 100 * time.Millisecond},
			func(context.Context) error { enteredAt = time.Now(); return nil })
	}()
	// The waiter is queued before the slot starts moving.
	adv33WaitQueued(t, holder, key, 2*time.Second)

	m := adv33Migration(t, cl, key)
	finished := make(chan error, 1)
	releasedAt := time.Now()
	close(release)
	go func() {
		time.Sleep(60 * time.Millisecond) // well inside the release's 250ms
		finished <- m.Finish(context.Background())
	}()
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if n := hrec.Count(lease.EventReleased); n != 1 {
		for _, e := range hrec.Events() {
			t.Logf("holder event %v %v", e.Kind, e.Err)
		}
		t.Errorf("the holder's release was not confirmed (%d released events): a TRYAGAIN inside the release budget was not retried", n)
	}
	err := <-waited
	if err != nil {
		t.Fatalf("the waiter, queued before the holder released in time: %v", err)
	}
	if lag := enteredAt.Sub(releasedAt); lag > time.Second {
		t.Errorf("the waiter entered %v after the holder's release (the key's TTL ran out instead)", lag)
	}
}

// Inspect and List read a lease with one script over its keys (lock,
// counter, queue, expiries), which a slot migration answers TRYAGAIN
// while only some of them exist on either master (an unfenced lease has
// no counter: always). That answer means "not run, try again": they must
// try again within their context, as the acquire does, instead of
// failing (List: the whole page) at the first TRYAGAIN of a migration
// that ends well within it.
func TestAdversary33_InspectDuringSlotMigrationIsRetried(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	c, _ := newClient(t, cl.Client(t))
	key := "adv33-inspect"
	release := make(chan struct{})
	defer close(release)
	hold(t, c, key, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second}, release)
	want, err := c.Inspect(ctx, key)
	if err != nil || want.Free() {
		t.Fatalf("inspect before the migration: %+v, %v", want, err)
	}
	for _, what := range []string{"Inspect", "List"} {
		t.Run(what, func(t *testing.T) {
			m := adv33Migration(t, cl, key)
			finished := make(chan error, 1)
			go func() {
				time.Sleep(300 * time.Millisecond)
				finished <- m.Finish(context.Background())
			}()
			ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var got lease.Info
			if what == "Inspect" {
				got, err = c.Inspect(ictx, key)
			} else {
				var page []lease.Info
				page, _, err = c.List(ictx, "adv33-inspect", "")
				if len(page) == 1 {
					got = page[0]
				} else if err == nil {
					err = fmt.Errorf("listed %d leases, want 1", len(page))
				}
			}
			if ferr := <-finished; ferr != nil {
				t.Fatal(ferr)
			}
			if err != nil {
				t.Fatalf("%s while the slot migrates (finished 300ms into a 3s context): %v", what, err)
			}
			if got.Holder != want.Holder {
				t.Fatalf("%s: holder %q, want %q", what, got.Holder, want.Holder)
			}
		})
	}
}

// ForceRelease (leasectl release) while the lease's slot migrates: its
// release script, and the script that ends a hold-min, name keys that do
// not exist (the channel, the tombstone), so a migration answers TRYAGAIN
// until it ends; they must be sent again within the caller's context,
// not refused at once.
func TestAdversary33_ForceReleaseDuringSlotMigrationIsRetried(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	c, _ := newClient(t, cl.Client(t))
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("hold=", held), func(t *testing.T) {
			key := fmt.Sprint("adv33-force-", held)
			s := lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second}
			want := lease.ForceReleased
			release := make(chan struct{})
			var done <-chan error
			if held {
				s.HoldMin = 10 * time.Second
				want = lease.ForceHoldEnded
				if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			} else {
				done = hold(t, c, key, s, release)
			}
			info, err := c.Inspect(ctx, key)
			if err != nil || info.Free() || info.Hold != held {
				t.Fatalf("before the migration: %+v, %v", info, err)
			}
			m := adv33Migration(t, cl, key)
			finished := make(chan error, 1)
			go func() {
				time.Sleep(300 * time.Millisecond)
				finished <- m.Finish(context.Background())
			}()
			fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			res, err := c.ForceRelease(fctx, key, info.Holder)
			if ferr := <-finished; ferr != nil {
				t.Fatal(ferr)
			}
			if err != nil || res != want {
				t.Fatalf("ForceRelease while the slot migrates (finished 300ms into a 3s context): %v, %v (want %v)", res, err, want)
			}
			if after, err := c.Inspect(ctx, key); err != nil || !after.Free() {
				t.Fatalf("after ForceRelease: %+v, %v", after, err)
			}
			close(release)
			if done != nil {
				if err := <-done; !errors.Is(err, lease.ErrLost) {
					t.Fatalf("the holder, released from outside: %v (want ErrLost)", err)
				}
			}
		})
	}
}

// A lease kept between calls (Spec.Keep) while its slot moves to another
// master: its renewals follow the slot, and a process that then waits for
// the key on the new master gets it from the keeper at once (the keeper
// hears the waiter's "w" through the Cluster's pub/sub broadcast), not
// when the keep runs out.
func TestAdversary33_KeptLeaseAcrossSlotMigration(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	keeper, krec := newClient(t, cl.Client(t))
	other, _ := newClient(t, cl.Client(t))
	key := "adv33-keep"
	const ttl = 600 * time.Millisecond
	s := lease.Spec{TTL: ttl, Deadline: 2 * time.Second, Keep: 20 * time.Second, Fence: true}
	var tok lease.Token
	if err := keeper.Do(ctx, key, s, func(ctx context.Context) error { tok, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	m := adv33Migration(t, cl, key)
	time.Sleep(ttl) // renewals while the keys are on the importing master (ASK)
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl) // renewals after MOVED
	// Still kept: the next call reuses it (same token, no acquire).
	var again lease.Token
	if err := keeper.Do(ctx, key, s, func(ctx context.Context) error { again, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatalf("reuse after the migration: %v", err)
	}
	if again != tok || krec.Count(lease.EventLost) > 0 {
		t.Fatalf("the kept lease did not survive the migration: token %d, then %d; %d losses", tok, again, krec.Count(lease.EventLost))
	}
	start := time.Now()
	var got lease.Token
	err := other.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second, Fence: true},
		func(ctx context.Context) error { got, _ = lease.TokenFrom(ctx); return nil })
	if err != nil {
		t.Fatalf("a waiter on the migrated key: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the waiter got the kept key after %v (the keeper did not hear it)", took)
	}
	if got <= tok {
		t.Errorf("token after the migration %d, not above the kept lease's %d", got, tok)
	}
}

// A leader steps down while its term's slot is being migrated (the keys
// moved, the slot about to be assigned): the standby, campaigning on
// another Client, takes over from the step-down, not when the term's TTL
// runs out, and a WatchLeader on a third Client reports it.
func TestAdversary33_LeaderStepsDownDuringSlotMigration(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	a, _ := newClient(t, cl.Client(t))
	b, _ := newClient(t, cl.Client(t))
	key := "adv33-lead"
	spec := lease.LeadSpec{TTL: 6 * time.Second, MinValidity: 100 * time.Millisecond}
	actx, stopA := context.WithCancel(context.Background())
	defer stopA()
	leading := make(chan struct{})
	stepDown := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		sa := spec
		sa.Owner = "a"
		aDone <- a.Lead(actx, key, sa, func(ctx context.Context) error {
			close(leading)
			select {
			case <-stepDown:
				stopA() // no new campaign: the standby is next
			case <-ctx.Done():
			}
			return nil
		})
	}()
	select {
	case <-leading:
	case <-time.After(5 * time.Second):
		t.Fatal("a did not lead")
	}
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	bLeads := make(chan time.Time, 1)
	bDone := make(chan error, 1)
	go func() {
		sb := spec
		sb.Owner = "b"
		bDone <- b.Lead(bctx, key, sb, func(ctx context.Context) error {
			bLeads <- time.Now()
			<-ctx.Done()
			return nil
		})
	}()
	time.Sleep(300 * time.Millisecond) // b campaigns (queued)
	m := adv33Migration(t, cl, key)
	finished := make(chan error, 1)
	stepped := time.Now()
	close(stepDown)
	go func() {
		time.Sleep(60 * time.Millisecond)
		finished <- m.Finish(context.Background())
	}()
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	<-aDone
	select {
	case at := <-bLeads:
		if lag := at.Sub(stepped); lag > 2*time.Second {
			t.Errorf("the standby led %v after the step-down", lag)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the standby did not lead within 4s of the step-down (the term's 6s TTL ran instead)")
	}
	// A watcher (another Client) hears of the new leader.
	watcher, _ := newClient(t, cl.Client(t))
	wctx, stopW := context.WithTimeout(context.Background(), 3*time.Second)
	defer stopW()
	var last lease.Leader
	for l := range watcher.WatchLeader(wctx, key) {
		if last = l; l.Err == nil && l.Owner == "b" {
			break
		}
	}
	if last.Owner != "b" {
		t.Errorf("WatchLeader after the migration: %+v (want owner b)", last)
	}
	stopB()
	<-bDone
}

// A Sentinel deployment with one of its three sentinels paused (a stopped
// VM, SIGSTOP: connections open, nothing answers) when the service
// starts: go-redis asks every sentinel for the primary at once and waits
// for all of them, the paused one until its DialTimeout (5s by default),
// before it dials the primary. Until then every call is refused (nothing
// sent) by its own deadline, never unknown, never late. With a
// DialTimeout shorter than the calls' budgets (the README's Sentinel
// recipe) the first call is granted.
func TestAdversary33_SentinelPausedAtStart(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	sn.Sentinels[0].Pause()
	defer sn.Sentinels[0].Resume()
	s := lease.Spec{TTL: time.Second, Deadline: time.Second, MinValidity: 100 * time.Millisecond}
	st := watchStalls(t, 5*time.Millisecond)
	for _, dial := range []time.Duration{0, 300 * time.Millisecond} {
		c, _ := newClient(t, sn.FailoverClient(t, func(o *redis.FailoverOptions) { o.DialTimeout = dial }))
		start := time.Now()
		err := c.Do(ctx, "adv33-sentinel", s, func(context.Context) error { return nil })
		end := time.Now()
		took := end.Sub(start)
		t.Logf("DialTimeout %v: first call %v after %v", dial, err, took.Round(time.Millisecond))
		if took-st.lost(start.Add(s.Deadline), end) > s.Deadline+100*time.Millisecond {
			t.Errorf("DialTimeout %v: the first call took %v, its Deadline is %v", dial, took, s.Deadline)
		}
		if err != nil && !errors.Is(err, lease.ErrRefused) {
			t.Errorf("DialTimeout %v: %v (want nil, or ErrRefused: nothing was sent)", dial, err)
		}
		if dial > 0 && err != nil {
			t.Errorf("DialTimeout %v with a paused sentinel: the first call was not granted: %v", dial, err)
		}
	}
}

// A waiter queued on the old primary when a Sentinel failover happens:
// its queue entry (replicated) and its Client's subscription move to the
// new primary, so the holder's release there hands it the key by
// notification (re-checks are 10s apart), with a larger token.
func TestAdversary33_SentinelFailoverWithQueuedWaiter(t *testing.T) {
	t.Parallel()
	failoverWithQueuedWaiter(t, "adv33-sentinel-queue", 300*time.Millisecond)
}

// failoverWithQueuedWaiter runs a holder and a waiter queued behind it on
// two Clients of a new Sentinel deployment (go-redis failover clients
// adjusted by adjust), fails the primary over, lets the holder run on for
// settle (its renewals and the subscription follow), releases, and checks
// that the waiter entered by notification with a larger token. It returns
// the holder's Client and the new primary.
func failoverWithQueuedWaiter(t *testing.T, key string, settle time.Duration, adjust ...func(*redis.FailoverOptions)) (*lease.Client, *leasetest.Server) {
	t.Helper()
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	holder, hrec := newClient(t, sn.FailoverClient(t, adjust...), lease.WithRecheck(10*time.Second))
	waiterC, _ := newClient(t, sn.FailoverClient(t, adjust...), lease.WithRecheck(10*time.Second))
	release := make(chan struct{})
	var htok lease.Token
	held := make(chan struct{})
	hdone := make(chan error, 1)
	go func() {
		hdone <- holder.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 30 * time.Second, Fence: true}, func(ctx context.Context) error {
			htok, _ = lease.TokenFrom(ctx)
			close(held)
			<-release
			return context.Cause(ctx)
		})
	}()
	select {
	case <-held:
	case err := <-hdone:
		t.Fatal(err)
	}
	var wtok lease.Token
	var enteredAt time.Time
	wdone := make(chan error, 1)
	go func() {
		wdone <- waiterC.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second, MinValidity: 200 * time.Millisecond, Fence: true},
			func(ctx context.Context) error { wtok, _ = lease.TokenFrom(ctx); enteredAt = time.Now(); return nil })
	}()
	adv33WaitQueued(t, holder, key, 3*time.Second)
	time.Sleep(100 * time.Millisecond) // the entry reaches the replicas
	newPrimary, err := sn.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(settle)
	releasedAt := time.Now()
	close(release)
	if err := <-hdone; err != nil {
		for _, e := range hrec.Events() {
			t.Logf("holder %v %v", e.Kind, e.Err)
		}
		t.Fatalf("holder across the failover: %v", err)
	}
	if err := <-wdone; err != nil {
		t.Fatalf("the waiter queued before the failover: %v", err)
	}
	if lag := enteredAt.Sub(releasedAt); lag > time.Second {
		t.Errorf("the waiter entered %v after the release (not by notification)", lag)
	}
	if wtok <= htok {
		t.Errorf("the waiter's token %d is not above the holder's %d", wtok, htok)
	}
	return holder, newPrimary
}

// Resharding onto a master just added to the cluster (scale-out), with
// WithReplicas: while the slot migrates and the lease's keys are already
// on the new master, the source answers the renewals ASK, and the
// renewals (sent on each master's own connection, to be followed by WAIT
// there) must follow it to the new master, which no client's slot map
// lists yet (a master without slots is in no CLUSTER SLOTS answer). A
// migration longer than the TTL must not lose the lease
// (TestAdversary30_ClusterReplicatedRenewalsDuringLongMigration moved it
// between masters the client knew).
func TestAdversary33_ReplicatedRenewalsDuringMigrationToNewMaster(t *testing.T) {
	cl, c, rec, added := clusterGrown(t)
	ctx := context.Background()
	key := "adv33-newmaster"
	slot := leasetest.Slot(lockKey(key))
	const ttl = 600 * time.Millisecond
	err := c.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: 10 * time.Second}, migrateWhileHeld(t, cl, slot, added, 3*ttl))
	if err != nil {
		logFirstRenewFailure(t, rec)
		t.Fatalf("the held lease across a migration of 3 TTLs onto a new master: %v", err)
	}
	if owner, _ := cl.MasterForSlot(ctx, slot); owner != added {
		t.Fatalf("slot %d not on the new master", slot)
	}
}

// clusterGrown starts a Cluster of 3 masters with a replica each and a
// Client that waits for 1 replica and knows the slot map, then adds a
// master without slots (scale-out), which no slot map lists yet.
func clusterGrown(t *testing.T) (*leasetest.Cluster, *lease.Client, *leasetest.Recorder, *leasetest.Server) {
	t.Helper()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	c, rec := newClient(t, cl.Client(t), lease.WithReplicas(1, 100*time.Millisecond))
	// The warm-up (connections, scripts) may find a replica that a loaded
	// machine has not scheduled within WAIT's 100ms: it tries again.
	var err error
	for try := 0; try < 10; try++ {
		if err = c.Do(ctx, "warm", lease.Spec{TTL: time.Second, Deadline: 2 * time.Second}, nop); err == nil {
			break
		}
		t.Logf("warm-up, try %d: %v", try, err)
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	added, err := cl.AddMaster(actx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return cl, c, rec, added
}

// logFirstRenewFailure logs the first EventRenewFailed rec saw.
func logFirstRenewFailure(t *testing.T, rec *leasetest.Recorder) {
	t.Helper()
	for _, e := range rec.Events() {
		if e.Kind == lease.EventRenewFailed {
			t.Logf("%v", e.Err)
			return
		}
	}
}

// adv33WaitQueued waits up to within for key to have a waiter in its
// queue, through Inspect (which may fail while a slot migrates or a
// failover runs: it is asked again).
func adv33WaitQueued(t *testing.T, c *lease.Client, key string, within time.Duration) {
	t.Helper()
	var info lease.Info
	var err error
	if !waitFor(within, func() bool {
		info, err = c.Inspect(context.Background(), key)
		return err == nil && info.Queued > 0
	}) {
		t.Fatalf("the waiter did not queue: %+v %v", info, err)
	}
}
