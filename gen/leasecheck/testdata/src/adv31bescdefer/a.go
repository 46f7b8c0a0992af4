// Package adv31bescdefer: found by round 31b (false negative). A deferred
// wait registered after the go statement does not run on a return that
// comes before the defer: the goroutine outlives the lease on that path.
// The defers that are registered on every path to the return (one before
// the go statement, or one on the path, also a deferred func literal)
// still count as waiting.
package adv31bescdefer

import (
	"context"
	"errors"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func use(ctx context.Context) {}

// earlyReturn returns before its deferred Wait is registered.
//
//lease:lock d1 deadline=5s
func (s *S) earlyReturn(ctx context.Context, id string) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // want `goroutine uses earlyReturn's lease context and may outlive the lease`
		defer wg.Done()
		use(ctx)
	}()
	if id == "x" {
		return errors.New("early")
	}
	defer wg.Wait()
	return nil
}

// earlyReturnLit: the same with the wait in a deferred func literal.
//
//lease:lock d2 deadline=5s
func (s *S) earlyReturnLit(ctx context.Context, id string) error {
	done := make(chan struct{})
	go func() { // want `goroutine uses earlyReturnLit's lease context and may outlive the lease`
		defer close(done)
		use(ctx)
	}()
	if id == "x" {
		return errors.New("early")
	}
	defer func() { <-done }()
	return nil
}

// deferredFirst registers the wait before the go statement: every return
// after it waits.
//
//lease:lock d3 deadline=5s
func (s *S) deferredFirst(ctx context.Context, id string) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		use(ctx)
	}()
	if id == "x" {
		return errors.New("early")
	}
	return nil
}

// deferredOnPath registers the wait after the go statement, before any
// return.
//
//lease:lock d4 deadline=5s
func (s *S) deferredOnPath(ctx context.Context, id string) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		use(ctx)
	}()
	defer func() { wg.Wait() }()
	if id == "x" {
		return errors.New("early")
	}
	return nil
}

// deferredInBranch: a wait deferred in one branch only.
//
//lease:lock d5 deadline=5s
func (s *S) deferredInBranch(ctx context.Context, id string) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // want `goroutine uses deferredInBranch's lease context and may outlive the lease`
		defer wg.Done()
		use(ctx)
	}()
	if id == "x" {
		defer wg.Wait()
	}
	return nil
}
