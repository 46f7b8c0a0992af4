// Package adv21escfp: found by round 21 (false positives of escape).
// detachedCopy: a goroutine on a fresh context that only copies a value
// (a trace id) out of the lease's: not derived from it, no token, no
// cancellation; it is taken as a lease context because its expression
// mentions ctx (leaseContexts). spawnHelper: goroutines started by a
// helper closure called in a loop, received from once per call in a loop
// with the same header: spawnLoop does not look outside the literal.
package adv21escfp

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

type traceKey struct{}

//lease:lock p1 deadline=5s
func (s *S) detachedCopy(ctx context.Context) error {
	bg := context.WithValue(context.Background(), traceKey{}, ctx.Value(traceKey{}))
	go work(bg)
	return nil
}

// Still reported: a goroutine started by a closure that a loop calls is
// followed from the closure's definition (documented in the README).
//
//lease:lock p2 deadline=5s
func (s *S) spawnHelper(ctx context.Context, ids []string) error {
	errc := make(chan error, len(ids))
	spawn := func(id string) {
		go func() { _ = id; errc <- work(ctx) }() // want `goroutine uses spawnHelper's lease context`
	}
	for _, id := range ids {
		spawn(id)
	}
	for range ids {
		<-errc
	}
	return nil
}
