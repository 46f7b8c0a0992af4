package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Round 35: the Client's clock (commit 13ff1f3) and fn's deadlineCtx (a
// context of the runtime's own above fn's; taken out again in 0604ae4,
// after the two tests below failed on it).

// refChain is fn's context as it was made before the clock:
// context.WithDeadlineCause under context.WithCancelCause under the
// caller's context.
func refChain(parent context.Context, dl time.Time) (context.Context, func()) {
	lctx, cancelLost := context.WithCancelCause(parent)
	fctx, cancelDL := context.WithDeadlineCause(lctx, dl, lease.ErrDeadline)
	return fctx, func() { cancelLost(nil); cancelDL() }
}

// When the caller cancels its context, the context package cancels the
// contexts made from it before cancel returns: fn's context (and the
// contexts fn made from it) are done, with the caller's cause, as soon as
// the caller's cancel returns. fn's context was made so, under
// context.WithCancelCause of the caller's context. Under 13ff1f3's
// deadlineCtx the caller's cancellation reached it by context.AfterFunc,
// whose function runs on a goroutine of its own, so fn's context ended
// some time later.
func TestAdversary35_CallerCancelReachesFnContextBeforeCancelReturns(t *testing.T) {
	c, _ := sharedClient(t)
	why := errors.New("the request was abandoned")
	const rounds = 10
	lateFn, lateChild, lateRef := 0, 0, 0
	for range rounds {
		cctx, cancel := context.WithCancelCause(context.Background())
		// The reference: what WithCancelCause + WithDeadlineCause show.
		rctx, rcancel := context.WithCancelCause(context.Background())
		ref, refStop := refChain(rctx, time.Now().Add(time.Minute))
		var fnErr, fnCause, childErr error
		err := c.Do(cctx, uniqueKey(t), spec(2*time.Second, time.Minute), func(fctx context.Context) error {
			child, cc := context.WithCancel(fctx)
			defer cc()
			cancel(why)
			fnErr, fnCause, childErr = fctx.Err(), context.Cause(fctx), child.Err()
			<-fctx.Done()
			return nil
		})
		rcancel(why)
		if ref.Err() == nil || context.Cause(ref) != why {
			lateRef++
		}
		refStop()
		if err != nil {
			t.Fatalf("Do = %v", err)
		}
		if fnErr == nil || fnCause != why {
			lateFn++
		}
		if childErr == nil {
			lateChild++
		}
	}
	if lateRef != 0 {
		t.Fatalf("reference chain not done at once in %d of %d rounds (the test's premise)", lateRef, rounds)
	}
	if lateFn > 0 || lateChild > 0 {
		t.Errorf("right after the caller's cancel returned, fn's context was not done yet in %d of %d rounds, a context derived from it in %d (WithCancelCause under the caller's context: done in all)", lateFn, rounds, lateChild)
	}
}

// The same two levels down: a nested Do on another key inside fn. When the
// outermost caller cancels, each level's fn context used to be a
// WithCancelCause child of the level above (done before cancel returned);
// now each level adds a goroutine hop.
func TestAdversary35_CallerCancelReachesNestedFnContextAtOnce(t *testing.T) {
	c, _ := sharedClient(t)
	const rounds = 10
	late := 0
	for range rounds {
		outer, inner := uniqueKey(t), uniqueKey(t)
		cctx, cancel := context.WithCancelCause(context.Background())
		why := errors.New("outer ended")
		var innerErr error
		err := c.Do(cctx, outer, spec(2*time.Second, time.Minute), func(octx context.Context) error {
			return c.Do(octx, inner, spec(2*time.Second, time.Minute), func(ictx context.Context) error {
				cancel(why)
				innerErr = ictx.Err()
				<-ictx.Done()
				return nil
			})
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v", err)
		}
		if innerErr == nil {
			late++
		}
	}
	if late > 0 {
		t.Errorf("a nested call's fn context was not done when the outermost caller's cancel returned, in %d of %d rounds (WithCancelCause children: done at once)", late, rounds)
	}
}
