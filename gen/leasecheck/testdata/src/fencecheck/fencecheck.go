package fencecheck

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock a deadline=5s fence
func (s *S) unread(ctx context.Context) error { return nil } // want `unread's lease mints fencing tokens but it never reads one`

//lease:lock b deadline=5s
func (s *S) noFence(ctx context.Context) error { // want noFence:"reads fencing token"
	_, _ = lease.TokenFrom(ctx) // want `noFence reads a fencing token but its lease has no fence option`
	return nil
}

//lease:lock c deadline=5s fence
func (s *S) readsDirectly(ctx context.Context) error { // want readsDirectly:"reads fencing token"
	_, _ = lease.TokenFrom(ctx)
	return nil
}

//lease:lock d deadline=5s fence
func (s *S) readsViaHelper(ctx context.Context) error { return helper(ctx) } // want readsViaHelper:"reads fencing token"

func helper(ctx context.Context) error { // want helper:"reads fencing token"
	_, _ = lease.TokenFrom(ctx)
	return nil
}
