// Package adv33afterfunc: a function time.AfterFunc runs later is a
// goroutine too. One that uses the lease's context may run after the
// protected function returned, when the lease is released and the key
// may be another owner's: reported as an escape, unless the function
// waits for it (a channel it closes, received before every return) or
// says why with //lease:ignore escape.
package adv33afterfunc

import (
	"context"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func use(ctx context.Context) {}

// later schedules work under the lease's context and returns.
//
//lease:lock a1 deadline=5s
func (s *S) later(ctx context.Context, id string) error {
	time.AfterFunc(time.Second, func() { // want `time.AfterFunc's function uses later's lease context and may run after the lease ends`
		use(ctx)
	})
	return nil
}

// derived: a context derived from the lease's counts too.
//
//lease:lock a2 deadline=5s
func (s *S) derived(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	t := time.AfterFunc(time.Millisecond, func() { use(cctx) }) // want `time.AfterFunc's function uses derived's lease context`
	defer t.Stop()
	return nil
}

// watchdog: a function that does not use the context (it cancels work
// the protected function waits for) is no finding.
//
//lease:lock a3 deadline=5s
func (s *S) watchdog(ctx context.Context, id string) error {
	cctx, cancel := context.WithCancel(ctx)
	t := time.AfterFunc(time.Second, cancel)
	defer t.Stop()
	use(cctx)
	return nil
}

// awaited: the function waits for the callback before returning.
//
//lease:lock a4 deadline=5s
func (s *S) awaited(ctx context.Context, id string) error {
	done := make(chan struct{})
	time.AfterFunc(time.Millisecond, func() {
		defer close(done)
		use(ctx)
	})
	<-done
	return nil
}

// ignored: explained.
//
//lease:lock a5 deadline=5s
func (s *S) ignored(ctx context.Context, id string) error {
	//lease:ignore escape the callback only logs ctx's values
	time.AfterFunc(time.Second, func() { use(ctx) })
	return nil
}
