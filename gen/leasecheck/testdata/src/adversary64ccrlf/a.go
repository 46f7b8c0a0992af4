// Package adversary64ccrlf: a lease_gen.go checked out with CRLF line
// endings (git core.autocrlf=true, the default of Windows runners).
package adversary64ccrlf

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock a deadline=5s
func (s *S) work(ctx context.Context) error { return nil }
