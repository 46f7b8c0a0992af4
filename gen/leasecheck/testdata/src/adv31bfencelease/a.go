// Package adv31bfencelease: found by round 31b (false positive). A fenced
// lease whose function reads its token through the Lease
// (lease.FromContext(ctx) then l.Token(), directly or in a helper given the
// Lease) reads the token: no "never reads one" finding. One that takes the
// Lease and never asks for its token is still reported, and a helper
// reading Lease.Token that only unfenced leases reach is not a token read
// from a context (no finding either way).
package adv31bfencelease

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func write(id string, tok lease.Token) error { return nil }

//lease:lock a:{id} deadline=5s fence
func (s *S) viaLease(ctx context.Context, id string) error { // want viaLease:"reads fencing token"
	l, ok := lease.FromContext(ctx)
	if !ok {
		return nil
	}
	return write(id, l.Token())
}

func writeWith(l *lease.Lease, id string) error { return write(id, l.Token()) } // want writeWith:"reads fencing token"

//lease:lock b:{id} deadline=5s fence
func (s *S) viaHelper(ctx context.Context, id string) error { // want viaHelper:"reads fencing token"
	l, _ := lease.FromContext(ctx)
	return writeWith(l, id)
}

//lease:lock c:{id} deadline=5s fence
func (s *S) leaseNoToken(ctx context.Context, id string) error { // want `leaseNoToken's lease mints fencing tokens but it never reads one`
	if _, ok := lease.FromContext(ctx); !ok {
		return nil
	}
	return write(id, 0)
}

func logToken(l *lease.Lease) lease.Token { return l.Token() } // want logToken:"reads fencing token"

//lease:lock d:{id} deadline=5s
func (s *S) unfenced(ctx context.Context, id string) error { // want unfenced:"reads fencing token"
	l, _ := lease.FromContext(ctx)
	_ = logToken(l)
	return nil
}
