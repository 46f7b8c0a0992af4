// Package leader runs a job on one node at a time: its directive is
// checked, its generated wrapper is current, and a direct call is a
// bypass. A leader never reading its term's token is no finding.
package leader

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct {
	leases *lease.Client
	node   string
}

// settle books payments while this node leads.
//
//lease:leader jobs:settle ttl=2s identity=node
func (j *Jobs) settle(ctx context.Context) error { return nil }

//lease:leader jobs:sweep
func Sweep(ctx context.Context, c *lease.Client) error { return nil } // want Sweep:"run as leader by SweepAsLeader"

func run(j *Jobs, c *lease.Client) {
	_ = j.SettleAsLeader(context.Background())
	_ = j.settle(context.Background()) // want `lease: call to settle bypasses its leader election: call SettleAsLeader instead \(it campaigns and calls settle for every term won\)`
	_ = SweepAsLeader(context.Background(), c)
}
