package leasetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions adjust StartSentinel's deployment.
type SentinelOptions struct {
	// MasterName is the name the sentinels monitor the primary by;
	// "mymaster" when empty.
	MasterName string
	// DownAfter is down-after-milliseconds: how long the primary must be
	// unreachable before a sentinel thinks it down; 1s when zero.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout; 3s when zero. A sentinel waits
	// twice this long before it retries a failover that did not complete.
	FailoverTimeout time.Duration
	// Args are extra redis-server arguments for the primary and replicas.
	Args []string
}

// Sentinel is a Sentinel deployment started for a test: one primary, two
// replicas and three sentinels (quorum 2), all redis-server processes on
// loopback; the sentinels are the same binary run with --sentinel, each
// with its own writable config file.
//
// Roles move on failover: Data lists the data nodes as started (Data[0]
// was the first primary); ask Primary for the current one.
type Sentinel struct {
	Name      string    // the master name the sentinels monitor
	Data      []*Server // primary first, then the replicas, as started
	Sentinels []*Server
}

// StartSentinel starts a Sentinel deployment and returns once the primary's
// replicas are in sync and every sentinel knows both replicas and the two
// other sentinels, so that a failover can start at once. Everything stops
// when the test ends.
func StartSentinel(t testing.TB, adjust ...func(*SentinelOptions)) *Sentinel {
	t.Helper()
	sn, err := NewSentinel(adjust...)
	if err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	t.Cleanup(sn.Stop)
	logOnFailure(t, "sentinel", sn.Sentinels...)
	return sn
}

// NewSentinel is StartSentinel for callers without a testing.TB. Call Stop
// when done.
func NewSentinel(adjust ...func(*SentinelOptions)) (*Sentinel, error) {
	o := SentinelOptions{MasterName: "mymaster", DownAfter: time.Second, FailoverTimeout: 3 * time.Second}
	for _, f := range adjust {
		f(&o)
	}
	if o.MasterName == "" {
		o.MasterName = "mymaster"
	}
	sn := &Sentinel{Name: o.MasterName}
	if err := sn.start(o); err != nil {
		sn.Stop()
		return nil, err
	}
	return sn, nil
}

func (sn *Sentinel) start(o SentinelOptions) error {
	primary, err := Start(o.Args...)
	if err != nil {
		return err
	}
	sn.Data = append(sn.Data, primary)
	for range 2 {
		r, err := primary.NewReplica(o.Args...)
		if err != nil {
			return err
		}
		sn.Data = append(sn.Data, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := primary.WaitSync(ctx, sn.Data[1:]...); err != nil {
		return fmt.Errorf("replicas: %w", err)
	}
	conf := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel announce-ip 127.0.0.1
sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s %[3]d
sentinel failover-timeout %[1]s %[4]d
`, o.MasterName, primary.port, o.DownAfter.Milliseconds(), o.FailoverTimeout.Milliseconds())
	for range 3 {
		s, err := launch(nil, func(s *Server) error {
			s.sentinel, s.conf = true, filepath.Join(s.dir, "sentinel.conf")
			return os.WriteFile(s.conf, []byte(conf), 0o600)
		})
		if err != nil {
			return fmt.Errorf("sentinel: %w", err)
		}
		sn.Sentinels = append(sn.Sentinels, s)
	}
	if err := poll(ctx, sn.ready); err != nil {
		return fmt.Errorf("sentinels not ready: %w\n%s", err, tails(sn.Sentinels))
	}
	return nil
}

// ready reports why some sentinel does not yet see the whole deployment.
func (sn *Sentinel) ready() error {
	ctx := context.Background()
	for _, s := range sn.Sentinels {
		replicas, err := sentinelTable(s.do(ctx, "SENTINEL", "REPLICAS", sn.Name))
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", s.Addr(), err)
		}
		good := 0
		for _, r := range replicas {
			if r["master-link-status"] == "ok" && !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") {
				good++
			}
		}
		if good != len(sn.Data)-1 {
			return fmt.Errorf("sentinel %s sees %d good replicas of %d: %v", s.Addr(), good, len(sn.Data)-1, replicas)
		}
		others, err := sentinelTable(s.do(ctx, "SENTINEL", "SENTINELS", sn.Name))
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL SENTINELS: %w", s.Addr(), err)
		}
		if len(others) != len(sn.Sentinels)-1 {
			return fmt.Errorf("sentinel %s knows %d other sentinels of %d", s.Addr(), len(others), len(sn.Sentinels)-1)
		}
	}
	return nil
}

// flatMap decodes a RESP2 field/value array such as SENTINEL MASTER's.
func flatMap(cmd *redis.Cmd) (map[string]string, error) {
	flat, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i := 0; i+1 < len(flat); i += 2 {
		m[fmt.Sprint(flat[i])] = fmt.Sprint(flat[i+1])
	}
	return m, nil
}

// sentinelTable decodes a RESP2 reply of SENTINEL REPLICAS or SENTINELS:
// one flat field/value array per instance.
func sentinelTable(cmd *redis.Cmd) ([]map[string]string, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	var rows []map[string]string
	for _, e := range v {
		row, err := flatMap(redis.NewCmdResult(e, nil))
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// SentinelAddrs returns the sentinels' addresses, as redis.FailoverOptions
// wants them.
func (sn *Sentinel) SentinelAddrs() []string {
	var as []string
	for _, s := range sn.Sentinels {
		as = append(as, s.Addr())
	}
	return as
}

// Primary returns the data node the sentinels report as the primary
// (SENTINEL GET-MASTER-ADDR-BY-NAME). Every sentinel that is running must
// answer, and all must agree: during a failover they may not, and Primary
// returns an error saying so.
func (sn *Sentinel) Primary(ctx context.Context) (*Server, error) {
	addr := ""
	var views []string
	for _, s := range sn.Sentinels {
		if !s.running() {
			continue
		}
		v, err := s.do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sn.Name).StringSlice()
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME %s: %v %v", s.Addr(), sn.Name, v, err)
		}
		a := v[0] + ":" + v[1]
		views = append(views, a)
		if addr == "" {
			addr = a
		} else if a != addr {
			return nil, fmt.Errorf("sentinels disagree on the primary: %v", views)
		}
	}
	if addr == "" {
		return nil, errors.New("no sentinel is running")
	}
	for _, d := range sn.Data {
		if d.Addr() == addr {
			return d, nil
		}
	}
	return nil, fmt.Errorf("sentinels report primary %s, not one of the data nodes", addr)
}

// Failover asks a sentinel to fail over (SENTINEL FAILOVER, retried while
// a sentinel answers that it cannot yet, such as NOGOODSLAVE or INPROG) and
// then waits as WaitFailover does; it returns the new primary.
//
// The old primary, when alive, stays a writable primary after Failover
// returns until the sentinels convert it to a replica, about 9 s later
// with Redis 7 (a sentinel waits 8 s after it first sees a replica report
// itself a master, and reads INFO every 10 s); WaitSettled waits for that.
// min-replicas-to-write (MinReplicas) makes it refuse writes meanwhile.
func (sn *Sentinel) Failover(ctx context.Context) (*Server, error) {
	old, err := sn.Primary(ctx)
	if err != nil {
		return nil, err
	}
	err = poll(ctx, func() error {
		var last error = errors.New("no sentinel is running")
		for _, s := range sn.Sentinels {
			if !s.running() {
				continue
			}
			if last = s.do(ctx, "SENTINEL", "FAILOVER", sn.Name).Err(); last == nil {
				return nil
			}
		}
		return fmt.Errorf("SENTINEL FAILOVER %s: %w", sn.Name, last)
	})
	if err != nil {
		return nil, err
	}
	return sn.WaitFailover(ctx, old)
}

// WaitFailover waits until the sentinels agree on a primary other than
// old and have ended the failover (so clients subscribed to +switch-master
// were told), that primary accepts writes, and every other running data
// node except old replicates it with its link up. It returns the new
// primary. Use it after Kill or Pause of the primary: the sentinels act
// after DownAfter, and elect a leader before the failover.
func (sn *Sentinel) WaitFailover(ctx context.Context, old *Server) (*Server, error) {
	var p *Server
	err := poll(ctx, func() error {
		var err error
		if p, err = sn.Primary(ctx); err != nil {
			return err
		}
		if p == old {
			return fmt.Errorf("sentinels still report %s", old.Addr())
		}
		// GET-MASTER-ADDR-BY-NAME names the promoted replica while the
		// failover still reconfigures the other replicas; SENTINEL MASTER
		// changes with +switch-master, at its end.
		for _, s := range sn.Sentinels {
			if !s.running() {
				continue
			}
			m, err := flatMap(s.do(ctx, "SENTINEL", "MASTER", sn.Name))
			if err != nil {
				return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", s.Addr(), err)
			}
			if m["ip"]+":"+m["port"] != p.Addr() || m["flags"] != "master" {
				return fmt.Errorf("sentinel %s: failover to %s not ended: master %s:%s flags %s", s.Addr(), p.Addr(), m["ip"], m["port"], m["flags"])
			}
		}
		if err := p.writable(ctx); err != nil {
			return err
		}
		for _, d := range sn.Data {
			if d == p || d == old || !d.running() {
				continue
			}
			if err := d.syncedTo(ctx, p, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failover from %s: %w", old.Addr(), err)
	}
	return p, nil
}

// writable reports why s refuses a write, or nil. The write is a DEL of a
// key that does not exist: refused as a write (READONLY, NOREPLICAS) but
// it changes no data and replicates nothing.
func (s *Server) writable(ctx context.Context) error {
	if err := s.do(ctx, "DEL", "leasetest:probe").Err(); err != nil {
		return fmt.Errorf("%s refuses writes: %w", s.Addr(), err)
	}
	return nil
}

// WaitSettled waits until every running data node other than the primary
// the sentinels report (including a demoted old primary) replicates it,
// with its link up and the primary's current offset applied.
func (sn *Sentinel) WaitSettled(ctx context.Context) error {
	var p *Server
	var rest []*Server
	err := poll(ctx, func() error {
		var err error
		if p, err = sn.Primary(ctx); err != nil {
			return err
		}
		rest = rest[:0]
		for _, d := range sn.Data {
			if d == p || !d.running() {
				continue
			}
			if err := d.syncedTo(ctx, p, 0); err != nil {
				return err
			}
			rest = append(rest, d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return p.WaitSync(ctx, rest...)
}

// FailoverClient returns a client that finds the primary through the
// sentinels (redis.NewFailoverClient), closed when the test ends. Options
// may adjust the defaults (master name and sentinel addresses set,
// ContextTimeoutEnabled on: lease.New requires it).
func (sn *Sentinel) FailoverClient(t testing.TB, adjust ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: sn.Name, SentinelAddrs: sn.SentinelAddrs(), ContextTimeoutEnabled: true}
	for _, f := range adjust {
		f(o)
	}
	rdb := redis.NewFailoverClient(o)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// MinReplicas sets min-replicas-to-write n and min-replicas-max-lag maxLag
// on every data node (and for their restarts): a primary then refuses
// writes (NOREPLICAS) unless n replicas acknowledged replication within
// maxLag, so a primary cut off from its replicas — or one whose replicas
// a failover has moved to the new primary — stops accepting writes.
// maxLag counts whole seconds (at least 1s), as Redis does.
func (sn *Sentinel) MinReplicas(t testing.TB, n int, maxLag time.Duration) {
	t.Helper()
	if maxLag < time.Second || maxLag%time.Second != 0 {
		t.Fatalf("leasetest: min-replicas-max-lag %v: Redis counts it in whole seconds, at least 1s", maxLag)
	}
	ctx := context.Background()
	for _, d := range sn.Data {
		for _, kv := range [][2]string{
			{"min-replicas-to-write", strconv.Itoa(n)},
			{"min-replicas-max-lag", strconv.Itoa(int(maxLag / time.Second))},
		} {
			if err := d.SetConfig(ctx, kv[0], kv[1]); err != nil {
				t.Fatalf("leasetest: %v", err)
			}
		}
	}
}

// Stop stops every process of the deployment.
func (sn *Sentinel) Stop() {
	for _, s := range append(append([]*Server(nil), sn.Sentinels...), sn.Data...) {
		s.Stop()
	}
}
