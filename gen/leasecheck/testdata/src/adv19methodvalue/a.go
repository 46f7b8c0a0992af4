// Package adv19methodvalue: found by round 19, fixed (a false negative). The raw function is
// handed out as a method value and called through it: the lease is
// bypassed, and no call expression names the function.
package adv19methodvalue

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock k:{id} deadline=5s
func (s *S) charge(ctx context.Context, id string) error { return nil }

func retry(ctx context.Context, id string, f func(context.Context, string) error) error { // want retry:"reads fencing token"
	return f(ctx, id)
}

func use(ctx context.Context, s *S) error { // want use:"reads fencing token"
	return retry(ctx, "x", s.charge) // want `charge used as a value bypasses its lease`
}
