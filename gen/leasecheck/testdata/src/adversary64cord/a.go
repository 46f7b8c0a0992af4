// Package adversary64cord: debit takes credit's lease through a helper,
// credit takes debit's directly: a lock-order inversion.
package adversary64cord

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

// debit takes credit's lease through a helper; credit takes debit's directly.
//
//lease:lock acct:{id} deadline=5s
func (s *S) debit(ctx context.Context, id string) error {
	return s.settle(ctx, id)
}

func (s *S) settle(ctx context.Context, id string) error {
	return s.Credit(ctx, id+"-peer")
}

//lease:lock acct2:{id} deadline=5s
func (s *S) credit(ctx context.Context, id string) error {
	return s.Debit(ctx, id+"-peer")
}
