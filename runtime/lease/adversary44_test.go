package lease_test

// Round 44 (adversary): Spec and Option edge values at the top of
// time.Duration's range, where the runtime's millisecond conversions add to
// a duration before dividing and wrap around to negative numbers.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// FINDING. A HoldMin at the top of time.Duration's range (with a Deadline
// as long: "hold the key until the budget ends", Deadline math.MaxInt64 as
// "no deadline") is not honoured: the release deletes the key at once, and
// another caller is granted it immediately.
//
// README, Runtime semantics: "Release ... (with hold-min: the TTL is
// shortened to the remaining hold, and waiters are told)"; Spec.HoldMin:
// "keeps the lease at least this long after the grant, even when fn returns
// earlier"; DESIGN §4 Release: "With HoldMin, release shortens the TTL to
// the remaining hold instead of deleting". normalize accepts the spec
// (HoldMin <= Deadline).
//
// Root cause: release.go releaseWith rounds the hold up to whole
// milliseconds with int64((hold + time.Millisecond - 1) / time.Millisecond):
// hold is time.Until(holdUntil) (run.go), about math.MaxInt64 minus the few
// µs fn took, so hold + 999999ns wraps to a negative number; the script's
// "if not (hold > 0)" (release.lua) then takes the plain release path and
// DELetes the key.
func TestAdversary44_HugeHoldMinIsHonoured(t *testing.T) {
	c, rec := sharedClient(t)
	other, _ := sharedClient(t)
	admin := shared.Client(t)
	key := uniqueKey(t)
	// Fixed, the key would stay for centuries on the shared server.
	t.Cleanup(func() { admin.Del(context.Background(), lockKey(key)) })
	huge := time.Duration(math.MaxInt64)
	s := lease.Spec{TTL: time.Second, Deadline: huge, HoldMin: huge}
	if err := s.Check(); err != nil {
		t.Fatalf("spec refused up front (would be fine, but it is not): %v", err)
	}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	// Read as milliseconds: go-redis's PTTL multiplies them into a
	// time.Duration, which wraps negative for a TTL within a millisecond
	// of the longest Duration (PTTL 9223372036855 ms, 4 runs in 20).
	ms, _ := admin.Do(context.Background(), "PTTL", lockKey(key)).Int64()
	pttl := time.Duration(min(ms, int64(math.MaxInt64/time.Millisecond))) * time.Millisecond
	err := other.Do(context.Background(), key, spec(time.Second, 2*time.Second), func(context.Context) error { return nil })
	t.Logf("after the call: key's PTTL %v; released %d, unconfirmed %d; another caller: %v",
		pttl, rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed), err)
	if pttl <= 0 || !errors.Is(err, lease.ErrBusy) {
		t.Errorf("HoldMin %v (Deadline %v): after fn returned at once the key's PTTL is %v and another caller got %v; want the key held for the hold (PTTL > 0) and the other caller busy", huge, huge, pttl, err)
	}
}

// FINDING. WithRecheck(math.MaxInt64) — "rely on release notifications,
// never poll" — makes every waiter of the Client drop out of the key's
// queue a millisecond after it joins: a release then finds nobody queued,
// deletes the key without telling anyone, and the waiter sleeps until the
// end of its Wait (or the old holder's PTTL), although the key was free
// for almost all of that time.
//
// README, Waiting: "sleeps until a release notification ..., the holder's
// PTTL, or a re-check, whichever comes first ... Waiters queue in order
// across processes, in a short-lived queue next to the key: a release
// hands the key to the first live waiter in the same script and tells only
// that waiter's process". WithRecheck accepts any positive duration.
//
// Root cause: acquire.go acquireArgs computes the queue entry's life as
// ms(min(waitUntil.Sub(now)+50ms, 2*a.c.recheck+100ms)); 2*recheck wraps
// to a negative duration, the min picks it, and ms() clamps it to 1 (ms):
// the entry's expiry is 1ms after the acquire. (Any recheck above
// math.MaxInt64/2, about 146 years, does it; recheck+100ms in the claim
// wraps too for the largest values.)
func TestAdversary44_HugeRecheckKeepsQueuePlace(t *testing.T) {
	holder, _ := sharedClient(t)
	waiterC, _ := sharedClient(t, lease.WithRecheck(time.Duration(math.MaxInt64)))
	admin := shared.Client(t)
	key := uniqueKey(t)

	held := make(chan struct{})
	release := make(chan struct{})
	hdone := make(chan error, 1)
	go func() {
		hdone <- holder.Do(context.Background(), key, spec(10*time.Second, 20*time.Second), func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held

	var entered time.Time
	wdone := make(chan error, 1)
	go func() {
		wdone <- waiterC.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 4 * time.Second}, func(context.Context) error {
			entered = time.Now()
			return nil
		})
	}()
	// Let the waiter get its busy answer and join the queue.
	deadline := time.Now().Add(2 * time.Second)
	for admin.Exists(context.Background(), "lease:{"+key+"}:q").Val() == 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	queued := admin.ZCard(context.Background(), "lease:{"+key+"}:q").Val()
	released := time.Now()
	close(release)
	if err := <-hdone; err != nil {
		t.Fatalf("holder: %v", err)
	}
	err := <-wdone
	after := entered.Sub(released)
	t.Logf("queue length 300ms after the waiter joined: %d; waiter: %v, entered %v after the holder's release", queued, err, after)
	if err != nil || queued != 1 || after > time.Second {
		t.Errorf("WithRecheck(math.MaxInt64): waiter's queue entries 300ms after it joined: %d (want 1); waiter %v, entered %v after the release (want nil, within a notification's latency, well under 1s)", queued, err, after)
	}
}

// FINDING (same root cause as TestAdversary44_HugeRecheckKeepsQueuePlace,
// on the leader-election path). A standby candidate on a Client made with
// WithRecheck(math.MaxInt64) ("notifications only") is not handed the
// leadership when the leader stops gracefully: its place in the key's
// queue expired a millisecond after its campaign joined, so the leader's
// release finds nobody queued, deletes the key, and the standby only looks
// again when the old term's TTL (as its last busy answer read it) runs
// out.
//
// README, Leader election: "A graceful stop hands over at once. Cancelling
// the leader's context ends its function, and the release hands the lease
// to the candidate that waited longest and notifies it".
//
// Root cause: acquire.go acquireArgs, the queue entry's life
// ms(min(..., 2*a.c.recheck+100ms)): 2*recheck wraps negative, ms clamps
// it to 1.
func TestAdversary44_HugeRecheckLeaderHandover(t *testing.T) {
	leaderC, _ := sharedClient(t)
	standbyC, _ := sharedClient(t, lease.WithRecheck(time.Duration(math.MaxInt64)))
	admin := shared.Client(t)
	key := uniqueKey(t)
	spec := lease.LeadSpec{TTL: 3 * time.Second}

	lctx, stopLeader := context.WithCancel(context.Background())
	leading := make(chan struct{})
	ldone := make(chan error, 1)
	go func() {
		s := spec
		s.Owner = "leader"
		ldone <- leaderC.Lead(lctx, key, s, func(ctx context.Context) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	<-leading

	sctx, stopStandby := context.WithCancel(context.Background())
	defer stopStandby()
	entered := make(chan time.Time, 1)
	sdone := make(chan error, 1)
	go func() {
		s := spec
		s.Owner = "standby"
		sdone <- standbyC.Lead(sctx, key, s, func(ctx context.Context) error {
			select {
			case entered <- time.Now():
			default:
			}
			<-ctx.Done()
			return nil
		})
	}()
	deadline := time.Now().Add(2 * time.Second)
	for admin.Exists(context.Background(), "lease:{"+key+"}:q").Val() == 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	queued := admin.ZCard(context.Background(), "lease:{"+key+"}:q").Val()
	stopped := time.Now()
	stopLeader()
	if err := <-ldone; err != nil {
		t.Fatalf("leader's Lead: %v", err)
	}
	var took time.Duration
	select {
	case at := <-entered:
		took = at.Sub(stopped)
	case <-time.After(6 * time.Second):
		took = -1
	}
	stopStandby()
	<-sdone
	t.Logf("standby's queue entries 200ms after it joined: %d; standby led %v after the leader's graceful stop", queued, took)
	if queued != 1 || took < 0 || took > time.Second {
		t.Errorf("WithRecheck(math.MaxInt64): standby queued %d (want 1); took over %v after the leader's graceful stop (want at once: well under 1s; -1: not within 6s)", queued, took)
	}
}

// FINDING. Close while a call's acquire is on the wire to a healthy but
// not instant server (replies take 100ms: a remote Redis, a busy one),
// then — no call being in its function, as Close's doc allows — the
// service closes its go-redis client. The acquire was carried out: the key
// is granted to the closed Client's call, and nobody ever releases it: it
// stays held for the call's full TTL (20s here) by a call that returned
// without entering its function, while callers of another Client find it
// busy.
//
// README, Runtime semantics, Close: "Close makes later calls and current
// waiters return ErrClosed at once ... Before it returns, it sends the
// releases of the queue places of the waiters it ended ..., the leases of
// calls granted but not yet in their function ... and kept leases, each
// bounded by the release timeout, so the go-redis client may be closed once
// no call is in its function." The "one limit" that follows is about a
// server that has stopped answering (how long such a call takes to end),
// not about a key left held by a healthy server. Round 33 fixed the same
// outcome for a handover that raced Close
// (TestAdversary33_CloseAtHandoverThenRedisClose); an acquire in flight
// has the same effect and is not covered.
//
// Root cause: client.go Close releases only the calls listed in
// c.granting (granted, not yet entered) and the sleeping waiters
// hub.close abandons; a call between writing its acquire and reading the
// reply (acquire.go acquireOnce) is in neither list, and Close neither
// waits for it nor releases its identity. The call's own release
// (acquireOnce's a.unknown → releaseUnused, or run's release after
// gateAfterClose) runs after Close returned, on the closed go-redis
// client, and fails.
func TestAdversary44_CloseWithAcquireInFlightThenRedisClose(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	xc, _ := adv23Client(t, srv.Addr())
	ctx := context.Background()
	for _, fenced := range []bool{false, true} {
		key := fmt.Sprintf("adv44-close-inflight-%v", fenced)
		// Replies 500ms late, so that the Close below (30ms in) comes
		// before the acquire's reply even when this goroutine resumes
		// late (100ms left only 70ms for that on a loaded machine); a
		// release timeout of 2s, within which Close waits for the call.
		p, rdbQ, qc := proxiedClient(t, srv, "warm44", lease.WithReleaseTimeout(2*time.Second))
		p.SetDelay(500 * time.Millisecond)
		var entered atomic.Bool
		done := make(chan error, 1)
		go func() {
			done <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 10 * time.Second, Fence: fenced}, func(context.Context) error {
				entered.Store(true)
				return nil
			})
		}()
		time.Sleep(30 * time.Millisecond) // the acquire is written; its reply is on its way
		qc.Close()
		inFn := entered.Load()
		rdbQ.Close() // no call of qc is in its function
		qerr := <-done
		time.Sleep(200 * time.Millisecond) // anything the server still had to do for qc
		pttl := admin.PTTL(ctx, lockKey(key)).Val()
		xerr := xc.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}, func(context.Context) error { return nil })
		t.Logf("fenced=%v: closed Client's call: %v (in fn at Close: %v); key's PTTL after: %v; another Client's call: %v", fenced, qerr, inFn, pttl, xerr)
		if inFn {
			t.Fatalf("fenced=%v: the call was in its function at Close: not the case under test", fenced)
		}
		if pttl > 0 || xerr != nil {
			t.Errorf("fenced=%v: Close with the call's acquire in flight, then the go-redis client closed (no call in its function): the key stays held (PTTL %v) and another Client waiting 2s gets %v; want the key free", fenced, pttl.Round(time.Millisecond), xerr)
		}
		if pttl > 0 {
			_ = admin.Del(ctx, lockKey(key)).Err()
		}
	}
}

// FINDING. List (and leasectl list, and Watch, which filters "as List")
// applies its glob to the escaped Redis key, not to the user's key, as soon
// as a key or the pattern holds one of the bytes the key mapping escapes
// ('%', '{', '}'): '?' no longer matches such a byte (it is three bytes
// "%25"/"%7B"/"%7D" in Redis), and a '%', '{' or '}' inside [...] becomes
// the class of the three bytes of its escape, so List("[%]x") lists the
// lease on "2x" and not the one on "%x".
//
// inspect.go List's doc: "List returns a page of the leases whose keys
// match pattern, a Redis glob (as in SCAN MATCH: '*', '?', '[...]', '\'
// escapes) applied to the user's keys"; lockPattern's comment claims the
// escaped bytes "match literally too, also inside [...]". Key parts made by
// the generator (lease.KeyPart) escape ':' '{' '}' etc. to %XX, so keys
// holding '%' are what every generated wrapper with such a value makes.
//
// Root cause: inspect.go lockPattern escapes the pattern with keyEscaper
// (a plain string replacement "%"→"%25", "{"→"%7B", "}"→"%7D"), which is
// right for literal bytes outside a class, but turns a class member into
// three members and leaves '?' matching one byte of the escaped name.
func TestAdversary44_ListGlobOverEscapedBytes(t *testing.T) {
	prefix := fmt.Sprintf("adv44list-%d:", time.Now().UnixNano())
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	keys := []string{"a%b", "a{b", "a}b", "axb", "%x", "2x", "{y", "7y"}
	release := make(chan struct{})
	var holding []<-chan error
	for _, k := range keys {
		holding = append(holding, hold(t, c, k, spec(20*time.Second, 30*time.Second), release))
	}
	defer func() {
		close(release)
		for _, d := range holding {
			<-d
		}
	}()
	list := func(pattern string) []string { return adv45List(t, c, pattern) }
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"*", []string{"%x", "2x", "7y", "a%b", "axb", "a{b", "a}b", "{y"}},
		{"a?b", []string{"a%b", "axb", "a{b", "a}b"}},
		{"[%]x", []string{"%x"}},
		{"[{]y", []string{"{y"}},
		{"?x", []string{"%x", "2x"}},
	} {
		got := list(tc.pattern)
		t.Logf("List(%q) = %q", tc.pattern, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q; want %q (the glob applied to the user's keys)", tc.pattern, got, tc.want)
		}
	}
}

// FINDING (a second path of TestAdversary44_CloseWithAcquireInFlightThenRedisClose's
// gap). A call with Keep whose function has returned asks Redis whether
// the key is still its own before keeping it (the first call of a keep
// episode: keep.go keep → verifyKept, one round trip). Close during that
// round trip (replies take 100ms), then the go-redis client closed — no
// call is in its function — leaves the key held for its full TTL: the
// call, finding the Client closed, releases the lease itself after Close
// returned, on the closed go-redis client.
//
// README, Close: "... and kept leases, each bounded by the release
// timeout, so the go-redis client may be closed once no call is in its
// function." New: "Close the Client before rdb."
//
// Root cause: keep.go keep: the lease is registered in c.kept only after
// verifyKept answers; Close (client.go) releases what is registered (and
// c.granting, and abandoned waiters) and returns; keep then sees
// c.closed and returns false, and run's deferred release (run.go) is
// sent on a closed client.
func TestAdversary44_CloseDuringFirstKeepCheckThenRedisClose(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	xc, _ := adv23Client(t, srv.Addr())
	ctx := context.Background()
	key := "adv44-close-keepcheck"
	p, rdbQ, qc := proxiedClient(t, srv, "warm44")
	returned := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 10 * time.Second, Keep: time.Minute}, func(context.Context) error {
			p.SetDelay(100 * time.Millisecond) // the keep's check is slow
			close(returned)
			return nil
		})
	}()
	<-returned
	time.Sleep(30 * time.Millisecond) // fn has returned; the check is on its way
	qc.Close()
	rdbQ.Close() // no call of qc is in its function
	qerr := <-done
	time.Sleep(200 * time.Millisecond)
	pttl := admin.PTTL(ctx, lockKey(key)).Val()
	xerr := xc.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}, func(context.Context) error { return nil })
	t.Logf("kept call: %v; key's PTTL after Close and rdb.Close: %v; another Client's call: %v", qerr, pttl, xerr)
	if pttl > 0 || xerr != nil {
		t.Errorf("Close during the first keep's check, then the go-redis client closed (no call in its function): the key stays held (PTTL %v) and another Client waiting 2s gets %v; want the key free", pttl.Round(time.Millisecond), xerr)
	}
}

// blockRenewed is an Observer that holds up the renewer's report of a
// renewal of key until unblocked (an Observer busy elsewhere: a slow
// exporter, a log writer), and says when it started to.
type blockRenewed struct {
	key     string
	blocked chan struct{}
	unblock chan struct{}
	once    sync.Once
}

func (o *blockRenewed) Observe(e lease.Event) {
	if e.Kind == lease.EventRenewed && e.Key == o.key {
		o.once.Do(func() { close(o.blocked) })
		<-o.unblock
	}
}

// An Observer callback under way on another goroutine (a renewal's
// report, held up) does not end Close's wait for a call whose acquire is
// on its way: Close waits for that call as it would without the Observer,
// so the go-redis client closed after Close does not leave the call's
// grant held for its TTL (the first version of the fix counted every
// Observer callback, and returned at once).
func TestCloseWaitsForAcquireWhileObserverBusyElsewhere(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	p := leasetest.StartProxy(t, srv.Addr())
	rdbQ := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	obs := &blockRenewed{key: "adv44-busy-obs-b", blocked: make(chan struct{}), unblock: make(chan struct{})}
	qc, err := lease.New(rdbQ, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, qc, "warm44")
	endB := make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		bDone <- qc.Do(ctx, obs.key, lease.Spec{TTL: 600 * time.Millisecond, Deadline: 20 * time.Second}, func(context.Context) error {
			<-endB
			return nil
		})
	}()
	t.Cleanup(func() {
		close(obs.unblock)
		close(endB)
		<-bDone
		rdbQ.Close()
	})
	select {
	case <-obs.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal of the key held")
	}
	p.SetDelay(100 * time.Millisecond)
	keyA := "adv44-busy-obs-a"
	var entered atomic.Bool
	aDone := make(chan error, 1)
	go func() {
		aDone <- qc.Do(ctx, keyA, lease.Spec{TTL: 20 * time.Second, Deadline: 10 * time.Second}, func(context.Context) error {
			entered.Store(true)
			return nil
		})
	}()
	time.Sleep(30 * time.Millisecond) // A's acquire is written; its reply is on its way
	qc.Close()
	if entered.Load() {
		t.Fatal("A was in its function at Close: not the case under test")
	}
	rdbQ.Close()
	aerr := <-aDone
	time.Sleep(150 * time.Millisecond)
	if pttl := admin.PTTL(ctx, lockKey(keyA)).Val(); pttl > 0 {
		t.Errorf("A (%v): its key is held for %v after Close and the go-redis client's Close, with an Observer busy on another goroutine; want it released before Close returned", aerr, pttl.Round(time.Millisecond))
	}
}

// proxiedClient is a Client on a go-redis client of its own that reaches
// srv through a fault proxy, warmed up on key warmKey: the rig of the
// Close tests (rounds 44 to 48), which delay the proxy and close the
// go-redis client themselves.
func proxiedClient(t *testing.T, srv *leasetest.Server, warmKey string, opts ...lease.Option) (*leasetest.Proxy, *redis.Client, *lease.Client) {
	t.Helper()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := lease.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	warm(t, c, warmKey)
	return p, rdb, c
}
