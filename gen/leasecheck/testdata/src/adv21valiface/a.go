// Package adv21valiface: found by round 21 (false negative, not new). The
// protected method is part of an interface the type satisfies: stored as
// that interface and called through it, it runs without its lease, and
// neither the conversion nor the call is reported. (Exported protected
// methods satisfying an exported interface, e.g. a Ledger's Debit with
// name=DebitLocked, are the realistic shape.)
package adv21valiface

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Ledger interface {
	Debit(ctx context.Context, id string) error
}

type S struct{ c *lease.Client }

//lease:lock k:{id} deadline=5s name=DebitLocked
func (s *S) Debit(ctx context.Context, id string) error { return nil } // want Debit:"protected by DebitLocked"

var _ Ledger = (*S)(nil) // a compile-time assertion only: fine either way

func use(ctx context.Context, s *S) error { // want use:"reads fencing token"
	var l Ledger = s // documented limit (README): a conversion to an interface is not seen
	return l.Debit(ctx, "x")
}
