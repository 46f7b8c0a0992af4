// Package adversary65aescinnerbreak: a range over the results channel,
// closed once every goroutine is done, whose body breaks out of an inner
// loop (or a switch): the range itself runs to the end and waits for all
// (no finding).
package adversary65aescinnerbreak

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

type result struct {
	v    string
	errs []error
}

func fetch(ctx context.Context, u string) result { return result{} }

//lease:lock b1 deadline=5s
func (s *S) gather(ctx context.Context, urls []string) (int, error) {
	results := make(chan result)
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- fetch(ctx, u)
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	var first error
	n := 0
	for r := range results {
		for _, e := range r.errs {
			if e != nil {
				first = e
				break // leaves the inner loop only
			}
		}
		n++
	}
	return n, first
}

//lease:lock b2 deadline=5s
func (s *S) tally(ctx context.Context, urls []string) (int, error) {
	results := make(chan result)
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- fetch(ctx, u)
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	ok, bad := 0, 0
	for r := range results {
		switch {
		case len(r.errs) > 0:
			bad++
			break // ends the switch case only
		default:
			ok++
		}
	}
	_ = ok
	return bad, nil
}
