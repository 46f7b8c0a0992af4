package lease_test

// Adversarial tests, round 33 (adv33): contention between separate OS
// processes and separate Clients, with faults (SIGKILL, SIGSTOP, cut
// subscriptions, lost replies). Worker processes are this test binary
// started again, as in adversary12_test.go (adv12Run).
// Run: go test -count=1 -run 'TestAdversary33_' ./runtime/lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/proc"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A worker process with 40 goroutines waiting for a key is killed
// (SIGKILL: a service instance crashing with 40 requests queued), and
// their queue entries outlive their expiry at the queue's head (nothing
// takes them out but a release or their own calls). A waiter of another
// process queued behind them is alive. When the holder releases, the
// release must hand the key to that live waiter (the README: "a release
// hands the key to the first live waiter in the same script") — the
// release script looks at no more than 32 heads, finds them all dead and
// deletes the key instead, telling nobody: the live waiter (re-check 3s
// here) learns of the free key only at its next re-check, and meanwhile
// any newcomer may take it.
func TestAdversary33_MoreThan32DeadWaitersAtHead(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	key := "adv33-dead40"
	r := newAdv12Run(t, srv, key)
	release := make(chan struct{})
	held := hold(t, holder, key, spec(20*time.Second, 30*time.Second), release)
	var many []string
	for range 40 {
		many = append(many, "ttl=20s,wait=15s,deadline=20s,count=1")
	}
	dead := r.start("dead", "", 0, false, many...)
	adv2WaitQueued(t, op, key, 40)
	// The live waiter holds the key 2s once it enters, so that the holder
	// read after the release is its (it once finished and released before
	// a read that a loaded machine delayed, and the read found the key free).
	r.start("live", "", 3*time.Second, false, "ttl=20s,wait=15s,deadline=20s,fence=1,count=1,hold=2s")
	adv2WaitQueued(t, op, key, 41)
	members := adv12Members(t, srv.Client(t), key)
	liveID, _, _ := strings.Cut(members[len(members)-1], "|")
	dead.kill()
	// The dead waiters' entries expire 2 re-checks + 100ms (1.1s) after
	// their last acquire; the live waiter (re-check 3s) keeps its own.
	time.Sleep(1500 * time.Millisecond)
	if n := len(adv2Waiters(t, op, key)); n != 1 {
		t.Fatalf("%d live waiters after the kill, want 1", n)
	}
	released := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	h := adv2Holder(t, op, key)
	line := r.waitEvent("ENTER live", "", 6*time.Second)
	lag := nsTime(strings.Fields(line)[6]).Sub(released)
	t.Logf("after the release the key was held by %q (live waiter %q); it entered %v after the release", h, liveID, lag.Round(time.Millisecond))
	if h != liveID {
		t.Errorf("the release did not hand the key to the live waiter behind 40 dead entries: holder %q", h)
	}
	// Not told shows as its re-check (3s); 1s leaves a loaded machine
	// room for the message and the subprocess's entry.
	if lag > time.Second {
		t.Errorf("the live waiter entered %v after the release (its re-check is 3s): it was not told", lag.Round(time.Millisecond))
	}
	r.waitEvent("DONE live", "", 8*time.Second)
}

// A waiter process is paused (SIGSTOP) while queued, first in line, and
// the holder releases: its subscription is still connected, so the
// release hands it the key for its full TTL (1s), and a second waiter
// process gets the key only when that runs out (a paused waiter blocks
// the key as a paused holder does: a limit, measured here). The paused
// waiter is resumed while the second one works (1.5s): it must not enter
// on the handover's message, read late (its validity, counted from its
// last busy acquire, is over), but wait its turn; no overlap, tokens
// increase.
func TestAdversary33_PausedWaiterHandedTheKey(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	key := "adv33-paused"
	r := newAdv12Run(t, srv, key)
	release := make(chan struct{})
	held := hold(t, holder, key, lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Fence: true}, release)
	w := r.start("w", "", 0, false, "ttl=1s,wait=8s,deadline=10s,fence=1,count=1,hold=10ms")
	adv2WaitQueued(t, op, key, 1)
	r.start("x", "", 0, false, "ttl=1s,wait=8s,deadline=10s,fence=1,count=1,hold=1500ms")
	adv2WaitQueued(t, op, key, 2)
	time.Sleep(100 * time.Millisecond)
	members := adv12Members(t, srv.Client(t), key)
	wID, _, _ := strings.Cut(members[0], "|")
	// Stopped before the release: the signal alone may leave it running
	// long enough to enter on the handover's message.
	if err := proc.Stop(w.cmd.Process); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	released := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	info, err := op.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	xEnter := nsTime(strings.Fields(r.waitEvent("ENTER x", "", 5*time.Second))[6])
	time.Sleep(time.Until(released.Add(1200 * time.Millisecond)))
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	w.mu.Lock()
	w.stopped = append(w.stopped, [2]time.Time{stopped, time.Now()})
	w.mu.Unlock()
	r.waitEvent("DONE x", "", 5*time.Second)
	r.waitEvent("DONE w", "", 8*time.Second)
	v := r.check(func(*adv12Call) time.Duration { return 10 * time.Second }, 300*time.Millisecond, false)
	var wc, xc *adv12Call
	for _, c := range v.all {
		switch c.proc {
		case "w":
			wc = c
		case "x":
			xc = c
		}
	}
	t.Logf("release handed the key to %q (paused waiter %q) for %v; the next waiter entered %v after the release; w: %v: %s",
		info.Holder, wID, info.TTL.Round(time.Millisecond), xEnter.Sub(released).Round(time.Millisecond), wc, wc.msg)
	if v.overlaps+v.disorder+v.bad > 0 {
		t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
	}
	if !wc.enter.IsZero() && wc.enter.Before(xc.exit) {
		t.Errorf("the resumed waiter entered at %v, before the next holder's fn exited at %v", wc.enter, xc.exit)
	}
	if lag := xEnter.Sub(released); lag > time.Second+400*time.Millisecond {
		t.Errorf("the next waiter entered %v after the release: longer than the paused waiter's TTL (1s) + 400ms", lag.Round(time.Millisecond))
	}
}

// Fairness across processes: three worker processes with 12 goroutines
// each call one key back to back (fn 3ms, fenced and not, Wait 1.5s).
// One round of all 36 waiters takes about 36 × (3ms + a handover), well
// under Wait, so with the queue in arrival order no call may fail busy,
// and no process may be starved.
func TestAdversary33_ManyWaitersNoBusyAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	r := newAdv12Run(t, srv, "adv33-fair")
	for _, name := range []string{"a", "b", "c"} {
		var g []string
		for i := range 12 {
			g = append(g, fmt.Sprintf("ttl=2s,wait=1500ms,deadline=3s,hold=3ms,fence=%d", i%2))
		}
		r.start(name, "", 0, false, g...)
	}
	time.Sleep(5 * time.Second)
	r.stopAll()
	v := r.check(func(*adv12Call) time.Duration { return 3 * time.Second }, 300*time.Millisecond, false)
	var waits []time.Duration
	for _, c := range v.calls {
		waits = append(waits, c.enter.Sub(c.start))
	}
	p50, p99, mx, what := v.gapStats()
	t.Logf("%d entries (%v); outcomes %v; waits p50 %v p99 %v max %v; gaps p50 %v p99 %v max %v (%s)", len(v.calls), v.enteredByProc, v.classes,
		percentile(waits, 50).Round(time.Millisecond), percentile(waits, 99).Round(time.Millisecond), percentile(waits, 100).Round(time.Millisecond),
		p50.Round(time.Microsecond), p99.Round(time.Microsecond), mx.Round(time.Millisecond), what)
	if v.overlaps+v.disorder+v.bad > 0 {
		t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
	}
	if v.classes["busy"] > 0 || v.late+v.odd+v.lostUnpaused > 0 {
		t.Errorf("%d busy, %d late, %d odd, %d lost: a waiter with Wait long enough failed", v.classes["busy"], v.late, v.odd, v.lostUnpaused)
	}
}

// Three worker processes (4 goroutines each, fenced and not) contend on
// one key with Wait 3s while every subscription on the server is killed
// (CLIENT KILL TYPE pubsub) every 150ms for 5s: releases then hand the
// key over as short claims or to waiters whose message is lost, and
// waiters fall back to re-checks and reconnect. Checked: no overlap, no
// token disorder, no busy (a missed notification costs at most a re-check,
// far less than Wait), and no handover slower than a claim (re-check +
// 100ms) plus slack.
func TestAdversary33_PubSubKillStormWhileQueued(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	r := newAdv12Run(t, srv, "adv33-pskill")
	for _, name := range []string{"a", "b", "c"} {
		var g []string
		for i := range 4 {
			g = append(g, fmt.Sprintf("ttl=1s,wait=3s,deadline=4s,hold=5ms,fence=%d", i%2))
		}
		r.start(name, "", 0, false, g...)
	}
	time.Sleep(800 * time.Millisecond)
	end := time.Now().Add(5 * time.Second)
	kills := 0
	for time.Now().Before(end) {
		if n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result(); err == nil {
			kills += int(n)
		}
		time.Sleep(150 * time.Millisecond)
	}
	r.stopAll()
	v := r.check(func(*adv12Call) time.Duration { return 4 * time.Second }, 300*time.Millisecond, false)
	p50, p99, mx, what := v.gapStats()
	t.Logf("%d subscriptions killed; %d entries (%v); outcomes %v; gaps p50 %v p99 %v max %v (%s)", kills, len(v.calls), v.enteredByProc, v.classes,
		p50.Round(time.Microsecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond), what)
	if kills < 20 {
		t.Errorf("only %d subscriptions killed", kills)
	}
	if v.overlaps+v.disorder+v.bad > 0 {
		t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
	}
	if v.classes["busy"] > 0 || v.late+v.odd+v.lostUnpaused > 0 {
		t.Errorf("%d busy, %d late, %d odd, %d lost", v.classes["busy"], v.late, v.odd, v.lostUnpaused)
	}
	if mx > 600*time.Millisecond+300*time.Millisecond {
		t.Errorf("a handover took %v, beyond a claim (600ms) + 300ms (%s)", mx.Round(time.Millisecond), what)
	}
}

// Close of a Client (Q) at the moment a release in another Client hands
// one of Q's waiters the key: Q's subscription is connected, so the
// release sets the key for the waiter's full TTL (20s). Close ends the
// waiter with ErrClosed, and the service, with no call of Q in its
// function, closes Q's go-redis client right away, as Close's doc allows
// ("close the go-redis client only after [calls running their function]
// have"). The waiter's giving up (the release of its place, which passes
// a handover on) then finds the go-redis client closed, and the Client,
// closed, does not release the handover on its behalf either: the key
// stays held for the waiter's full TTL by a call that returned ErrClosed,
// while a waiter of a third Client waits. Wanted: that waiter enters
// within a second.
func TestAdversary33_CloseAtHandoverThenRedisClose(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	hc, _ := adv23Client(t, srv.Addr())
	xc, _ := adv23Client(t, srv.Addr())
	warm(t, hc, "warm")
	warm(t, xc, "warm")
	ctx := context.Background()
	closedRounds := 0
	for round := 0; round < 6; round++ {
		key := fmt.Sprint("adv33-cah-", round)
		// Q's traffic goes through a proxy that drops its subscription's
		// traffic just before the release (the server still counts the
		// subscriber, and sets the key for the waiter's full TTL): the
		// waiter does not hear of the handover before Close, as when
		// Close comes first.
		p := adv12StartProxy(t, srv.Addr())
		rdbQ := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		qc, err := lease.New(rdbQ)
		if err != nil {
			t.Fatal(err)
		}
		warm(t, qc, "warm")
		release := make(chan struct{})
		held := hold(t, hc, key, spec(20*time.Second, 30*time.Second), release)
		var inFn atomic.Int32
		wdone := make(chan error, 1)
		go func() {
			wdone <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Wait: 15 * time.Second}, func(context.Context) error {
				inFn.Add(1)
				defer inFn.Add(-1)
				time.Sleep(20 * time.Millisecond)
				return nil
			})
		}()
		adv2WaitQueued(t, xc, key, 1)
		xin := queueBehind(t, xc, key, 1, nil)
		time.Sleep(50 * time.Millisecond) // both sleep, their inboxes live
		p.setDrop(true, true)
		close(release)
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
		qc.Close()
		atOnce := inFn.Load() == 0
		if atOnce {
			rdbQ.Close() // no call of Q is in its function
		}
		werr := <-wdone
		if !atOnce {
			rdbQ.Close()
		}
		if errors.Is(werr, lease.ErrClosed) {
			closedRounds++
		}
		if after, info, ok := handedOn(xc, key, xin); ok {
			t.Logf("round %d: Q's waiter: %v; the third Client's waiter entered %v later", round, werr, after.Round(time.Millisecond))
		} else {
			t.Errorf("round %d: Q's waiter returned %v and Q's go-redis client was closed (no call in its function); 1.5s later the key is still held by %q for %v more, and the third Client's waiter waits",
				round, werr, info.Holder, info.TTL.Round(time.Second))
		}
	}
	if closedRounds == 0 {
		t.Fatal("no round ended Q's waiter with ErrClosed: nothing was tested")
	}
}

// Close must end a Watch (its doc: "When the Client is closed, Watch
// returns an error wrapping ErrClosed"; Close's: "Lead, Watch and
// WatchLeader end"). A Watch whose listing (SCAN) waits for a server that
// stopped answering (a blackholed connection) is not interrupted by its
// context's cancellation: go-redis bounds a read only by a deadline, and
// the listing has none, so Close leaves the Watch running until go-redis's
// ReadTimeout (3s by default; never with ReadTimeout -1, which New
// accepts).
func TestAdversary33_CloseEndsWatchWaitingOnSilentServer(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	for _, rt := range []time.Duration{0, -1} {
		p := leasetest.StartProxy(t, srv.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: rt})
		c, err := lease.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Watch(context.Background(), "*", 50*time.Millisecond, func(lease.Change) {}) }()
		time.Sleep(300 * time.Millisecond)
		p.Set(leasetest.Blackhole)
		time.Sleep(200 * time.Millisecond) // a listing now waits for its reply
		closed := time.Now()
		c.Close()
		select {
		case err := <-done:
			t.Logf("ReadTimeout %v: Watch returned %v after Close: %v", rt, time.Since(closed).Round(time.Millisecond), err)
			if !errors.Is(err, lease.ErrClosed) {
				t.Errorf("ReadTimeout %v: Watch returned %v, want ErrClosed", rt, err)
			}
			if d := time.Since(closed); d > time.Second+200*time.Millisecond {
				t.Errorf("ReadTimeout %v: Watch returned %v after Close", rt, d.Round(time.Millisecond))
			}
		case <-time.After(2 * time.Second):
			t.Errorf("ReadTimeout %v: Watch still running 2s after Close", rt)
			p.Close() // ends the read
			<-done
		}
		p.Close()
		rdb.Close()
	}
}

// queueBehind starts a call of xc on key that waits (TTL 2s, Wait 25s)
// and returns once it is queued behind the ahead entries already there.
// The channel gets the time the call entered its function, after onEnter
// (if set) ran there.
func queueBehind(t *testing.T, xc *lease.Client, key string, ahead int, onEnter func()) <-chan time.Time {
	t.Helper()
	xin := make(chan time.Time, 1)
	go func() {
		_ = xc.Do(context.Background(), key, lease.Spec{TTL: 2 * time.Second, Deadline: 30 * time.Second, Wait: 25 * time.Second}, func(context.Context) error {
			if onEnter != nil {
				onEnter()
			}
			xin <- time.Now()
			return nil
		})
	}()
	adv2WaitQueued(t, xc, key, ahead+1)
	return xin
}

// handedOn waits up to 1.5s for the call queueBehind started to enter,
// and says how long it took. When it does not enter, it returns the key's
// holder (ok false), after forcing it out so that the call ends.
func handedOn(xc *lease.Client, key string, xin <-chan time.Time) (after time.Duration, info lease.Info, ok bool) {
	from := time.Now()
	select {
	case at := <-xin:
		return at.Sub(from), lease.Info{}, true
	case <-time.After(1500 * time.Millisecond):
		ctx := context.Background()
		info, _ := xc.Inspect(ctx, key)
		_, _ = xc.ForceRelease(ctx, key, info.Holder)
		<-xin
		return 0, info, false
	}
}
