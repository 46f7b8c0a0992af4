package lease_test

// Deployments (issue 13): Sentinel failover, Cluster master loss and slot
// migration, on real servers started by runtime/leasetest. Each test logs
// "deploy-table" lines (topology, fault, measure) that the README's
// Deployments table is built from:
// go test ./runtime/lease -run Deploy -v | grep deploy-table

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func deployTable(t *testing.T, topology, fault, measure string) {
	t.Helper()
	t.Logf("deploy-table | %s | %s | %s |", topology, fault, measure)
}

// load runs workers that take leases on keys until stop closes, and records
// every entered call's interval and every outcome.
type load struct {
	mu        sync.Mutex
	intervals []interval
	okTimes   []time.Time
	outcomes  map[string]int
	lastOK    map[int]time.Time // per process: the last success
	okAfter   func(proc int, at time.Time)
}

func newLoad() *load {
	return &load{outcomes: map[string]int{}, lastOK: map[int]time.Time{}}
}

func (ld *load) run(ctx context.Context, wg *sync.WaitGroup, c *lease.Client, proc, workers int, keys []string, s lease.Spec, work time.Duration, stop <-chan struct{}) {
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[(i+w)%len(keys)]
				var iv interval
				entered := false
				err := c.Do(ctx, key, s, func(ctx context.Context) error {
					entered = true
					iv = interval{key: key, holder: proc, from: time.Now()}
					select {
					case <-ctx.Done():
					case <-time.After(work):
					}
					iv.to = time.Now()
					return nil
				})
				class := outcomeOf(err)
				ld.mu.Lock()
				ld.outcomes[class]++
				if entered {
					iv.lost = class == "lost"
					ld.intervals = append(ld.intervals, iv)
				}
				if err == nil {
					ld.okTimes = append(ld.okTimes, time.Now())
					ld.lastOK[proc] = time.Now()
					if ld.okAfter != nil {
						ld.okAfter(proc, time.Now())
					}
				}
				ld.mu.Unlock()
				if err != nil && !errors.Is(err, lease.ErrBusy) {
					time.Sleep(10 * time.Millisecond) // do not spin on a failing server
				}
			}
		}()
	}
}

// doubleHolders counts moments when two processes were inside fn on one
// key and neither was told its lease was lost.
func (ld *load) doubleHolders() (n int, examples []string) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ivs := slices.Clone(ld.intervals)
	slices.SortFunc(ivs, func(a, b interval) int { return a.from.Compare(b.from) })
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if !b.from.Before(a.to) {
				break
			}
			if a.key == b.key && a.holder != b.holder && !a.lost && !b.lost {
				n++
				if len(examples) < 3 {
					examples = append(examples, fmt.Sprintf("%s: process %d %s–%s and process %d %s–%s", a.key,
						a.holder, a.from.Format("05.000"), a.to.Format("05.000"), b.holder, b.from.Format("05.000"), b.to.Format("05.000")))
				}
			}
		}
	}
	return n, examples
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, lease.ErrLost):
		return "lost"
	case errors.Is(err, lease.ErrBusy):
		return "busy"
	case errors.Is(err, lease.ErrUnknown):
		return "unknown"
	case errors.Is(err, lease.ErrRefused):
		return "refused"
	case errors.Is(err, lease.ErrLowValidity):
		return "low_validity"
	case errors.Is(err, lease.ErrDeadline):
		return "deadline"
	case errors.Is(err, lease.ErrClosed):
		return "closed"
	}
	return "other: " + err.Error()
}

// maxGap is the longest time without a successful call between from and
// to: how long the deployment could not grant leases.
func (ld *load) maxGap(from, to time.Time) time.Duration {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ts := slices.Clone(ld.okTimes)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	gap, last := time.Duration(0), from
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		gap = max(gap, t.Sub(last))
		last = t
	}
	return max(gap, to.Sub(last))
}

func (ld *load) summary() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var parts []string
	for k, v := range ld.outcomes {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func (ld *load) others() []string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var out []string
	for k := range ld.outcomes {
		if strings.HasPrefix(k, "other") {
			out = append(out, k)
		}
	}
	return out
}

// A Sentinel failover with the old primary alive: the lease Client uses the
// user's FailoverClient itself, so lease traffic follows the switch, and
// the release subscription follows it too.
func TestDeploySentinelFailoverFollowsTheClient(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	c, _ := newClient(t, sn.FailoverClient(t), lease.WithRecheck(10*time.Second))
	other, _ := newClient(t, sn.FailoverClient(t), lease.WithRecheck(10*time.Second))

	ld := newLoad()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	s := lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: time.Second, MinValidity: 200 * time.Millisecond}
	ld.run(ctx, &wg, c, 0, 2, []string{"s-a", "s-b", "s-c"}, s, 20*time.Millisecond, stop)
	time.Sleep(500 * time.Millisecond)
	old, err := sn.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var recovered atomic.Int64 // ns after start of the first success on the new primary side
	newPrimary, err := sn.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Since(start)
	ld.mu.Lock()
	ld.okAfter = func(_ int, at time.Time) {
		if at.After(start.Add(switched)) {
			recovered.CompareAndSwap(0, int64(at.Sub(start)))
		}
	}
	ld.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for recovered.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	gap := ld.maxGap(start, time.Now())
	if recovered.Load() == 0 {
		t.Fatalf("no lease granted within 5s after the failover ended (%v): %s", switched, ld.summary())
	}
	if others := ld.others(); len(others) > 0 {
		t.Fatalf("errors outside the lease classes: %v", others)
	}

	// The lease keys now live on the new primary, and a waiter is woken by
	// notification there (re-checks are 10s apart).
	release := make(chan struct{})
	held := hold(t, other, "s-wait", spec(5*time.Second, 10*time.Second), release)
	direct := newPrimary.Client(t)
	if n, _ := direct.Exists(ctx, lockKey("s-wait")).Result(); n != 1 {
		t.Fatalf("the lease is not on the new primary %s (old %s)", newPrimary.Addr(), old.Addr())
	}
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	wstart := time.Now()
	if err := c.Do(ctx, "s-wait", lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	<-held
	handoff := time.Since(wstart) - 200*time.Millisecond
	if handoff > time.Second {
		t.Fatalf("handoff after the failover took %v: the subscription did not follow", handoff)
	}
	t.Logf("failover took %v; longest time without a grant %v; outcomes %s; handoff %v",
		switched.Round(time.Millisecond), gap.Round(time.Millisecond), ld.summary(), handoff.Round(time.Millisecond))
	deployTable(t, "Sentinel (1 primary, 2 replicas, 3 sentinels)", "SENTINEL FAILOVER, old primary alive",
		fmt.Sprintf("longest time without a grant %v (the failover itself took %v); a waiter's handoff on the new primary by notification in %v",
			gap.Round(10*time.Millisecond), switched.Round(100*time.Millisecond), handoff.Round(time.Millisecond)))
}

// Two application processes during a Sentinel failover: one follows the
// switch (a FailoverClient), the other still talks to the old primary, as a
// client that learns of the switch late does. The old primary stays a
// writable master for about 9s, so without more both grant the same keys.
// The recipe (min-replicas-to-write 1 on the data nodes, WithReplicas(1,
// 100ms) on the lease clients) leaves the old primary unable to grant once
// its replicas have moved, and a grant no replica has acknowledged is never
// entered.
func TestDeploySentinelRecipePreventsDoubleHolders(t *testing.T) {
	t.Parallel()
	for _, recipe := range []bool{false, true} {
		name := "plain"
		if recipe {
			name = "recipe"
		}
		t.Run(name, func(t *testing.T) {
			sn := leasetest.StartSentinel(t)
			ctx := context.Background()
			var opts []lease.Option
			if recipe {
				sn.MinReplicas(t, 1, time.Second)
				opts = append(opts, lease.WithReplicas(1, 100*time.Millisecond))
			}
			old, err := sn.Primary(ctx)
			if err != nil {
				t.Fatal(err)
			}
			following, _ := newClient(t, sn.FailoverClient(t), opts...)
			stale, _ := newClient(t, old.Client(t), opts...)

			ld := newLoad()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			keys := []string{"d-a", "d-b", "d-c", "d-d"}
			s := lease.Spec{TTL: 500 * time.Millisecond, Deadline: 2 * time.Second, Wait: 300 * time.Millisecond, MinValidity: 100 * time.Millisecond}
			ld.run(ctx, &wg, following, 0, 2, keys, s, 30*time.Millisecond, stop)
			ld.run(ctx, &wg, stale, 1, 2, keys, s, 30*time.Millisecond, stop)
			time.Sleep(300 * time.Millisecond)
			if _, err := sn.Failover(ctx); err != nil {
				t.Fatal(err)
			}
			// The dangerous window: until sentinel demotes the old primary.
			if err := sn.WaitSettled(ctx); err != nil {
				t.Fatal(err)
			}
			close(stop)
			wg.Wait()
			n, ex := ld.doubleHolders()
			t.Logf("%s: %d double-holder moments %v; outcomes %s", name, n, ex, ld.summary())
			if others := ld.others(); len(others) > 0 {
				t.Errorf("errors outside the lease classes: %v", others)
			}
			if recipe {
				deployTable(t, "Sentinel, a client still on the old primary", "SENTINEL FAILOVER with the recipe (min-replicas-to-write 1, WithReplicas(1, 100ms))",
					fmt.Sprintf("%d moments with two holders inside fn (%s)", n, ld.summary()))
				if n > 0 {
					t.Errorf("%d double-holder moments with the recipe: %v", n, ex)
				}
			} else {
				deployTable(t, "Sentinel, a client still on the old primary", "SENTINEL FAILOVER without the recipe",
					fmt.Sprintf("%d moments with two holders inside fn (%s)", n, ld.summary()))
			}
		})
	}
}

// A Cluster master killed (kill -9): its replica takes over; calls on the
// other shards carry on, waiters never fail because of the subscription,
// and the killed shard's keys are granted again soon after the cluster
// recovers.
func TestDeployClusterMasterKill(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	c, rec := newClient(t, cl.Client(t), lease.WithRecheck(200*time.Millisecond))
	victimKey := "c-0"
	victim, err := cl.MasterForKey(ctx, victimKey)
	if err != nil {
		t.Fatal(err)
	}
	// Keys on every shard; the killed shard's keys apart.
	var killedKeys, otherKeys []string
	for i := 0; len(killedKeys) < 3 || len(otherKeys) < 6; i++ {
		k := fmt.Sprint("c-", i)
		m, err := cl.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m == victim {
			if len(killedKeys) < 3 {
				killedKeys = append(killedKeys, k)
			}
		} else if len(otherKeys) < 6 {
			otherKeys = append(otherKeys, k)
		}
	}
	s := lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: time.Second, MinValidity: 200 * time.Millisecond}
	killedLoad, otherLoad := newLoad(), newLoad()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	killedLoad.run(ctx, &wg, c, 0, 2, killedKeys, s, 10*time.Millisecond, stop)
	otherLoad.run(ctx, &wg, c, 0, 4, otherKeys, s, 10*time.Millisecond, stop)
	time.Sleep(500 * time.Millisecond)

	killedAt := time.Now()
	tk, err := cl.KillMaster(ctx, victimKey)
	if err != nil {
		t.Fatal(err)
	}
	var back atomic.Int64
	killedLoad.mu.Lock()
	killedLoad.okAfter = func(_ int, at time.Time) {
		if at.After(killedAt.Add(tk.Took)) {
			back.CompareAndSwap(0, int64(at.Sub(killedAt)))
		}
	}
	killedLoad.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for back.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	gap := killedLoad.maxGap(killedAt, time.Now())
	// The other shards kept working during the outage.
	otherLoad.mu.Lock()
	otherOK := otherLoad.outcomes["ok"]
	otherLoad.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("cluster ok again %v after the kill; killed shard granted again %v after it (longest gap %v); killed shard: %s; other shards: %s (longest gap %v); subscription failures %d",
		tk.Took.Round(time.Millisecond), time.Duration(back.Load()).Round(time.Millisecond), gap.Round(time.Millisecond), killedLoad.summary(), otherLoad.summary(),
		otherLoad.maxGap(killedAt, killedAt.Add(tk.Took)).Round(time.Millisecond), rec.Count(lease.EventSubscriptionFailed))
	if back.Load() == 0 {
		t.Fatalf("the killed shard's keys were not granted again within 15s of the cluster's recovery (%v)", tk.Took)
	}
	if lag := time.Duration(back.Load()) - tk.Took; lag > 3*time.Second {
		t.Errorf("the killed shard's keys were granted %v after the cluster recovered", lag)
	}
	for _, ld := range []*load{killedLoad, otherLoad} {
		if others := ld.others(); len(others) > 0 {
			t.Errorf("errors outside the lease classes: %v", others)
		}
	}
	if otherOK == 0 {
		t.Error("no lease was granted on the other shards")
	}
	deployTable(t, "Cluster (3 masters, 1 replica each)", "kill -9 of a master",
		fmt.Sprintf("cluster ok after %v; its keys granted again %v after the kill; other shards unaffected (%s)",
			tk.Took.Round(100*time.Millisecond), time.Duration(back.Load()).Round(100*time.Millisecond), otherLoad.summary()))
}

// A held lease's slot moves to another master: renewals, the release and
// new acquires (also with WithReplicas, whose pipeline goes to one node)
// follow the slot; MOVED/ASK/TRYAGAIN are never reported as unknown.
func TestDeployClusterSlotMigration(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	for _, replicas := range []int{0, 1} {
		t.Run(fmt.Sprint("replicas=", replicas), func(t *testing.T) {
			var opts []lease.Option
			if replicas > 0 {
				opts = append(opts, lease.WithReplicas(1, 200*time.Millisecond))
			}
			c, _ := newClient(t, cl.Client(t), opts...)
			key := fmt.Sprint("mig-", replicas)
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
			s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 10 * time.Second, Fence: true}
			var nested []error
			err = c.Do(ctx, key, s, func(ctx context.Context) error {
				m, err := cl.BeginMigration(ctx, slot, to)
				if err != nil {
					return err
				}
				time.Sleep(300 * time.Millisecond) // a renewal falls in
				if _, err := m.MoveKeys(ctx, 1); err != nil {
					return err
				}
				// Mid-migration (some of the lease's keys moved, some not):
				// another call on the key retries TRYAGAIN/ASK while the
				// migration goes on, and is answered busy once it is done.
				other := lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Fence: true}
				midway := make(chan error, 1)
				go func() { midway <- c.Do(context.Background(), key, other, func(context.Context) error { return nil }) }()
				time.Sleep(300 * time.Millisecond)
				if err := m.Finish(ctx); err != nil {
					return err
				}
				nested = append(nested, <-midway)
				time.Sleep(300 * time.Millisecond) // renewals after MOVED
				return nil
			})
			if err != nil {
				t.Fatalf("the held lease across the migration: %v", err)
			}
			for _, err := range nested {
				// The key is held by the outer call: busy is the answer, never
				// unknown or refused.
				if !errors.Is(err, lease.ErrBusy) {
					t.Errorf("a call mid-migration: %v (want busy)", err)
				}
			}
			// After the move: acquires go to the new owner.
			if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("after the migration: %v", err)
			}
			if owner, _ := cl.MasterForSlot(ctx, slot); owner != to {
				t.Fatalf("slot %d owned by %s, want %s", slot, owner.Addr(), to.Addr())
			}
		})
	}
	deployTable(t, "Cluster (3 masters, 1 replica each)", "slot migration (MIGRATING/IMPORTING, MIGRATE, SETSLOT) while the lease is held",
		"lease kept and renewed; calls mid-migration answered busy, never unknown; WithReplicas follows MOVED")
}
