// Package adversary64cescargval: a go statement's arguments are evaluated
// before the goroutine starts; one given a string computed from ctx does
// not use the lease's context (no finding).
package adversary64cescargval

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

type key struct{}

func reqID(ctx context.Context) string { s, _ := ctx.Value(key{}).(string); return s }

func (s *S) audit(rid, what string) {}

//lease:lock q1 deadline=5s
func (s *S) auditAsync(ctx context.Context, id string) error {
	go s.audit(reqID(ctx), id)
	return nil
}

//lease:lock q6 deadline=5s
func (s *S) auditLit(ctx context.Context, id string) error {
	go func(rid string) { s.audit(rid, id) }(reqID(ctx))
	return nil
}
