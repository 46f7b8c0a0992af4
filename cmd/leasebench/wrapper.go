package main

//go:generate go run github.com/leasegen/leasegen/cmd/leasegen

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Service holds the lease client for the generated wrapper.
type Service struct{ leases *lease.Client }

// protected runs fn under the generated wrapper's lease.
//
//lease:lock bench:{key} ttl=10s deadline=1m wait=30s fence
func (s *Service) protected(ctx context.Context, key string, fn func()) error {
	fn()
	return nil
}
