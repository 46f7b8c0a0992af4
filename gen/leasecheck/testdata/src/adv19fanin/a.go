// Package adv19fanin: found by round 19, fixed (a false positive). One
// receive per goroutine started, in a second loop over the same slice:
// every goroutine is received from before the return; a later loop with
// the same header as the spawning one, waiting in every iteration, now
// counts as the wait.
package adv19fanin

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock e4 deadline=5s
func (s *S) fanIn(ctx context.Context, ids []string) error {
	errc := make(chan error, len(ids))
	for range ids {
		go func() { errc <- work(ctx) }()
	}
	var first error
	for range ids {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func use(s *S) { _ = s.FanIn(context.Background(), nil) }
