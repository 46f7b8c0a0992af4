// Package adv19ordalias: a real lock-order inversion between two methods
// declared on an alias of the receiver type (aliases are what they alias).
package adv19ordalias

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Account struct{ c *lease.Client }

type A = Account

//lease:lock x deadline=5s
func (a *A) debit(ctx context.Context) error {
	return a.Credit(ctx) // want `lock-order inversion`
}

//lease:lock y deadline=5s
func (a *Account) credit(ctx context.Context) error {
	return a.Debit(ctx) // want `lock-order inversion`
}
