package order

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock accounts:{from} deadline=5s
func (s *S) debit(ctx context.Context, from string) error {
	return s.Credit(ctx, "x") // want `lock-order inversion: debit takes credit's lease while holding its own`
}

//lease:lock accounts:{to} deadline=5s
func (s *S) credit(ctx context.Context, to string) error {
	return s.Debit(ctx, "y") // want `lock-order inversion: credit takes debit's lease while holding its own`
}

//lease:lock audit deadline=5s
func (s *S) audit(ctx context.Context) error { return s.Debit(ctx, "z") }
