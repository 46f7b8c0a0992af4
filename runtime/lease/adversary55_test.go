package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The call's budget runs out while the process is stopped: fn's own
// deadline (the caller's minus the release's reserve) and the caller's
// deadline both come due during the stop, and when it resumes either
// timer may run first. Whichever it is, the budget ran out: Do's error
// wraps ErrDeadline (and context.DeadlineExceeded), EventDeadlineExceeded
// is reported, and fn's context ends with ErrDeadline or, when the
// caller's timer ran first, with the caller's own cause. Before, the
// caller's timer winning made Do return fn's bare "context deadline
// exceeded", without ErrDeadline (seen under a loaded CI run).
//
// The test stops its own process (SIGSTOP from a shell it starts, SIGCONT
// 600ms later): sequential, like every test that pauses the process.
func TestAdversary55_BudgetEndsWhileProcessStopped(t *testing.T) {
	c, rec := sharedClient(t)
	const (
		callerDeadline = 600 * time.Millisecond // reserve 60ms: fn's deadline at 540ms
		stopAt         = "0.2"                  // s after the call starts: before fn's deadline
		stopFor        = "0.6"                  // resumes at 800ms: after both
	)
	winners := map[string]int{}
	for trial := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
		stop := exec.Command("sh", "-c", fmt.Sprintf("sleep %s; kill -STOP %d; sleep %s; kill -CONT %d", stopAt, os.Getpid(), stopFor, os.Getpid()))
		before := rec.Count(lease.EventDeadlineExceeded)
		var cause error
		err := c.Do(ctx, uniqueKey(t), lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(fctx context.Context) error {
			if err := stop.Start(); err != nil {
				t.Fatal(err)
			}
			<-fctx.Done()
			cause = context.Cause(fctx)
			return fctx.Err()
		})
		cancel()
		if werr := stop.Wait(); werr != nil {
			t.Fatalf("the stopping shell: %v", werr)
		}
		switch {
		case cause == lease.ErrDeadline:
			winners["fn's deadline"]++
		case cause == context.DeadlineExceeded:
			winners["the caller's deadline"]++
		default:
			t.Errorf("trial %d: fn's context ended with %v, want ErrDeadline or the caller's DeadlineExceeded", trial, cause)
		}
		if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("trial %d: Do = %v (fn's cause %v), want ErrDeadline and DeadlineExceeded", trial, err, cause)
		}
		if n := rec.Count(lease.EventDeadlineExceeded) - before; n != 1 {
			t.Errorf("trial %d: %d EventDeadlineExceeded, want 1", trial, n)
		}
	}
	t.Logf("first to end fn's context after the stop: %v", winners)
}

// A nested call under a caller's context whose deadline is the nested
// call's budget: the nested fn's deadline and the caller's are the same
// instant, so either timer may end the nested fn's context. Either way
// the budget ran out: the nested Do wraps ErrDeadline.
func TestAdversary55_NestedBudgetIsCallersDeadline(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	winners := map[string]int{}
	err := c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(ctx context.Context) error {
		for trial := range 20 {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			var cause error
			err := c.Do(cctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(fctx context.Context) error {
				<-fctx.Done()
				cause = context.Cause(fctx)
				return fctx.Err()
			})
			cancel()
			if cause == lease.ErrDeadline {
				winners["the nested deadline"]++
			} else {
				winners[fmt.Sprint(cause)]++
			}
			if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("trial %d: nested Do = %v (fn's cause %v), want ErrDeadline and DeadlineExceeded", trial, err, cause)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first to end the nested fn's context: %v", winners)
}

// adv55Cause is a cause whose type cannot be compared with == (a slice,
// as go/scanner.ErrorList): deciding whether the caller's deadline ended
// fn's context must not compare causes (a panic in Do's epilogue left the
// lease held for its TTL; found by an adversary review).
type adv55Cause []string

func (c adv55Cause) Error() string { return "request budget: " + c[0] }

// The caller's deadline carries a cause of an uncomparable type: nested
// calls (either timer first) and a call whose context hides its deadline
// neither panic nor leave the key held, and report the budget.
func TestAdversary55_UncomparableDeadlineCause(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(ctx context.Context) error {
		for trial := range 20 {
			cctx, cancel := context.WithTimeoutCause(ctx, 20*time.Millisecond, adv55Cause{"nested"})
			err := adv55Recover(func() error {
				return c.Do(cctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(fctx context.Context) error {
					<-fctx.Done()
					return fctx.Err()
				})
			})
			cancel()
			if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("trial %d: nested Do = %v, want ErrDeadline and DeadlineExceeded", trial, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The caller's context hides its 50ms deadline: fn's own (the 200ms
	// budget less the reserve) is later, and fn returns after both. fn's
	// context was ended by the caller's deadline, not the budget the call
	// knew of: fn's error, and no panic, and the key released.
	inner, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, adv55Cause{"hidden"})
	defer cancel()
	key2 := uniqueKey(t)
	err = adv55Recover(func() error {
		return c.Do(adv55HideDeadline{inner}, key2, lease.Spec{TTL: 5 * time.Second, Deadline: 200 * time.Millisecond}, func(fctx context.Context) error {
			<-fctx.Done()
			time.Sleep(250 * time.Millisecond)
			return fctx.Err()
		})
	})
	if err == nil || strings.Contains(err.Error(), "panicked") {
		t.Errorf("Do under a hidden deadline = %v", err)
	}
	if n := shared.Client(t).Exists(context.Background(), lockKey(key2)).Val(); n != 0 {
		t.Errorf("the key is held after the call returned (%v)", err)
	}
}

// adv55Recover runs do, turning a panic into an error saying so.
func adv55Recover(do func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return do()
}

type adv55HideDeadline struct{ context.Context }

func (adv55HideDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// A caller that cancels with a cause wrapping ErrDeadline (errgroup
// cancels with a sibling's error, here a sibling Do's ErrDeadline) long
// before the call's budget: not the call's deadline (found by an
// adversary review).
func TestAdversary55_CancelCauseWrappingErrDeadline(t *testing.T) {
	c, rec := sharedClient(t)
	sibling := c.Do(context.Background(), uniqueKey(t), lease.Spec{TTL: time.Second, Deadline: 50 * time.Millisecond}, func(f context.Context) error {
		<-f.Done()
		return f.Err()
	})
	mustIs(t, sibling, lease.ErrDeadline)
	before := rec.Count(lease.EventDeadlineExceeded)
	ctx, cancel := context.WithCancelCause(context.Background())
	err := c.Do(ctx, uniqueKey(t), lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(f context.Context) error {
		cancel(sibling)
		<-f.Done()
		return f.Err()
	})
	if errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.Canceled) {
		t.Errorf("a caller's cancel (cause %v) reported as: %v", sibling, err)
	}
	if n := rec.Count(lease.EventDeadlineExceeded) - before; n != 0 {
		t.Errorf("%d EventDeadlineExceeded for a cancelled call", n)
	}
}

// A call with Keep whose budget is all but spent when it takes the kept
// lease: the check of the kept lease (asked of Redis while the Client's
// subscription is not yet trusted) uses up the budget, and the release of
// the lease it then gives up must still go out, in the background within
// the release timeout: bounded by the spent budget it failed, the key
// stayed held for its TTL and the Client's own next call was busy for 5s
// (found by an adversary review, in about half of its runs).
func TestAdversary55_KeptReleaseWithSpentBudget(t *testing.T) {
	s := lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Keep: 2 * time.Second}
	for trial := range 10 {
		c, _ := newClient(t, shared.Client(t))
		key := uniqueKey(t)
		if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+10*trial)*time.Microsecond)
		short := c.Do(ctx, key, s, func(context.Context) error { return nil })
		cancel()
		nctx, ncancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := c.Do(nctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 3 * time.Second, Wait: time.Second}, func(context.Context) error { return nil })
		ncancel()
		if err != nil {
			t.Errorf("trial %d: after a call with a spent budget (%v), the next call: %v", trial, short, err)
		}
		c.Close()
	}
}

// A nested call on a context that drops the enclosing call's
// cancellation (context.WithoutCancel), its own budget a minute: a
// caller's cancel whose cause wraps ErrDeadline (errgroup's, with a
// sibling's error) reaches it through the enclosing lease and is a
// cancel; the enclosing call's deadline reaching it is the nested call's
// deadline, named as the caller's (found by an adversary review).
func TestAdversary55_NestedOnDetachedContext(t *testing.T) {
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	sibling := fmt.Errorf("sibling: %w", lease.ErrDeadline)
	octx, ocancel := context.WithCancelCause(context.Background())
	defer ocancel(nil)
	before := rec.Count(lease.EventDeadlineExceeded)
	var nerr error
	_ = c.Do(octx, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(ctx context.Context) error {
		nerr = c.Do(context.WithoutCancel(ctx), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(f context.Context) error {
			ocancel(sibling)
			<-f.Done()
			return f.Err()
		})
		return ctx.Err()
	})
	if errors.Is(nerr, lease.ErrDeadline) || rec.Count(lease.EventDeadlineExceeded) != before {
		t.Errorf("nested call under a cancel with a sibling's ErrDeadline: %v", nerr)
	}
	key2 := uniqueKey(t)
	err := c.Do(context.Background(), key2, lease.Spec{TTL: 5 * time.Second, Deadline: 300 * time.Millisecond}, func(ctx context.Context) error {
		nerr = c.Do(context.WithoutCancel(ctx), key2, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(f context.Context) error {
			<-f.Done()
			return f.Err()
		})
		return nil
	})
	mustIs(t, err, lease.ErrDeadline)
	if !errors.Is(nerr, lease.ErrDeadline) || !strings.Contains(nerr.Error(), "the caller's deadline") {
		t.Errorf("nested call ended by the enclosing call's 300ms budget: %v", nerr)
	}
}

// adv55Kept makes c keep a lease on key (Keep 2s) and waits until its
// subscription is trusted, so that a reuse asks Redis nothing.
func adv55Kept(t *testing.T, c *lease.Client, key string) {
	t.Helper()
	if err := c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Keep: 2 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
}

// Short calls (a 40ms budget, far more than a release needs) that reuse
// or give up a kept lease release it on their own path, as before the
// spent-budget change: a loss the release finds is the call's ErrLost,
// and the same Client's next call finds the key free, not held by its own
// old lease (found by an adversary review of that change).
func TestAdversary55_ShortCallsReleaseKeptOnTheirPath(t *testing.T) {
	admin := shared.Client(t)
	ctx := context.Background()
	t.Run("loss found at release", func(t *testing.T) {
		c, rec := newClient(t, shared.Client(t))
		key := uniqueKey(t)
		adv55Kept(t, c, key)
		admin.Del(ctx, lockKey(key))
		err := c.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 40 * time.Millisecond}, func(context.Context) error { return nil })
		mustIs(t, err, lease.ErrLost)
		if rec.Count(lease.EventLost) == 0 {
			t.Error("no EventLost")
		}
	})
	for _, tc := range []struct {
		name string
		s    lease.Spec
	}{
		{"reused, then released", lease.Spec{TTL: 5 * time.Second, Deadline: 40 * time.Millisecond}},
		{"unsuitable, given up", lease.Spec{TTL: 4 * time.Second, Deadline: 45 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newClient(t, shared.Client(t))
			for trial := range 10 {
				key := uniqueKey(t)
				adv55Kept(t, c, key)
				_ = c.Do(ctx, key, tc.s, func(context.Context) error { return nil })
				if err := c.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
					t.Errorf("trial %d: the next call of the same Client: %v", trial, err)
				}
			}
		})
	}
}

// A call with Keep and a 40ms budget reuses a kept lease and is in fn when
// Close runs; fn returns, Do returns, and the service closes its go-redis
// client, as Close's documentation says: the key must not be left held
// for its TTL (found by an adversary review).
func TestAdversary55_CloseWhileKeptCallRunsThenRedisClose(t *testing.T) {
	admin := shared.Client(t)
	for trial := range 5 {
		rdb := shared.Client(t)
		c, _ := newClient(t, rdb)
		key := uniqueKey(t)
		adv55Kept(t, c, key)
		in, out, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 40 * time.Millisecond, Keep: 2 * time.Second},
				func(context.Context) error { close(in); <-out; return nil })
		}()
		<-in
		c.Close()
		close(out)
		<-done
		rdb.Close()
		time.Sleep(20 * time.Millisecond)
		if n := admin.Exists(context.Background(), lockKey(key)).Val(); n != 0 {
			t.Errorf("trial %d: the key is held (PTTL %v) after Close, the call's return and the go-redis client's Close", trial, admin.PTTL(context.Background(), lockKey(key)).Val())
		}
	}
}

// A nested call on a detached context started after the enclosing call's
// budget ended (the enclosing fn overruns it, its lease still valid): not
// entered, ErrDeadline.
func TestAdversary55_NestedAfterEnclosingBudget(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	var nerr error
	_ = c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 100 * time.Millisecond}, func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		nerr = c.Do(context.WithoutCancel(ctx), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute}, func(context.Context) error {
			t.Error("a nested call entered after the enclosing budget ended")
			return nil
		})
		return nil
	})
	mustIs(t, nerr, lease.ErrDeadline)
}

// A call with Keep, a 10ms budget and a kept lease is in fn when Redis
// goes silent and Close runs: Do returns near its deadline (its release
// after Close within 20ms, as a call's own), not after the whole release
// timeout (found by an adversary review: 261ms).
func TestAdversary55_KeptCallAfterCloseKeepsItsDeadline(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c, _ := newClient(t, rdb)
	key := uniqueKey(t)
	adv55Kept(t, c, key)
	const budget = 10 * time.Millisecond
	in, out, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var start time.Time
	go func() {
		start = time.Now()
		done <- c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: budget, Keep: 2 * time.Second}, func(ctx context.Context) error {
			close(in)
			<-out
			<-ctx.Done()
			return nil
		})
	}()
	<-in
	p.Set(leasetest.Blackhole)
	c.Close()
	close(out)
	err := <-done
	end := time.Now()
	took := end.Sub(start)
	t.Logf("Do = %v after %v", err, took.Round(time.Millisecond))
	if late := took - st.lost(start.Add(budget), end); late > budget+100*time.Millisecond {
		t.Errorf("Do returned %v after its start (%v without stalls), budget %v: the kept lease's release after Close ran past it", took, late, budget)
	}
}
