package lease_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

func TestDoRunsFnWithLeaseAndReleases(t *testing.T) {
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	calls := 0
	err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(ctx context.Context) error {
		calls++
		l, ok := lease.FromContext(ctx)
		if !ok || l.Key() != key {
			t.Errorf("FromContext = %v, %v; want the lease on %q", l, ok, key)
		}
		if r := l.Remaining(); r < 4*time.Second || r > 5*time.Second {
			t.Errorf("Remaining = %v, want about 5s", r)
		}
		if n, _ := rdb.Exists(ctx, lockKey(key)).Result(); n != 1 {
			t.Errorf("lock key missing while held")
		}
		if _, ok := lease.TokenFrom(ctx); ok {
			t.Errorf("TokenFrom reported a token without fence")
		}
		return nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("Do = %v, calls %d; want nil, 1", err, calls)
	}
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Fatalf("lock key still present after Do")
	}
	if rec.Count(lease.EventAcquired) != 1 || rec.Count(lease.EventReleased) != 1 || rec.Count(lease.EventDone) != 1 {
		t.Fatalf("events %+v", rec.Events())
	}
}

func TestFnErrorPassesThrough(t *testing.T) {
	c, _ := sharedClient(t)
	want := errors.New("charge declined")
	err := c.Do(context.Background(), uniqueKey(t), spec(time.Second, 5*time.Second), func(context.Context) error { return want })
	if err != want {
		t.Fatalf("Do = %v, want fn's own error unchanged", err)
	}
}

func TestBusyIsKnownAndNotUnknown(t *testing.T) {
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	release := make(chan struct{})
	done := hold(t, c, key, spec(5*time.Second, 10*time.Second), release)
	defer func() { close(release); <-done }()

	called := false
	err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error { called = true; return nil })
	mustIs(t, err, lease.ErrBusy)
	mustNotIs(t, err, lease.ErrUnknown, context.DeadlineExceeded)
	if called {
		t.Fatal("fn called on a busy lease")
	}
	if rec.Count(lease.EventBusy) != 1 {
		t.Fatalf("busy events = %d, want 1", rec.Count(lease.EventBusy))
	}

	s := spec(5*time.Second, 10*time.Second)
	s.Busy = lease.BusySkip
	if err := c.Do(context.Background(), key, s, func(context.Context) error { called = true; return nil }); err != nil || called {
		t.Fatalf("BusySkip: Do = %v, called %v; want nil, false", err, called)
	}
}

func TestWaiterWakesOnReleaseNotification(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	release := make(chan struct{})
	// A 20s TTL: a waiter that slept on the holder's PTTL would wait ~20s.
	done := hold(t, c, key, spec(20*time.Second, 30*time.Second), release)
	time.AfterFunc(150*time.Millisecond, func() { close(release) })

	s := spec(20*time.Second, 30*time.Second)
	s.Wait = 10 * time.Second
	start := time.Now()
	err := c.Do(context.Background(), key, s, func(context.Context) error { return nil })
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waiter took %v: not woken by the release notification", waited)
	}
	if err := <-done; err != nil {
		t.Fatalf("holder: %v", err)
	}
}

func TestWaiterWakesWhenHolderExpires(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	// A foreign holder that will never publish a release.
	if err := rdb.Set(context.Background(), lockKey(key), "someone-else:0", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	s := spec(5*time.Second, 10*time.Second)
	s.Wait = 5 * time.Second
	start := time.Now()
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond || waited > 3*time.Second {
		t.Fatalf("waited %v; want about the holder's 300ms PTTL", waited)
	}
}

func TestWaitRunsOut(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	release := make(chan struct{})
	done := hold(t, c, key, spec(5*time.Second, 10*time.Second), release)
	defer func() { close(release); <-done }()

	s := spec(5*time.Second, 10*time.Second)
	s.Wait = 200 * time.Millisecond
	err := c.Do(context.Background(), key, s, func(context.Context) error { t.Error("entered"); return nil })
	mustIs(t, err, lease.ErrBusy)
	mustNotIs(t, err, lease.ErrUnknown, context.DeadlineExceeded)

	// The caller's deadline leaves no room to wait (the work needs
	// MinValidity of it): busy at once, saying why, and no deadline passed.
	s.Wait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	st := watchStalls(t, 5*time.Millisecond)
	start := time.Now()
	err = c.Do(ctx, key, s, func(context.Context) error { t.Error("entered"); return nil })
	end := time.Now()
	mustIs(t, err, lease.ErrBusy)
	mustNotIs(t, err, context.DeadlineExceeded, lease.ErrDeadline)
	if !strings.Contains(err.Error(), "to leave MinValidity") {
		t.Fatalf("error %q does not say that waiting was capped to leave MinValidity", err)
	}
	// The 300ms budget is shorter than MinValidity: not "waiting stops
	// 2.53s before the 300ms budget ends". (The budget is what was left of
	// the context's 300ms when Do started: 299ms once the machine was
	// slow.)
	if !regexp.MustCompile(`the (29\d|300)ms budget leaves no time to wait`).MatchString(err.Error()) {
		t.Fatalf("error %q does not say that the budget leaves no time to wait", err)
	}
	// Its durations read as durations, not as "19.988556ms".
	if d := regexp.MustCompile(`\d\.\d{4,}(ns|µs|ms|s|m|h)`).FindString(err.Error()); d != "" {
		t.Fatalf("error %q shows the unrounded duration %s", err, d)
	}
	if el, lost := end.Sub(start), st.lost(start, end); el-lost > 150*time.Millisecond {
		t.Fatalf("returned after %v (the process stalled for %v of it), want at once", el, lost)
	}
}

func TestCallerCancelWhileWaiting(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	release := make(chan struct{})
	done := hold(t, c, key, spec(5*time.Second, 10*time.Second), release)
	defer func() { close(release); <-done }()

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	s := spec(5*time.Second, 10*time.Second)
	s.Wait = 5 * time.Second
	err := c.Do(ctx, key, s, func(context.Context) error { t.Error("entered"); return nil })
	mustIs(t, err, context.Canceled)
	mustNotIs(t, err, lease.ErrUnknown)
}

func TestReleaseSurvivesCallerCancel(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := c.Do(ctx, key, spec(5*time.Second, 10*time.Second), func(context.Context) error {
		cancel() // the request is abandoned while the work finishes
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil (fn returned nil)", err)
	}
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Fatal("lease not released after the caller's context was cancelled")
	}
}

func TestRenewalKeepsLeaseWhileWorking(t *testing.T) {
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	// TTL 600ms (renewed every 200ms): a 300ms TTL was lost to a stall of
	// about 200ms of the whole process on a loaded machine.
	s := spec(600*time.Millisecond, 10*time.Second)
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		select {
		case <-time.After(2 * time.Second): // more than three TTLs
		case <-ctx.Done():
			t.Errorf("work cancelled: %v", context.Cause(ctx))
		}
		if n, _ := rdb.Exists(ctx, lockKey(key)).Result(); n != 1 {
			t.Error("lease expired despite renewal")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if n := rec.Count(lease.EventRenewed); n < 2 {
		t.Fatalf("renewed %d times in 2s with a 600ms TTL; want >= 2", n)
	}
}

func TestLossCancelsWorkAndIsReported(t *testing.T) {
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	s := spec(600*time.Millisecond, 10*time.Second)
	var cause error
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		// Someone deletes our lease and another owner takes the key.
		rdb.Del(ctx, lockKey(key))
		rdb.Set(ctx, lockKey(key), "other-owner:0", 5*time.Second)
		l, _ := lease.FromContext(ctx)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(3 * time.Second):
			t.Error("work not cancelled after the lease was lost")
		}
		select {
		case <-l.Lost():
		default:
			t.Error("Lost() not closed")
		}
		return nil // the work claims success
	})
	mustIs(t, err, lease.ErrLost)
	if !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("fn's context cause = %v, want ErrLost", cause)
	}
	if v, _ := rdb.Get(context.Background(), lockKey(key)).Result(); v != "other-owner:0" {
		t.Fatalf("the other owner's lease was touched by our release: %q", v)
	}
	if rec.Count(lease.EventLost) != 1 || rec.Count(lease.EventRenewFailed) != 1 {
		t.Fatalf("lost=%d renew_failed=%d, want 1 and 1", rec.Count(lease.EventLost), rec.Count(lease.EventRenewFailed))
	}
}

func TestTotalDeadlineCancelsWork(t *testing.T) {
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	s := spec(5*time.Second, 300*time.Millisecond)
	var cause error
	st := watchStalls(t, 5*time.Millisecond)
	start := time.Now()
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	end := time.Now()
	// Less what the process stalled past the deadline (-race on a loaded
	// machine), as the suite's other deadline bounds.
	el := end.Sub(start) - st.lost(start.Add(s.Deadline), end)
	mustIs(t, err, lease.ErrDeadline, context.DeadlineExceeded)
	if cause != lease.ErrDeadline {
		t.Fatalf("cause = %v, want ErrDeadline", cause)
	}
	if el > 300*time.Millisecond+150*time.Millisecond {
		t.Fatalf("Do returned after %v; budget 300ms", el)
	}
	if rec.Count(lease.EventDeadlineExceeded) != 1 {
		t.Fatal("deadline not observed")
	}
}

func TestHoldMinKeepsLeaseAfterReturn(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	s := spec(5*time.Second, 10*time.Second)
	s.HoldMin = 700 * time.Millisecond
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	pttl, _ := rdb.PTTL(context.Background(), lockKey(key)).Result()
	if pttl <= 300*time.Millisecond || pttl > 700*time.Millisecond {
		t.Fatalf("PTTL after return = %v, want the remaining hold (<= 700ms)", pttl)
	}
	err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil })
	mustIs(t, err, lease.ErrBusy)
}

func TestReentrantSameKeySameLease(t *testing.T) {
	c, rec := sharedClient(t)
	key, other := uniqueKey(t), uniqueKey(t)
	s := spec(5*time.Second, 10*time.Second)
	s.Fence = true
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		outer, _ := lease.TokenFrom(ctx)
		if outer == 0 {
			t.Error("no token in the outer lease")
		}
		if err := c.Do(ctx, key, s, func(ctx context.Context) error {
			if tok, _ := lease.TokenFrom(ctx); tok != outer {
				t.Errorf("nested token %d, want the outer %d", tok, outer)
			}
			return nil
		}); err != nil {
			t.Errorf("nested same key: %v", err)
		}
		return c.Do(ctx, other, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			l, _ := lease.FromContext(ctx)
			if tok == outer || l.Key() != other {
				t.Errorf("different key: token %d key %q; want a new lease", tok, l.Key())
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := rec.Count(lease.EventAcquired); n != 2 {
		t.Fatalf("acquired %d times, want 2 (outer + different key)", n)
	}
}

func TestNonFencedInnerKeepsOuterToken(t *testing.T) {
	c, _ := sharedClient(t)
	fenced := spec(5*time.Second, 10*time.Second)
	fenced.Fence = true
	err := c.Do(context.Background(), uniqueKey(t), fenced, func(ctx context.Context) error {
		outer, _ := lease.TokenFrom(ctx)
		return c.Do(ctx, uniqueKey(t), spec(5*time.Second, 10*time.Second), func(ctx context.Context) error {
			l, _ := lease.FromContext(ctx)
			if tok, ok := lease.TokenFrom(ctx); !ok || tok != outer || l.Token() != 0 {
				t.Errorf("TokenFrom = %d,%v, inner Token %d; want the outer fenced token %d", tok, ok, l.Token(), outer)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFencingTokensIncrease(t *testing.T) {
	c, _ := sharedClient(t, lease.WithCounterTTL(30*time.Millisecond))
	rdb := shared.Client(t)
	key := uniqueKey(t)
	s := spec(time.Second, 5*time.Second)
	s.Fence = true
	var last lease.Token
	take := func(what string) {
		t.Helper()
		var tok lease.Token
		if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			tok, _ = lease.TokenFrom(ctx)
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if tok <= last {
			t.Fatalf("%s: token %d not above %d", what, tok, last)
		}
		last = tok
	}
	for range 20 {
		take("back to back")
	}
	pttl, _ := rdb.PTTL(context.Background(), "lease:{"+key+"}:f").Result()
	if pttl <= 0 || pttl > 30*time.Millisecond {
		t.Fatalf("counter PTTL %v: want a bounded TTL (30ms here)", pttl)
	}
	time.Sleep(60 * time.Millisecond)
	take("after counter expiry")
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	take("after FLUSHALL")
}
