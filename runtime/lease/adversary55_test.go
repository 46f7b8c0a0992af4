package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
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
