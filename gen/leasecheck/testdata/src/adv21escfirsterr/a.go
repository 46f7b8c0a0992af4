// Package adv21escfirsterr: found by round 21 (false negative). The
// fan-in loop returns on the first error: the other goroutines are not
// received from and outlive the lease. loopWaits accepts the loop
// because its if's init receives, though the if's body returns.
package adv21escfirsterr

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock f1 deadline=5s
func (s *S) firstErr(ctx context.Context, ids []string) error {
	errc := make(chan error, len(ids))
	for _, id := range ids {
		go func() { _ = id; errc <- work(ctx) }() // want `goroutine uses firstErr's lease context and may outlive the lease`
	}
	for range ids {
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}

//lease:lock f2 deadline=5s
func (s *S) firstErrAssign(ctx context.Context, ids []string) error {
	errc := make(chan error, len(ids))
	for range ids {
		go func() { errc <- work(ctx) }() // want `goroutine uses firstErrAssign's lease context and may outlive the lease`
	}
	for range ids {
		err := <-errc
		if err != nil {
			return err
		}
	}
	return nil
}
