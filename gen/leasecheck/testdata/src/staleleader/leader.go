// Package staleleader's lease_gen.go was generated before its directive's
// ttl changed: it is stale, and the suggested fix regenerates it.
package staleleader

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:leader jobs:run ttl=3s
func (s *S) run(ctx context.Context) error { return nil }
