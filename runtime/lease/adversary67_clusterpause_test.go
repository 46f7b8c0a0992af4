package lease_test

// Round 67 (a helper's adversary round): a Cluster master that hangs
// (SIGSTOP: a host that stops answering without resetting connections)
// instead of dying with a reset.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv67KeysOn returns n keys (with prefix) whose lock key's slot is on
// master m.
func adv67KeysOn(t *testing.T, cl *leasetest.Cluster, m *leasetest.Server, prefix string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for i := 0; len(keys) < n && i < 10000; i++ {
		k := fmt.Sprint(prefix, i)
		km, err := cl.MasterForKey(ctx, lockKey(k))
		if err != nil {
			t.Fatal(err)
		}
		if km == m {
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("found only %d keys on %s", len(keys), m.Addr())
	}
	return keys
}

// A Cluster master hangs (SIGSTOP) and its replica takes over. A lease
// Client that has no lease held on that shard (nothing to renew) keeps
// calling Do on one of its keys. README (Cluster recipe): "The runtime
// reloads the slot map itself after a connection error or a redirect
// (go-redis alone kept dialling a dead master for a minute in our
// tests)"; the Deployments table: the failed master's keys are "granted
// again 4.4 s after the kill". Here every call times out against the
// hung master and is refused: nothing makes the Client reload its slot
// map (go-redis does so by itself only every 60 s), so the shard's keys
// stay unavailable through this Client for as long as the old master
// hangs, long after the cluster failed over; a Client made after the
// failover gets the same key at once.
func TestAdversary67_ClusterHungMasterKeysGrantedAfterFailover(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	victim, err := cl.MasterForKey(ctx, lockKey("adv67-h"))
	if err != nil {
		t.Fatal(err)
	}
	key := adv67KeysOn(t, cl, victim, "adv67-h", 1)[0]
	c, _ := newClient(t, cl.Client(t))
	s := lease.Spec{TTL: time.Second, Deadline: time.Second, MinValidity: 100 * time.Millisecond}
	// The Client works on that shard before the fault.
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Round 68: a Client that only reads (an operator's, a leader
	// watcher's) must find the shard again too.
	r, _ := newClient(t, cl.Client(t))
	if _, err := r.Leader(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	readsBack := make(chan string, 1)
	go func() { readsBack <- adv68ReadsBack(ctx, r, key, time.Now()) }()

	pausedAt := time.Now()
	victim.Pause()
	t.Cleanup(victim.Resume)
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	promoted, err := cl.WaitFailover(wctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	failedOver := time.Now()
	t.Logf("failover to %s done %v after the pause", promoted.Addr(), failedOver.Sub(pausedAt).Round(time.Millisecond))

	// (Not a minute, go-redis's own reload; a slot map load of its may
	// wait on the hung node first: see adv68LoadStall.)
	const patience = adv68LoadStall + time.Second
	var granted time.Time
	counts := map[string]int{}
	var last error
	for granted.IsZero() && time.Since(failedOver) < patience {
		err := c.Do(ctx, key, s, func(context.Context) error { return nil })
		counts[outcomeOf(err)]++
		if err == nil {
			granted = time.Now()
			break
		}
		last = err
		if errors.Is(err, lease.ErrBusy) {
			t.Errorf("a call on a free key answered busy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if granted.IsZero() {
		// For the report: a Client made now gets the key (the cluster serves it).
		// Asked after the loop, so that its own first slot map load (which may
		// ask the hung node first) takes nothing from the old Client's time.
		fresh, _ := newClient(t, cl.Client(t))
		var ferr error
		for i := 0; i < 10; i++ { // its command table load may ask the hung node first
			if ferr = fresh.Do(ctx, key, s, func(context.Context) error { return nil }); ferr == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("the Client made before the fault got no grant on the failed-over shard in %v after the failover (%v after the hang); calls %v, last: %v (a Client made after the failover: %v)",
			patience, time.Since(pausedAt).Round(time.Millisecond), counts, last, ferr)
	}
	t.Logf("granted again %v after the failover; calls %v", granted.Sub(failedOver).Round(time.Millisecond), counts)
	if msg := <-readsBack; strings.HasPrefix(msg, "FAIL: ") {
		t.Error(strings.TrimPrefix(msg, "FAIL: "))
	} else {
		t.Logf("a reading Client (Leader, Inspect, ForceRelease) %s", msg)
	}
}

// adv68ReadsBack calls Leader, Inspect and ForceRelease (of an identity
// that does not hold the key) on key, each with a 300ms budget, until all
// three succeed in one round, and reports when; "FAIL: " and what failed,
// after 25s (the hang, the failover, and a few seconds more; go-redis by
// itself reloads its slot map after a minute).
func adv68ReadsBack(ctx context.Context, r *lease.Client, key string, start time.Time) string {
	var last error
	for time.Since(start) < 25*time.Second {
		time.Sleep(50 * time.Millisecond)
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := r.Leader(rctx, key)
		if err == nil {
			_, err = r.Inspect(rctx, key)
		}
		if err == nil {
			_, err = r.ForceRelease(rctx, key, "00000000000000000000000000000000")
		}
		cancel()
		if err == nil {
			return fmt.Sprintf("read again %v after the hang", time.Since(start).Round(time.Millisecond))
		}
		last = err
	}
	return fmt.Sprintf("FAIL: a reading Client made before the hang did not read the failed-over shard within 25s: %v", last)
}
