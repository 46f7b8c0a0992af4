// Package adversary64cescarg: a goroutine's func literal given its
// WaitGroup or its channel as an argument signals it as much as one that
// captures it; the wait before return is a wait (no finding).
package adversary64cescarg

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock p1 deadline=5s
func (s *S) wgArg(ctx context.Context, ids []string) error {
	var wg sync.WaitGroup
	for range ids {
		wg.Add(1)
		go func(wg *sync.WaitGroup) {
			defer wg.Done()
			_ = work(ctx)
		}(&wg)
	}
	wg.Wait()
	return nil
}

//lease:lock p2 deadline=5s
func (s *S) chanArg(ctx context.Context) error {
	errc := make(chan error, 1)
	go func(out chan<- error) {
		out <- work(ctx)
	}(errc)
	return <-errc
}
