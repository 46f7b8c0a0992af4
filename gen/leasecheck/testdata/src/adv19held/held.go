// Package adv19held: attacks of round 19 that held.
package adv19held

import (
	"context"

	. "github.com/leasegen/leasegen/runtime/fence"
	l "github.com/leasegen/leasegen/runtime/lease"
)

type S struct {
	c     *l.Client
	plain func(context.Context, string) error
}

// A fenced lease that passes its context to a func value is assumed to
// read the token (no finding).
//
//lease:lock p:{id} deadline=5s fence
func (s *S) savePlain(ctx context.Context, id string) error { // want savePlain:"reads fencing token"
	return s.plain(ctx, id)
}

// Dot-imported fence.From counts as reading the token.
//
//lease:lock r:{id} deadline=5s fence
func (s *S) dotRead(ctx context.Context, id string) error { // want dotRead:"reads fencing token"
	_, err := From(ctx)
	return err
}

// Renamed import: TokenFrom under a lease without fence.
//
//lease:lock t:{id} deadline=5s
func (s *S) renamedNoFence(ctx context.Context, id string) error { // want renamedNoFence:"reads fencing token"
	_, _ = l.TokenFrom(ctx) // want `renamedNoFence reads a fencing token but its lease has no fence option`
	return nil
}

// Outer embeds *S: the promoted raw method is still a bypass.
type Outer struct{ *S }

func callers(ctx context.Context, s *S, o Outer) { // want callers:"reads fencing token"
	_ = o.savePlain(ctx, "x")     // want `call to savePlain bypasses its lease: call SavePlain instead`
	_ = (*S).dotRead(s, ctx, "x") // want `call to dotRead bypasses its lease: call DotRead instead`
	defer s.savePlain(ctx, "y")   // want `call to savePlain bypasses its lease`
	go s.savePlain(ctx, "z")      // want `call to savePlain bypasses its lease`
	_ = o.SavePlain(ctx, "ok")
	_ = s.RenamedNoFence(ctx, "ok")
	_ = s.DotRead(ctx, "ok")
}
