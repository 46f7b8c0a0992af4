package leasetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters started for a test (no replicas).
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n (at least 3) redis-server nodes with cluster mode
// on, joins them and splits the 16384 slots between them; it returns once
// every node reports cluster_state:ok. The nodes stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("leasetest: a cluster needs at least 3 masters, got %d", n)
	}
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, StartRedis(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000"))
	}
	if err := c.form(); err != nil {
		t.Fatalf("leasetest: forming the cluster: %v", err)
	}
	return c
}

func (c *Cluster) form() error {
	ctx := context.Background()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, s := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer clients[i].Close()
	}
	per := 16384 / len(c.Nodes)
	for i, rc := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == len(clients)-1 {
			hi = 16383
		}
		if err := rc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("ADDSLOTSRANGE on %s: %w", c.Nodes[i].Addr(), err)
		}
		if i > 0 {
			if err := rc.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Nodes[0].Port())).Err(); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, rc := range clients {
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ok after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var as []string
	for _, s := range c.Nodes {
		as = append(as, s.Addr())
	}
	return as
}

// Client returns a go-redis cluster client, closed when the test ends, with
// ContextTimeoutEnabled set (lease.New requires it).
func (c *Cluster) Client(t testing.TB, adjust ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
	for _, f := range adjust {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { cc.Close() })
	return cc
}
