// Package testfiles has a directive in a test file: both tools report it,
// and lease_gen.go (from the non-test files) is not stale.
package testfiles

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock a:{id} deadline=5s
func (s *S) work(ctx context.Context, id string) error { return nil }
