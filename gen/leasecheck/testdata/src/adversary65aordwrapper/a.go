// Package adversary65aordwrapper: debit holds its lease and takes audit's
// (a package function it calls), whose body takes credit's: debit holds
// its own lease while taking credit's. credit takes debit's directly: a
// lock-order inversion through the package's functions.
package adversary65aordwrapper

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock acct:{id} deadline=5s
func (s *S) debit(ctx context.Context, id string) error {
	return s.Audit(ctx, id)
}

//lease:lock audit:{id} deadline=5s
func (s *S) audit(ctx context.Context, id string) error {
	return s.Credit(ctx, id+"-peer")
}

//lease:lock acct2:{id} deadline=5s
func (s *S) credit(ctx context.Context, id string) error {
	return s.Debit(ctx, id+"-peer")
}
