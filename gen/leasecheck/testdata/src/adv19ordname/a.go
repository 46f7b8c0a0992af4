// Package adv19ordname: found by round 19, fixed (false positive). debit calls
// adv19ordother.Credit, an unrelated function of another package that
// only shares the name of credit's wrapper; credit calls Debit. There is
// one lease edge (credit -> debit), no inversion.
package adv19ordname

import (
	"context"

	"adv19ordother"

	"github.com/leasegen/leasegen/runtime/lease"
)

var lc *lease.Client

//lease:lock d deadline=5s client=lc
func debit(ctx context.Context) error {
	return adv19ordother.Credit(ctx)
}

//lease:lock c deadline=5s client=lc
func credit(ctx context.Context) error {
	return Debit(ctx)
}
