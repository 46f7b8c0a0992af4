// Package adv21escheld: escape cases the round-19 heuristics must keep
// right (round 21): derived contexts (errgroup, WithoutCancel: a detached
// context still carries the lease's values, token included), shadowed
// and unrelated contexts, select cases that return without waiting, a
// fan-in loop that a path skips.
package adv21escheld

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

func fresh() context.Context { return context.Background() }

//lease:lock h1 deadline=5s
func (s *S) errgroupCtx(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	_ = g
	go work(gctx) // want `goroutine uses errgroupCtx's lease context and may outlive the lease`
	return nil
}

//lease:lock h2 deadline=5s
func (s *S) detached(ctx context.Context) error {
	d := context.WithoutCancel(ctx)
	go work(d) // want `goroutine uses detached's lease context and may outlive the lease`
	return nil
}

//lease:lock h3 deadline=5s
func (s *S) detachedParam(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	go work(ctx) // want `goroutine uses detachedParam's lease context and may outlive the lease`
	return nil
}

//lease:lock h4 deadline=5s
func (s *S) shadowed(ctx context.Context) error {
	{
		ctx := context.Background()
		go work(ctx)
	}
	bg := fresh()
	go work(bg)
	c2, cancel := context.WithCancel(context.Background())
	_ = cancel
	go work(c2)
	return nil
}

//lease:lock h5 deadline=5s
func (s *S) selectCtxDone(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }() // want `goroutine uses selectCtxDone's lease context and may outlive the lease`
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

//lease:lock h7 deadline=5s
func (s *S) selectTimeout(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }() // want `goroutine uses selectTimeout's lease context and may outlive the lease`
	for {
		select {
		case err := <-errc:
			return err
		case <-time.After(time.Second):
			return context.DeadlineExceeded
		}
	}
}

//lease:lock h8 deadline=5s
func (s *S) faninSkipped(ctx context.Context, ids []string, fast bool) error {
	errc := make(chan error, len(ids))
	for range ids {
		go func() { errc <- work(ctx) }() // want `goroutine uses faninSkipped's lease context and may outlive the lease`
	}
	if fast {
		return nil
	}
	for range ids {
		<-errc
	}
	return nil
}

//lease:lock h9 deadline=5s
func (s *S) deferredClosure(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		go work(ctx) // want `goroutine uses deferredClosure's lease context and may outlive the lease`
	}()
	wg.Wait()
	return nil
}

//lease:lock h10 deadline=5s
func (s *S) faninRangeVal(ctx context.Context, ids []string) ([]error, error) {
	errc := make(chan error, len(ids))
	for _, id := range ids {
		go func() { _ = id; errc <- work(ctx) }()
	}
	out := make([]error, len(ids))
	for i := range ids {
		out[i] = <-errc
	}
	return out, nil
}

//lease:lock h11 deadline=5s
func (s *S) tracedCtx(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	vctx := context.WithValue(sctx, "k", 1)
	go func() { _ = work(vctx) }() // want `goroutine uses tracedCtx's lease context and may outlive the lease`
	return nil
}

//lease:lock h12 deadline=5s
func (s *S) returnedClosure(ctx context.Context) (func(), error) {
	return func() { go work(ctx) }, nil // want `goroutine uses returnedClosure's lease context and may outlive the lease`
}
