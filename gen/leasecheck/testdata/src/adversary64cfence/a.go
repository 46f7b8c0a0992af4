// Package adversary64cfence: token readers reached by a fenced lease
// through an inline interface (a struct field's, a generic constraint).
package adversary64cfence

import (
	"context"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct {
	c     *lease.Client
	store interface {
		put(ctx context.Context) error
	}
}

type rec struct{}

// put reads the token; it is reached only through S.store's inline
// interface, from a fenced lease.
func (rec) put(ctx context.Context) error { // want put:"reads fencing token"
	_, err := fence.From(ctx)
	return err
}

//lease:lock f1 fence deadline=5s
func (s *S) save(ctx context.Context) error { // want save:"reads fencing token"
	return s.store.put(ctx)
}

// A generic helper whose constraint has an unexported method.
func stampAll[W interface{ stamp(context.Context) error }](ctx context.Context, ws []W) error { // want stampAll:"reads fencing token"
	for _, w := range ws {
		if err := w.stamp(ctx); err != nil {
			return err
		}
	}
	return nil
}

type row struct{}

func (row) stamp(ctx context.Context) error { // want stamp:"reads fencing token"
	_, err := fence.From(ctx)
	return err
}

//lease:lock f2 fence deadline=5s
func (s *S) saveRows(ctx context.Context, rs []row) error { // want saveRows:"reads fencing token"
	return stampAll(ctx, rs)
}
