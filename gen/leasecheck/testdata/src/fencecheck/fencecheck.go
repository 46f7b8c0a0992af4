package fencecheck

import (
	"context"

	"github.com/leasegen/leasegen/runtime/fence"
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

// orphan reads a token, but only unleased code calls it.
func orphan(ctx context.Context) { // want orphan:"reads fencing token"
	_, _ = fence.From(ctx) // want `orphan reads a fencing token, but no fenced lease reaches it`
}

func start(ctx context.Context) { orphan(ctx) } // want start:"reads fencing token"

//lease:lock e deadline=5s
func (s *S) unfenced(ctx context.Context) error { return viaUnfenced(ctx) } // want unfenced:"reads fencing token"

func viaUnfenced(ctx context.Context) error { // want viaUnfenced:"reads fencing token"
	_, _ = lease.TokenFrom(ctx) // want `viaUnfenced reads a fencing token, but only leases without fence reach it \(unfenced\): add fence to their directives`
	return nil
}

// Exported: a fenced lease in another package may call it.
func Exported(ctx context.Context) { // want Exported:"reads fencing token"
	_, _ = lease.TokenFrom(ctx)
}

// asValue is passed around: any caller may run it.
func asValue(ctx context.Context) error { // want asValue:"reads fencing token"
	_, _ = lease.TokenFrom(ctx)
	return nil
}

var handlers = []func(context.Context) error{asValue}
