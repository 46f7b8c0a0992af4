// Package adv19aliasctx: found by round 19, fixed. A fenced lease whose context parameter
// is typed by an alias of context.Context, passing it to a func value, is
// reported as never reading its token; the same body with
// context.Context is not (adv19held.savePlain). The README says aliases
// of context.Context are what they alias.
package adv19aliasctx

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Ctx = context.Context

type S struct {
	c     *lease.Client
	store func(Ctx, string) error
}

//lease:lock q:{id} deadline=5s fence
func (s *S) saveAlias(ctx Ctx, id string) error { // want saveAlias:"reads fencing token"
	return s.store(ctx, id)
}

func use(s *S) { _ = s.SaveAlias(context.Background(), "x") }
