package leasetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ACLUser creates (or replaces) the user name on s with password and the
// given ACL rules, starting from no permissions at all:
//
//	ACL SETUSER name reset on >password rules...
//
// and returns a client that authenticates as that user, closed when the
// test ends. The user survives Restart. For example
//
//	rdb := srv.ACLUser(t, "app", "secret", "~lease:*", "&lease:*", "+@read", "+set")
func (s *Server) ACLUser(t testing.TB, name, password string, rules ...string) *redis.Client {
	t.Helper()
	if err := s.setUser(context.Background(), name, password, rules); err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	return s.Client(t, func(o *redis.Options) { o.Username, o.Password = name, password })
}

func (s *Server) setUser(ctx context.Context, name, password string, rules []string) error {
	spec := append([]string{name, "reset", "on", ">" + password}, rules...)
	args := []any{"ACL", "SETUSER"}
	for _, a := range spec {
		args = append(args, a)
	}
	if err := s.do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("ACL SETUSER %s on %s: %w", name, s.Addr(), err)
	}
	s.mu.Lock()
	// A "user" config line for Restart, in place of the user's earlier one:
	// redis-server refuses a configuration that defines a user twice.
	s.args = append(append(withoutUser(s.args, name), "--user"), spec...)
	s.mu.Unlock()
	return nil
}

// withoutUser returns args without the "--user name ..." option that
// defines name (an option's values run up to the next "--" argument; no
// ACL rule starts with "--").
func withoutUser(args []string, name string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--user" && i+1 < len(args) && args[i+1] == name {
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				i++
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// ACLUser creates the user on every data node of the deployment, as
// Server.ACLUser does, and returns a failover client that authenticates as
// it on the data nodes (the sentinels are asked as the default user).
func (sn *Sentinel) ACLUser(t testing.TB, name, password string, rules ...string) *redis.Client {
	t.Helper()
	for _, d := range sn.Data {
		if err := d.setUser(context.Background(), name, password, rules); err != nil {
			t.Fatalf("leasetest: %v", err)
		}
	}
	return sn.FailoverClient(t, func(o *redis.FailoverOptions) { o.Username, o.Password = name, password })
}

// ACLUser creates the user on every node of the cluster, as
// Server.ACLUser does, and returns a cluster client that authenticates as
// it.
func (c *Cluster) ACLUser(t testing.TB, name, password string, rules ...string) *redis.ClusterClient {
	t.Helper()
	for _, s := range c.Nodes {
		if err := s.setUser(context.Background(), name, password, rules); err != nil {
			t.Fatalf("leasetest: %v", err)
		}
	}
	return c.Client(t, func(o *redis.ClusterOptions) { o.Username, o.Password = name, password })
}
