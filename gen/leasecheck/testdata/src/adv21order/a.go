// Package adv21order: a real inversion between methods of two types
// (A.debit takes B's lease, B.credit takes A's); same-named methods on
// unrelated types and a free function named like a method wrapper are
// not inversions. The message names the other end as file:line:col.
package adv21order

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type A struct {
	c *lease.Client
	b *B
}

type B struct {
	c *lease.Client
	a *A
}

type C struct{ c *lease.Client }

var lc *lease.Client

//lease:lock a:{id} deadline=5s
func (a *A) debit(ctx context.Context, id string) error {
	return a.b.Credit(ctx, id) // want `lock-order inversion: debit takes credit's lease while holding its own, and credit does the opposite \(at a.go:34:13\)`
}

//lease:lock b:{id} deadline=5s
func (b *B) credit(ctx context.Context, id string) error {
	return b.a.Debit(ctx, id) // want `lock-order inversion: credit takes debit's lease while holding its own, and debit does the opposite \(at a.go:29:13\)`
}

// C has methods of the same names; C.debit takes only C's credit lease.
//
//lease:lock c:{id} deadline=5s
func (c *C) debit(ctx context.Context, id string) error { return c.Credit(ctx, id) }

//lease:lock cc:{id} deadline=5s
func (c *C) credit(ctx context.Context, id string) error { return nil }

// A free function whose wrapper is named like A's method wrapper.
//
//lease:lock f:{id} deadline=5s client=lc
func debit(ctx context.Context, id string) error { return nil }

//lease:lock g:{id} deadline=5s client=lc
func other(ctx context.Context, b *B, id string) error { return b.Credit(ctx, id) }
