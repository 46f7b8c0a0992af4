// Package adversary64cescrange: a range over the goroutines' channel that
// returns or breaks on the first good result waits for one of them, not
// all: the others keep running under a released lease.
package adversary64cescrange

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

type result struct {
	v   string
	err error
}

func fetch(ctx context.Context, u string) result { return result{} }

//lease:lock r1 deadline=5s
func (s *S) first(ctx context.Context, urls []string) (string, error) {
	results := make(chan result, len(urls))
	for _, u := range urls {
		go func() { results <- fetch(ctx, u) }() // want `goroutine uses first's lease context`
	}
	for r := range results {
		if r.err == nil {
			return r.v, nil
		}
	}
	return "", nil
}

//lease:lock r2 deadline=5s
func (s *S) firstBreak(ctx context.Context, urls []string) (string, error) {
	results := make(chan result)
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Add(1)
		go func() { defer wg.Done(); results <- fetch(ctx, u) }() // want `goroutine uses firstBreak's lease context`
	}
	go func() { wg.Wait(); close(results) }()
	var v string
	for r := range results {
		if r.err == nil {
			v = r.v
			break
		}
	}
	return v, nil
}
