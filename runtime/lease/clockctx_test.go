package lease_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// fn's context and the contexts it derives, whoever ends them: the
// deadline (DeadlineExceeded, cause ErrDeadline), the caller (its cause),
// the caller's earlier deadline, a caller's context of its own type; and
// no goroutine per running call. (The call's other timed work runs on the
// Client's clock, issue #15; the deadline stays a standard context, see
// makeContexts.)
func TestFnContextDeadlineAndCancellation(t *testing.T) {
	c, _ := newClient(t, shared.Client(t))
	ctx := context.Background()

	t.Run("deadline", func(t *testing.T) {
		var dl time.Time
		var hasDL bool
		var fnErr, fnCause, childErr, childCause, timeoutErr error
		start := time.Now()
		err := c.Do(ctx, uniqueKey(t), spec(2*time.Second, 300*time.Millisecond), func(fctx context.Context) error {
			dl, hasDL = fctx.Deadline()
			child, cancel := context.WithCancelCause(fctx)
			defer cancel(nil)
			longer, cancel2 := context.WithTimeout(fctx, time.Hour)
			defer cancel2()
			<-fctx.Done()
			<-child.Done()
			<-longer.Done()
			fnErr, fnCause = fctx.Err(), context.Cause(fctx)
			childErr, childCause = child.Err(), context.Cause(child)
			timeoutErr = longer.Err()
			return nil
		})
		mustIs(t, err, lease.ErrDeadline)
		if !hasDL || dl.Before(start) || dl.After(start.Add(300*time.Millisecond)) {
			t.Errorf("fn's Deadline = %v, %v; want one within the 300ms budget from %v", dl, hasDL, start)
		}
		if fnErr != context.DeadlineExceeded || !errors.Is(fnCause, lease.ErrDeadline) {
			t.Errorf("fn's context: Err %v, Cause %v; want DeadlineExceeded, ErrDeadline", fnErr, fnCause)
		}
		if childErr != context.DeadlineExceeded || !errors.Is(childCause, lease.ErrDeadline) || timeoutErr != context.DeadlineExceeded {
			t.Errorf("derived contexts: Err %v, Cause %v, WithTimeout's Err %v; want DeadlineExceeded, ErrDeadline, DeadlineExceeded", childErr, childCause, timeoutErr)
		}
	})

	t.Run("caller cancels with a cause", func(t *testing.T) {
		why := errors.New("the request was abandoned")
		cctx, cancel := context.WithCancelCause(ctx)
		var fnErr, fnCause error
		err := c.Do(cctx, uniqueKey(t), spec(2*time.Second, time.Minute), func(fctx context.Context) error {
			cancel(why)
			<-fctx.Done()
			fnErr, fnCause = fctx.Err(), context.Cause(fctx)
			return fctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v; want fn's context.Canceled", err)
		}
		if fnErr != context.Canceled || fnCause != why {
			t.Errorf("fn's context: Err %v, Cause %v; want Canceled, %v", fnErr, fnCause, why)
		}
	})

	t.Run("caller's earlier deadline", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		var fnErr error
		start := time.Now()
		err := c.Do(cctx, uniqueKey(t), spec(2*time.Second, time.Minute), func(fctx context.Context) error {
			<-fctx.Done()
			fnErr = fctx.Err()
			return nil
		})
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Do took %v under a 300ms caller deadline", took)
		}
		mustIs(t, err, lease.ErrDeadline)
		if fnErr != context.DeadlineExceeded {
			t.Errorf("fn's context: Err %v; want DeadlineExceeded", fnErr)
		}
	})

	t.Run("caller's own context type", func(t *testing.T) {
		cctx := &ownCtx{Context: ctx, done: make(chan struct{})}
		var fnErr error
		err := c.Do(cctx, uniqueKey(t), spec(2*time.Second, time.Minute), func(fctx context.Context) error {
			close(cctx.done)
			<-fctx.Done()
			fnErr = fctx.Err()
			return nil
		})
		if err != nil || fnErr != context.Canceled {
			t.Errorf("Do = %v, fn's Err %v; want nil, Canceled", err, fnErr)
		}
	})

	// The context package attaches fn's context to its parents without a
	// goroutine: none per running call.
	t.Run("no goroutine per call", func(t *testing.T) {
		const n = 40
		before := runtime.NumGoroutine()
		var in, out sync.WaitGroup
		release := make(chan struct{})
		in.Add(n)
		for range n {
			out.Add(1)
			go func() {
				defer out.Done()
				if err := c.Do(ctx, uniqueKey(t), spec(10*time.Second, time.Minute), func(context.Context) error {
					in.Done()
					<-release
					return nil
				}); err != nil {
					t.Error(err)
				}
			}()
		}
		in.Wait()
		during := runtime.NumGoroutine() - before
		close(release)
		out.Wait()
		if during > n+10 {
			t.Errorf("%d goroutines more while %d calls ran in fn; want about one per call (the caller's)", during, n)
		}
	})
}

// ownCtx is a caller's context of its own type, cancelled by closing done.
type ownCtx struct {
	context.Context
	done chan struct{}
}

func (c *ownCtx) Done() <-chan struct{} { return c.done }
func (c *ownCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}
