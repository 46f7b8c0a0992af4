// Package adv21eschedged: found by round 21 (false negative, older than
// round 19). Hedged requests: one goroutine per replica, the first
// answer returned; the others are never received from and outlive the
// lease. One receive after the loop is taken as waiting for all of them.
package adv21eschedged

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock r1 deadline=5s
func (s *S) hedged(ctx context.Context, replicas []string) error {
	res := make(chan error, len(replicas))
	for range replicas {
		go func() { res <- work(ctx) }() // want `goroutine uses hedged's lease context and may outlive the lease`
	}
	return <-res
}
