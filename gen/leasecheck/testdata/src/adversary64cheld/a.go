// Package adversary64cheld: inputs of adversary round 64c that held (no
// finding): the waiter-goroutine closer ranged over, a select loop whose
// every case receives, AfterFunc stopped and waited for when Stop says it
// started, a top-level deferred Wait before a loop that returns early,
// and //lease:ignore between the lock directive and func.
package adversary64cheld

import (
	"context"
	"sync"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock p6 deadline=5s
func (s *S) closer(ctx context.Context, ids []string) error {
	results := make(chan error)
	var wg sync.WaitGroup
	for range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- work(ctx)
		}()
	}
	go func() { wg.Wait(); close(results) }()
	var first error
	for err := range results {
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

//lease:lock q2 deadline=5s
func (s *S) watchdog(ctx context.Context) error {
	fired := make(chan struct{})
	t := time.AfterFunc(time.Second, func() {
		defer close(fired)
		_ = work(ctx)
	})
	defer func() {
		if !t.Stop() {
			<-fired
		}
	}()
	return work(ctx)
}

//lease:lock q3 deadline=5s
func (s *S) race2(ctx context.Context) (string, error) {
	a, b := make(chan string, 1), make(chan error, 1)
	go func() {
		if err := work(ctx); err != nil {
			b <- err
			return
		}
		a <- "ok"
	}()
	for {
		select {
		case v := <-a:
			return v, nil
		case err := <-b:
			if err != nil {
				return "", err
			}
		}
	}
}

//lease:lock q7 deadline=5s
func (s *S) deferWaitLoop(ctx context.Context, ids []string) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, id := range ids {
		if id == "" {
			return nil
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = work(ctx) }()
	}
	return nil
}

//lease:lock q8 fence deadline=5s
//lease:ignore fence the token is read by the store's trigger
func (s *S) noRead(ctx context.Context) error { return nil }
