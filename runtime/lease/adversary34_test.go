package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Round 34: a plain *redis.Client (no ContextTimeoutEnabled) whose
// ReadTimeout is -1 (no timeout of its own) and whose WriteTimeout is
// short and different: deadlines still hold on a paused server for Do, a
// waiter, Leader and Inspect, and healthy traffic is not cut by the short
// write timeout.
func TestAdversary34_PlainClientOddTimeouts(t *testing.T) {
	srv := leasetest.StartRedis(t)
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: 30 * time.Millisecond})
	defer plain.Close()
	c, err := lease.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	key := uniqueKey(t)
	for i := 0; i < 20; i++ {
		if err := c.Do(ctx, key, spec(time.Second, 2*time.Second), nop); err != nil {
			t.Fatal(err)
		}
	}
	if plain.Options().ContextTimeoutEnabled || plain.Options().ReadTimeout != 0 || plain.Options().WriteTimeout != 30*time.Millisecond {
		t.Fatalf("the user's options changed: %+v", plain.Options())
	}
	release := make(chan struct{})
	held := hold(t, c, key, spec(3*time.Second, 10*time.Second), release)
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	check := func(name string, limit time.Duration, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); took > limit+300*time.Millisecond {
			t.Errorf("%s with Redis paused returned after %v (err %v), want about %v", name, took.Round(time.Millisecond), err, limit)
		}
		if err == nil {
			t.Errorf("%s with Redis paused: nil error", name)
		}
	}
	check("Do", 400*time.Millisecond, func() error {
		return c.Do(ctx, uniqueKey(t), spec(5*time.Second, 400*time.Millisecond), func(context.Context) error {
			t.Error("fn entered with Redis paused")
			return nil
		})
	})
	check("Inspect", 400*time.Millisecond, func() error {
		ictx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		_, err := c.Inspect(ictx, key)
		return err
	})
	check("Leader", 400*time.Millisecond, func() error {
		ictx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		_, err := c.Leader(ictx, key)
		return err
	})
	srv.Resume()
	resumed = true
	close(release)
	if err := <-held; err != nil && !errors.Is(err, lease.ErrLost) {
		t.Fatalf("holder: %v", err)
	}
}

// Round 34: the user closes the plain client while the lease Client still
// runs (against Close's doc, as a service shutting down in the wrong order
// does): calls fail within their deadlines, never enter, and the lease
// Client's Close then leaves no goroutine behind.
func TestAdversary34_PlainClientClosedFirst(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ignore := goleak.IgnoreCurrent()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	c, err := lease.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	release := make(chan struct{})
	held := hold(t, c, key, spec(time.Second, 5*time.Second), release)
	waiter := make(chan error, 1)
	go func() {
		waiter <- c.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}, func(context.Context) error {
			t.Error("the waiter entered after its go-redis client was closed")
			return nil
		})
	}()
	queued(t, srv.Client(t), key, 1)
	plain.Close()
	start := time.Now()
	err = c.Do(ctx, uniqueKey(t), spec(time.Second, 500*time.Millisecond), func(context.Context) error {
		t.Error("entered with the go-redis client closed")
		return nil
	})
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("Do on a closed go-redis client: %v after %v", err, time.Since(start))
	}
	close(release)
	select {
	case err := <-held:
		t.Logf("holder: %v", err)
	case <-time.After(4 * time.Second):
		t.Fatal("the holder did not return")
	}
	select {
	case err := <-waiter:
		if err == nil {
			t.Fatal("the waiter returned nil")
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the waiter did not return")
	}
	c.Close()
	goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/leasegen/leasegen/runtime/leasetest.(*Server).Pause"))
}

// Round 34: what a hook on a plain client sees. New's doc says lease
// commands of a plain client do not reach its hooks (go-redis's clone
// "starts without them"); a hook added before New and one added after are
// counted, and neither may break lease traffic.
func TestAdversary34_PlainClientHooks(t *testing.T) {
	srv := leasetest.StartRedis(t)
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer plain.Close()
	before := &countHook{}
	plain.AddHook(before)
	c, err := lease.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	after := &countHook{}
	plain.AddHook(after)
	for i := 0; i < 3; i++ {
		if err := c.Do(context.Background(), uniqueKey(t), spec(time.Second, 2*time.Second), nop); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("lease commands seen by a hook added before New: %d, after New: %d", before.n.Load(), after.n.Load())
	if before.n.Load() != 0 || after.n.Load() != 0 {
		t.Fatalf("hooks on a plain client saw lease commands (before New %d, after New %d); New's doc says they see none", before.n.Load(), after.n.Load())
	}
}

// Round 34: plain Sentinel clients (redis.NewFailoverClient without
// ContextTimeoutEnabled): a holder renews across a SENTINEL FAILOVER, a
// waiter queued before it is handed the key by notification on the new
// primary with a larger token, and once the new primary is paused a call's
// deadline holds there (the clone follows the failover with the user's
// pool, and bounds reads by the context).
func TestAdversary34_PlainSentinelClientFailover(t *testing.T) {
	t.Parallel()
	plain := func(o *redis.FailoverOptions) { o.ContextTimeoutEnabled = false }
	// Past several renewals: they must have followed (a 2s TTL can expire
	// on the new primary while renewals still reach the old one, with or
	// without ContextTimeoutEnabled: asynchronous replication, DESIGN §7).
	holder, newPrimary := failoverWithQueuedWaiter(t, "adv34-plain-sentinel", 2500*time.Millisecond, plain)
	ctx := context.Background()
	newPrimary.Pause()
	defer newPrimary.Resume()
	start := time.Now()
	err := holder.Do(ctx, uniqueKey(t), spec(5*time.Second, 400*time.Millisecond), func(context.Context) error {
		t.Error("entered with the new primary paused")
		return nil
	})
	if took := time.Since(start); err == nil || took > 700*time.Millisecond {
		t.Fatalf("Do with a 400ms deadline on the paused new primary: %v after %v", err, took.Round(time.Millisecond))
	}
}

// Round 34: Close from an Observer (its doc allows it) at the EventAcquired
// of a waiter that a release just handed the key, before the waiter enters
// its function: as another goroutine calling Close while the waiter's
// goroutine is descheduled between its grant and its entry. Close returns,
// no call of the Client is in its function, so the service closes the
// go-redis client ("close the go-redis client only after [calls running
// their function] have"). Wanted: the waiter does not enter its function
// after Close returned (it returns ErrClosed), and the key it was handed
// does not stay held for its TTL (20s) while another Client's waiter waits.
func TestAdversary34_CloseFromObserverAtHandoverGrant(t *testing.T) {
	srv := leasetest.StartRedis(t)
	hc, _ := adv23Client(t, srv.Addr())
	xc, _ := adv23Client(t, srv.Addr())
	ctx := context.Background()
	key := uniqueKey(t)
	rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // plain
	defer rdbQ.Close()
	var qc *lease.Client
	var inFn, enteredAfterClose atomic.Int32
	var closedAt atomic.Int64
	closedNow := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	obs := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Key == key {
			once.Do(func() {
				qc.Close()
				closedAt.Store(1)
				close(closedNow)
				<-proceed
			})
		}
	})
	var err error
	qc, err = lease.New(rdbQ, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, qc, "warm")
	release := make(chan struct{})
	held := hold(t, hc, key, spec(20*time.Second, 30*time.Second), release)
	wdone := make(chan error, 1)
	go func() {
		wdone <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Wait: 15 * time.Second}, func(context.Context) error {
			inFn.Add(1)
			defer inFn.Add(-1)
			if closedAt.Load() != 0 {
				enteredAfterClose.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
			return nil
		})
	}()
	adv2WaitQueued(t, xc, key, 1)
	xin := queueBehind(t, xc, key, 1, nil)
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	select {
	case <-closedNow:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the key")
	}
	if inFn.Load() == 0 {
		rdbQ.Close() // Close returned and no call of Q is in its function
	}
	close(proceed)
	werr := <-wdone
	if n := enteredAfterClose.Load(); n != 0 {
		t.Errorf("the waiter entered its function after Close returned (Do: %v)", werr)
	}
	if after, info, ok := handedOn(xc, key, xin); ok {
		t.Logf("Q's waiter: %v; the third Client's waiter entered %v later", werr, after.Round(time.Millisecond))
	} else {
		t.Errorf("Q's waiter returned %v and Q's go-redis client was closed (no call in its function when Close returned); 1.5s later the key is still held by %q for %v more, and the third Client's waiter waits",
			werr, info.Holder, info.TTL.Round(time.Second))
	}
}

// Round 34: the same with a kept lease (Spec.Keep): Close from an Observer
// at the EventAcquired (Kept) of a call that takes the Client's kept
// lease, before it enters its function. The kept lease is in use, so
// Close's release of kept leases skips it; the service then closes the
// go-redis client (no call in its function). Wanted: the call does not
// enter after Close returned, and the key does not stay held for its TTL
// (20s) while another Client's waiter waits.
func TestAdversary34_CloseFromObserverAtKeptTake(t *testing.T) {
	srv := leasetest.StartRedis(t)
	xc, _ := adv23Client(t, srv.Addr())
	ctx := context.Background()
	key := uniqueKey(t)
	rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdbQ.Close()
	var qc *lease.Client
	var inFn, enteredAfterClose atomic.Int32
	var closedAt atomic.Int64
	closedNow := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	obs := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Kept && e.Key == key {
			once.Do(func() {
				qc.Close()
				closedAt.Store(1)
				close(closedNow)
				<-proceed
			})
		}
	})
	var err error
	qc, err = lease.New(rdbQ, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	s := lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Keep: 10 * time.Second}
	if err := qc.Do(ctx, key, s, nop); err != nil { // kept
		t.Fatal(err)
	}
	wdone := make(chan error, 1)
	go func() {
		wdone <- qc.Do(ctx, key, s, func(context.Context) error {
			inFn.Add(1)
			defer inFn.Add(-1)
			if closedAt.Load() != 0 {
				enteredAfterClose.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
			return nil
		})
	}()
	select {
	case <-closedNow:
	case err := <-wdone:
		t.Fatalf("the second call did not take the kept lease: %v", err)
	}
	if inFn.Load() == 0 {
		rdbQ.Close() // Close returned and no call of Q is in its function
	}
	close(proceed)
	werr := <-wdone
	if n := enteredAfterClose.Load(); n != 0 {
		t.Errorf("the call entered its function after Close returned (Do: %v)", werr)
	}
	start := time.Now()
	err = xc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second}, nop)
	if took := time.Since(start); err != nil || took > 1500*time.Millisecond {
		t.Errorf("Q's call returned %v and Q's go-redis client was closed (no call in its function when Close returned); another Client's call got the key after %v (%v)", werr, took.Round(time.Millisecond), err)
	}
}

// Round 34: Close's doc says calls running their function keep their
// leases (renewed) until they return. Close also closes the clients the
// Client made for ASK targets missing from the slot map (askNode), and
// askNode makes none once closed: with WithReplicas, a call still in its
// function during a migration onto a master just added must keep
// renewing there after Close, as without Close
// (TestAdversary33_ReplicatedRenewalsDuringMigrationToNewMaster).
func TestAdversary34_CloseDuringMigrationToNewMasterKeepsRunningCall(t *testing.T) {
	cl, c, rec, added := clusterGrown(t)
	key := "adv34-newmaster-close"
	slot := leasetest.Slot(lockKey(key))
	const ttl = 600 * time.Millisecond
	// c.Close once the keys moved: this call is in its function, so it
	// keeps its lease.
	err := c.Do(context.Background(), key, lease.Spec{TTL: ttl, Deadline: 10 * time.Second}, migrateWhileHeld(t, cl, slot, added, 3*ttl, func() { c.Close() }))
	if err != nil {
		logFirstRenewFailure(t, rec)
		t.Fatalf("a call in its function when Close came, across a migration of 3 TTLs onto a new master: %v", err)
	}
}

// Round 34: release.lua's pruning of dead queue entries with live ones
// interleaved: 40 dead, a live L1, 40 dead, a live L2, then 300 dead and
// a live L3 (entries written straight into the queue, as processes that
// died leave them; one dead entry has lost its expiry field). Each release
// hands the key to the next live entry in order (L1, then L2, then L3)
// and keeps the later live entries queued.
func TestAdversary34_ReleasePrunesDeadAroundLiveEntries(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, _ := newClient(t, rdb)
	ctx := context.Background()
	key := "adv34-prune"
	q, x := "lease:{"+key+"}:q", "lease:{"+key+"}:x"
	nowMs := time.Now().UnixMilli()
	score := 0.0
	ids := map[string]string{"L1": strings.Repeat("a", 32), "L2": strings.Repeat("b", 32), "L3": strings.Repeat("c", 32)}
	add := func(id string, live bool) {
		if live {
			id = ids[id]
		}
		m := id + "|20000|0|20000|"
		exp := nowMs - 60000
		if live {
			exp = nowMs + 60000
		}
		score++
		rdb.ZAdd(ctx, q, redis.Z{Score: score, Member: m})
		if id != "dead-noexp" {
			rdb.HSet(ctx, x, m, fmt.Sprint(exp, ":1"))
		}
	}
	for i := 0; i < 40; i++ {
		add(fmt.Sprint("dead-a", i), false)
	}
	add("L1", true)
	add("dead-noexp", false)
	for i := 0; i < 40; i++ {
		add(fmt.Sprint("dead-b", i), false)
	}
	add("L2", true)
	for i := 0; i < 300; i++ {
		add(fmt.Sprint("dead-c", i), false)
	}
	add("L3", true)
	rdb.Expire(ctx, q, time.Minute)
	rdb.Expire(ctx, x, time.Minute)
	for _, want := range []string{"L1", "L2", "L3"} {
		// The current holder (the first time: a call of c) releases.
		if want == "L1" {
			if err := c.Do(ctx, key, spec(20*time.Second, 30*time.Second), nop); err != nil {
				t.Fatal(err)
			}
		} else {
			prev := map[string]string{"L2": "L1", "L3": "L2"}[want]
			if _, err := c.ForceRelease(ctx, key, ids[prev]); err != nil {
				t.Fatalf("ForceRelease(%s): %v", prev, err)
			}
		}
		v, err := rdb.Get(ctx, lockKey(key)).Result()
		if err != nil || !strings.HasPrefix(v, ids[want]+":") {
			members, _ := rdb.ZRange(ctx, q, 0, 3).Result()
			t.Fatalf("after the release the key holds %q (%v), want %s's grant; queue head %v", v, err, want, members)
		}
	}
}

// Round 34: Close at random moments around a handover to one of three
// waiters of a Client Q, its go-redis client closed right after Close when
// no call of Q is in its function: whatever the interleaving, another
// Client's waiter gets the key within a second and a half (nothing of Q's
// holds it for its 20s TTL), and never while a call of Q is in its
// function (no two holders).
func TestAdversary34_CloseRacingHandovers(t *testing.T) {
	srv := leasetest.StartRedis(t)
	hc, _ := adv23Client(t, srv.Addr())
	xc, _ := adv23Client(t, srv.Addr())
	ctx := context.Background()
	for round := 0; round < 8; round++ {
		key := fmt.Sprint("adv34-race-", round)
		rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		qc, err := lease.New(rdbQ)
		if err != nil {
			t.Fatal(err)
		}
		warm(t, qc, "warm")
		release := make(chan struct{})
		held := hold(t, hc, key, spec(20*time.Second, 30*time.Second), release)
		var inFn, overlap atomic.Int32
		var qdone sync.WaitGroup
		for range 3 {
			qdone.Add(1)
			go func() {
				defer qdone.Done()
				_ = qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Wait: 15 * time.Second}, func(context.Context) error {
					inFn.Add(1)
					defer inFn.Add(-1)
					time.Sleep(5 * time.Millisecond)
					return nil
				})
			}()
		}
		adv2WaitQueued(t, xc, key, 3)
		xin := queueBehind(t, xc, key, 3, func() {
			if inFn.Load() != 0 {
				overlap.Add(1)
			}
		})
		time.Sleep(30 * time.Millisecond)
		close(release)
		time.Sleep(time.Duration(round%4) * 150 * time.Microsecond)
		qc.Close()
		time.Sleep(2 * time.Millisecond)
		atOnce := inFn.Load() == 0
		if atOnce {
			rdbQ.Close()
		}
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
		qdone.Wait()
		if !atOnce {
			rdbQ.Close()
		}
		if after, info, ok := handedOn(xc, key, xin); ok {
			t.Logf("round %d: go-redis closed at once %v; the other Client's waiter entered %v later", round, atOnce, after.Round(time.Millisecond))
		} else {
			t.Errorf("round %d: 1.5s after Q's calls returned (go-redis closed at once: %v) the key is still held by %q for %v more", round, atOnce, info.Holder, info.TTL.Round(time.Second))
		}
		if overlap.Load() != 0 {
			t.Errorf("round %d: the other Client's waiter entered while a call of Q was in its function", round)
		}
	}
}
