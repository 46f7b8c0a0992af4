// Package adversary64cescclosure: a goroutine started in a closure and
// waited for inside that same closure (a fan-out inside an errgroup task,
// a call helper) has ended when the closure returns (no finding).
package adversary64cescclosure

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
	"golang.org/x/sync/errgroup"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock p3 deadline=5s
func (s *S) upload(ctx context.Context, parts []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var wg sync.WaitGroup
		for range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = work(gctx)
			}()
		}
		wg.Wait()
		return nil
	})
	return g.Wait()
}

//lease:lock p4 deadline=5s
func (s *S) fetchAll(ctx context.Context, ids []string) error {
	fetch := func(id string) error {
		errc := make(chan error, 1)
		go func() { errc <- work(ctx) }()
		return <-errc
	}
	for _, id := range ids {
		if err := fetch(id); err != nil {
			return err
		}
	}
	return nil
}
