package stale

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock a deadline=6s
func (s *S) work(ctx context.Context) error { return nil }
