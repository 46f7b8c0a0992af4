package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// A nested call that reuses the enclosing lease from a goroutine, given
// fn's context as it is (the common way: go worker(ctx)), is still running
// when the enclosing call returns. README, Reentrancy: "A nested call
// still running when the outer call returns is cancelled and reports
// ErrLost." README, Loss: "Loss cancels the function's context at once
// with a cause wrapping ErrLost". Do's doc: fn's context "is cancelled
// with a cause wrapping ErrLost when the lease ends".
//
// Since f58b745 the enclosing call cancels its context with errEnded (no
// ErrLost) and the nested fn's context, a child of it, inherits that cause
// synchronously; reenter's AfterFunc, which would translate it into
// errNestedEnded, runs later and finds the context already cancelled. The
// nested Do's error wraps ErrLost, but the nested fn, the only party that
// can stop the work, is told its lease merely "returned".
func TestAdversary64a_NestedOutlivingOuterFnCauseIsLoss(t *testing.T) {
	c, _ := sharedClient(t)
	for _, keep := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			key := uniqueKey(t)
			s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Keep: keep}
			entered := make(chan struct{})
			type result struct {
				cause, leaseErr, err error
			}
			nested := make(chan result, 1)
			err := c.Do(context.Background(), key, s, func(fctx context.Context) error {
				go func() {
					var r result
					r.err = c.Do(fctx, key, s, func(ictx context.Context) error {
						close(entered)
						select {
						case <-ictx.Done():
						case <-time.After(3 * time.Second):
						}
						r.cause = context.Cause(ictx)
						if l, ok := lease.FromContext(ictx); ok {
							r.leaseErr = l.Err()
						}
						return nil
					})
					nested <- r
				}()
				<-entered
				return nil
			})
			if err != nil {
				t.Fatalf("outer: %v", err)
			}
			r := <-nested
			t.Logf("nested Do: %v; nested fn's cause: %v; Lease.Err in nested fn: %v", r.err, r.cause, r.leaseErr)
			if !errors.Is(r.err, lease.ErrLost) {
				t.Errorf("nested Do = %v; want ErrLost", r.err)
			}
			if !errors.Is(r.cause, lease.ErrLost) {
				t.Errorf("the nested fn's context, ended because the enclosing call returned under it (Do reports ErrLost), has cause %v, not wrapping ErrLost", r.cause)
			}
		})
	}
}

// The key is deleted from outside while fn runs (no notice, no renewal
// due); fn returns in time and the release finds the key gone: Do returns
// ErrLost. errors.go, ErrLost: "the lease ended while the function ran
// (renewal refused, its validity ran out, the function returned after it,
// or the release found the key no longer ours). The function's context
// was cancelled with a cause wrapping this error". DESIGN.md, Loss: "When
// valid-until passes or the lease is found lost, fn's context is cancelled
// with cause ErrLost".
//
// run.go cancels fn's context with errEnded before the release (first:
// nested calls inherit it); the release's loss then finds the context
// already cancelled. Before f58b745 errEnded wrapped ErrLost, so the cause
// did; now work fn left running with its context (or a later Do on it)
// sees a clean return while Do reports a loss. With Keep, the first call
// of an episode asks Redis instead of releasing (keep.go verifyKept), with
// the same outcome.
func TestAdversary64a_ReleaseFoundLossFnCauseIsLoss(t *testing.T) {
	c, _ := sharedClient(t)
	admin := shared.Client(t)
	for _, keep := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			key := uniqueKey(t)
			s := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second, Keep: keep}
			var escaped context.Context
			err := c.Do(context.Background(), key, s, func(fctx context.Context) error {
				escaped = fctx
				return admin.Del(context.Background(), lockKey(key)).Err()
			})
			mustIs(t, err, lease.ErrLost)
			cause := context.Cause(escaped)
			other := c.Do(escaped, key+"-other", s, func(context.Context) error { return nil })
			t.Logf("Do: %v; fn's context cause: %v; a later Do on it: %v", err, cause, other)
			if !errors.Is(cause, lease.ErrLost) {
				t.Errorf("Do returned ErrLost (the release found the key gone), but fn's context was cancelled with cause %v, not wrapping ErrLost", cause)
			}
			// observer.go, Event.Lost: an ErrLost in Err without Lost means
			// "the call was not started because its context had ended with
			// a loss (its caller's)"; internal/leaseobs: "a call that never
			// started because its caller's lease was lost is Lost by its
			// error".
			if !errors.Is(other, lease.ErrLost) {
				t.Errorf("a Do on the context of a call that lost its lease is not attempted with %v, not wrapping ErrLost (its caller's loss)", other)
			}
		})
	}
}
