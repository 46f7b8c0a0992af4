// Package clean follows every rule: no diagnostics.
package clean

import (
	"context"
	"sync"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
)

type Server struct{ leases *lease.Client }

//lease:lock orders:{id} deadline=5s fence
func (s *Server) charge(ctx context.Context, id string) error { // want charge:"reads fencing token"
	return write(ctx, id)
}

// write reads the token: charge's fence is used through it.
func write(ctx context.Context, id string) error { // want write:"reads fencing token"
	_, err := fence.From(ctx)
	return err
}

//lease:lock jobs:{name} deadline=5s
func (s *Server) fanOut(ctx context.Context, name string) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = ctx }()
	wg.Wait()
	return nil
}

func use(s *Server) {
	_ = s.Charge(context.Background(), "1")
	_ = s.FanOut(context.Background(), "x")
}
