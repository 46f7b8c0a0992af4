// Package adv21escvar: found by round 21 (false negative). A context
// derived from the lease's in a var declaration (var cctx, cancel =
// context.WithTimeout(ctx, d)) is not a lease context: leaseContexts
// looks at assignments only.
package adv21escvar

import (
	"context"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock v1 deadline=5s
func (s *S) varDerived(ctx context.Context) error {
	var cctx, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go work(cctx) // want `goroutine uses varDerived's lease context and may outlive the lease`
	return nil
}

//lease:lock v2 deadline=5s
func (s *S) varTyped(ctx context.Context) error {
	var wctx context.Context = context.WithValue(ctx, "k", 1)
	go work(wctx) // want `goroutine uses varTyped's lease context and may outlive the lease`
	return nil
}
