package escape

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) {}

//lease:lock a deadline=5s
func (s *S) leaky(ctx context.Context) error {
	go work(ctx) // want `goroutine uses leaky's lease context and may outlive the lease`
	return nil
}

//lease:lock b deadline=5s
func (s *S) detached(ctx context.Context) error {
	go work(context.Background()) // does not use the lease's context
	return nil
}
