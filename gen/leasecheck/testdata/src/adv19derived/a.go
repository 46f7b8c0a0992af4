// Package adv19derived: found by round 19, fixed (false negative). The goroutine runs under
// a child of the lease's context and nothing waits for it; it is not
// reported because only the parameter itself is looked for.
package adv19derived

import (
	"context"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock e1 deadline=5s
func (s *S) derivedCtx(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	_ = cancel
	go work(cctx) // want `goroutine uses derivedCtx's lease context and may outlive the lease`
	return nil
}

func use(s *S) { _ = s.DerivedCtx(context.Background()) }
