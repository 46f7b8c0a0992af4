// Package adversary65aheld: a func literal's WaitGroup and channel
// parameters are mapped to the arguments by position: a goroutine given
// wg2 (waited: wg1), or given a as its parameter b (waited: b), is not
// waited for (a finding each).
package adversary65aheld

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock p3 deadline=5s
func (s *S) otherWG(ctx context.Context) error {
	var wg1, wg2 sync.WaitGroup
	wg1.Add(1)
	wg2.Add(1)
	go func(wg *sync.WaitGroup) { // want `goroutine uses otherWG's lease context`
		defer wg.Done()
		_ = work(ctx)
	}(&wg2)
	wg1.Done()
	wg1.Wait()
	return nil
}

//lease:lock p4 deadline=5s
func (s *S) swapped(ctx context.Context) error {
	a, b := make(chan error, 1), make(chan error, 1)
	go func(b, a chan error) { // want `goroutine uses swapped's lease context`
		b <- work(ctx)
	}(a, b)
	a <- nil
	<-b
	return nil
}
