package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a redis-server replicating s (--replicaof s) on a
// free loopback port and stops it when the test ends. It returns once the
// replica answers, which may be before it has synced: see WaitReplicas.
// Extra arguments are passed to redis-server.
func (s *Server) StartReplica(t testing.TB, args ...string) *Server {
	t.Helper()
	r, err := s.NewReplica(args...)
	if err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	t.Cleanup(r.Stop)
	return r
}

// NewReplica is StartReplica for callers without a testing.TB. Call Stop
// when done.
func (s *Server) NewReplica(args ...string) (*Server, error) {
	if s.tls != nil {
		return nil, errors.New("replicas of a TLS server are not supported")
	}
	return Start(append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.port)}, args...)...)
}

// WaitReplicas waits (up to 10s, then fails the test) until every replica
// given has its link to s up and has applied everything s had written when
// the call began.
func (s *Server) WaitReplicas(t testing.TB, replicas ...*Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitSync(ctx, replicas...); err != nil {
		t.Fatalf("leasetest: %v", err)
	}
}

// WaitSync is WaitReplicas bounded by ctx instead of a test: it returns
// nil once every replica given replicates s with its link up, has applied
// s's replication offset as of the call, and s counts it online (only then
// does WAIT count its acknowledgements: a replica whose link is up can
// still be in wait_bgsave on the primary's side).
func (s *Server) WaitSync(ctx context.Context, replicas ...*Server) error {
	info, err := s.info(ctx, "replication")
	if err != nil {
		return err
	}
	target, _ := strconv.ParseInt(info["master_repl_offset"], 10, 64)
	return poll(ctx, func() error {
		for _, r := range replicas {
			if err := r.syncedTo(ctx, s, target); err != nil {
				return err
			}
		}
		if err := s.online(ctx, replicas); err != nil {
			return err
		}
		return s.acknowledged(ctx, len(replicas))
	})
}

// acknowledged checks that n replicas acknowledge a write (WAIT): after a
// full sync a primary streams nothing to a replica until the replica's
// first REPLCONF ACK, up to a second later, and WAIT would time out.
func (s *Server) acknowledged(ctx context.Context, n int) error {
	s.mu.Lock()
	s.ensureAdmin()
	rdb := s.admin
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	// One connection: WAIT covers its own writes. PUBLISH goes into the
	// replication stream and touches no key (no MOVED on a Cluster node).
	pipe := rdb.Pipeline()
	pipe.Publish(ctx, "leasetest:sync", "1")
	wait := pipe.Do(ctx, "WAIT", n, 200)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if got, _ := wait.Int(); got < n {
		return fmt.Errorf("%s: %d of %d replicas acknowledged a write", s.Addr(), got, n)
	}
	return nil
}

// online reports why s does not count every replica given as online, or
// nil.
func (s *Server) online(ctx context.Context, replicas []*Server) error {
	info, err := s.info(ctx, "replication")
	if err != nil {
		return err
	}
	for _, r := range replicas {
		found := false
		for k, v := range info {
			if strings.HasPrefix(k, "slave") && strings.Contains(v, "port="+strconv.Itoa(r.port)+",") {
				found = true
				if !strings.Contains(v, "state=online") {
					return fmt.Errorf("%s: %s sees replica %s as %s", s.Addr(), s.Addr(), r.Addr(), v)
				}
			}
		}
		if !found {
			return fmt.Errorf("%s: replica %s not attached", s.Addr(), r.Addr())
		}
	}
	return nil
}

// syncedTo reports why s is not (yet) a replica of m with its link up and
// at least offset applied, or nil.
func (s *Server) syncedTo(ctx context.Context, m *Server, offset int64) error {
	info, err := s.info(ctx, "replication")
	if err != nil {
		return err
	}
	if !isReplicaRole(info["role"]) || info["master_port"] != strconv.Itoa(m.port) {
		return fmt.Errorf("%s: role %s of %s:%s, want a replica of %s", s.Addr(), info["role"], info["master_host"], info["master_port"], m.Addr())
	}
	if info["master_link_status"] != "up" {
		return fmt.Errorf("%s: link to %s is %s", s.Addr(), m.Addr(), info["master_link_status"])
	}
	applied, ok := info["slave_repl_offset"]
	if !ok {
		applied = info["master_repl_offset"]
	}
	got, _ := strconv.ParseInt(applied, 10, 64)
	if got < offset {
		return fmt.Errorf("%s: applied offset %d of %s's %d", s.Addr(), got, m.Addr(), offset)
	}
	return nil
}

// isReplicaRole accepts Redis's "slave" and the "replica" newer servers may
// report.
func isReplicaRole(role string) bool { return role == "slave" || role == "replica" }

// info returns the fields of INFO section.
func (s *Server) info(ctx context.Context, section string) (map[string]string, error) {
	text, err := s.do(ctx, "INFO", section).Text()
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, s.Addr(), err)
	}
	return parseInfo(text), nil
}

func parseInfo(text string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// poll calls check every 20ms until it returns nil or ctx ends; then it
// returns check's last complaint.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
