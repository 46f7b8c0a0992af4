package escape

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
	"golang.org/x/sync/errgroup"
)

type S struct {
	c    *lease.Client
	cond *sync.Cond
}

func work(ctx context.Context) error { return nil }

func produce(ctx context.Context, out chan<- int) { close(out) }

//lease:lock a deadline=5s
func (s *S) leaky(ctx context.Context) error {
	go work(ctx) // want `goroutine uses leaky's lease context and may outlive the lease`
	return nil
}

//lease:lock b deadline=5s
func (s *S) detached(ctx context.Context) error {
	go work(context.Background()) // does not use the lease's context
	return nil
}

//lease:lock c deadline=5s
func (s *S) waitGroup(ctx context.Context) error {
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = work(ctx)
		}()
	}
	wg.Wait()
	return nil
}

//lease:lock d deadline=5s
func (s *S) deferredWait(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); _ = work(ctx) }()
	return nil
}

//lease:lock e deadline=5s
func (s *S) doneChannel(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = work(ctx)
	}()
	<-done
	return nil
}

//lease:lock f deadline=5s
func (s *S) errChannel(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }()
	return <-errc
}

//lease:lock g deadline=5s
func (s *S) assigned(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }()
	err := <-errc
	return err
}

//lease:lock h deadline=5s
func (s *S) ranged(ctx context.Context) error {
	out := make(chan int)
	go produce(ctx, out)
	for range out {
	}
	return nil
}

//lease:lock i deadline=5s
func (s *S) errgroupGo(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return work(ctx) })
	return g.Wait()
}

// A select whose every case receives from the goroutine's channels.
//
//lease:lock j deadline=5s
func (s *S) selectAll(ctx context.Context) (int, error) {
	out, errc := make(chan int, 1), make(chan error, 1)
	go func() {
		if err := work(ctx); err != nil {
			errc <- err
			return
		}
		out <- 1
	}()
	select {
	case v := <-out:
		return v, nil
	case err := <-errc:
		return 0, err
	}
}

// Returning when the context ends leaves the goroutine running.
//
//lease:lock k deadline=5s
func (s *S) selectCtx(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }() // want `goroutine uses selectCtx's lease context`
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// One path returns before waiting.
//
//lease:lock l deadline=5s
func (s *S) earlyReturn(ctx context.Context, fast bool) error {
	done := make(chan struct{})
	go func() { defer close(done); _ = work(ctx) }() // want `goroutine uses earlyReturn's lease context`
	if fast {
		return nil
	}
	<-done
	return nil
}

// A Wait on something else is no wait for the goroutine.
//
//lease:lock m deadline=5s
func (s *S) otherWait(ctx context.Context) error {
	go work(ctx) // want `goroutine uses otherWait's lease context`
	s.cond.L.Lock()
	s.cond.Wait()
	s.cond.L.Unlock()
	return nil
}

//lease:lock n deadline=5s
func (s *S) suppressed(ctx context.Context) error {
	//lease:ignore escape the worker watches ctx and exits before the lease can end (tested in TestWorker)
	go work(ctx)
	go work(ctx) //lease:ignore escape same worker, same reason
	return nil
}

//lease:lock o deadline=5s
func (s *S) staleSuppression(ctx context.Context) error {
	/* want `//lease:ignore escape suppresses nothing here` */ //lease:ignore escape nothing to suppress
	return work(ctx)
}
