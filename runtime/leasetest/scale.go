package leasetest

import (
	"context"
	"fmt"
)

// AddMaster starts a new master without slots, with replicas replicas of
// its own, and has them join the cluster, as a scale-out does before it
// reshards slots onto the new master (see BeginMigration). It returns the
// master once the cluster is ok again and every node knows the new ones
// (WaitOK). The new nodes are appended to Nodes and stop with the cluster.
//
// Until a slot is assigned to it, the new master is in no node's CLUSTER
// SLOTS answer, so a client that builds its map of masters from that
// answer (go-redis) does not know it.
func (c *Cluster) AddMaster(ctx context.Context, replicas int) (*Server, error) {
	var seed *Server
	for _, s := range c.Nodes {
		if s.running() {
			seed = s
			break
		}
	}
	if seed == nil {
		return nil, fmt.Errorf("no node of the cluster is running")
	}
	var added []*Server
	for range 1 + replicas {
		s, err := Start(c.args...)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		id, err := s.do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER MYID on %s: %w", s.Addr(), err)
		}
		c.ids[s] = id
		if err := s.do(ctx, "CLUSTER", "MEET", "127.0.0.1", seed.port).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER MEET on %s: %w", s.Addr(), err)
		}
		added = append(added, s)
	}
	m := added[0]
	for _, r := range added[1:] {
		// The replica must have heard of its master first.
		if err := poll(ctx, func() error { return r.do(ctx, "CLUSTER", "REPLICATE", c.ids[m]).Err() }); err != nil {
			return nil, fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr(), err)
		}
	}
	if err := c.WaitOK(ctx); err != nil {
		return nil, fmt.Errorf("after adding master %s: %w", m.Addr(), err)
	}
	return m, nil
}
