// Package adversary65aescasync: a closure that waits for its own
// goroutine, but the closure itself runs asynchronously (a goroutine
// running it, an errgroup task never waited for): when the protected
// function returns, the closure and its goroutine still run.
package adversary65aescasync

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
	"golang.org/x/sync/errgroup"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock a2 deadline=5s
func (s *S) viaErrgroup(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		errc := make(chan error, 1)
		go func() { errc <- work(gctx) }() // want `goroutine uses viaErrgroup's lease context`
		return <-errc
	})
	return nil // g.Wait() never called
}

//lease:lock a3 deadline=5s
func (s *S) viaVar(ctx context.Context) error {
	start := func() {
		done := make(chan struct{})
		go func() { // want `goroutine uses viaVar's lease context`
			defer close(done)
			_ = work(ctx)
		}()
		<-done
	}
	go start()
	return nil
}
