package bypass

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Server struct{ leases *lease.Client }

//lease:lock orders:{id} deadline=5s
func (s *Server) charge(ctx context.Context, id string) error { return nil }

//lease:lock reports:{day} deadline=5s
func build(ctx context.Context, day string) error { return nil }

//lease:lock nightly deadline=5s name=NightlyLeased
func Nightly(ctx context.Context) error { return nil } // want Nightly:"protected by NightlyLeased"

func handler(s *Server, c *lease.Client) {
	_ = s.charge(context.Background(), "1") // want `lease: call to charge bypasses its lease: call Charge instead`
	_ = s.Charge(context.Background(), "1")
	_ = build(context.Background(), "d") // want `lease: call to build bypasses its lease: call Build instead`
	_ = Build(context.Background(), c, "d")
}
