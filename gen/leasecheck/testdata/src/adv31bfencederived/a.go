// Package adv31bfencederived: found by round 31b (false negative). A
// function under a lease without fence that reads the token from a context
// derived from its own (context.WithTimeout(ctx, d), as the escape check
// follows them) always finds none: reported as a TokenFrom on ctx is. A
// context that is not derived from ctx (a fresh one) is not.
package adv31bfencederived

import (
	"context"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func write(id string, tok lease.Token) error { return nil }

//lease:lock a:{id} deadline=5s
func (s *S) derived(ctx context.Context, id string) error { // want derived:"reads fencing token"
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	tok, _ := lease.TokenFrom(cctx) // want `derived reads a fencing token but its lease has no fence option`
	return write(id, tok)
}

//lease:lock b:{id} deadline=5s
func (s *S) fresh(ctx context.Context, id string, other context.Context) error { // want fresh:"reads fencing token"
	tok, _ := lease.TokenFrom(other)
	return write(id, tok)
}
