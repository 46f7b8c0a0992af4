// Package adv19closure: found by round 19, fixed (false positive). Goroutines started by a
// helper closure and waited for with wg.Wait before the only return.
package adv19closure

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock e3 deadline=5s
func (s *S) helperClosure(ctx context.Context) error {
	var wg sync.WaitGroup
	start := func() {
		wg.Add(1)
		go func() { defer wg.Done(); _ = work(ctx) }()
	}
	start()
	start()
	wg.Wait()
	return nil
}

func use(s *S) { _ = s.HelperClosure(context.Background()) }
