package leasetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions adjust a cluster's deployment.
type ClusterOptions struct {
	// NodeTimeout is cluster-node-timeout: how long a node may not answer
	// before the others think it failing; a replica's failover starts soon
	// after. When zero: 5s for a cluster without replicas, 2s with.
	NodeTimeout time.Duration
	// Args are extra redis-server arguments for every node.
	Args []string
}

// Cluster is a Redis Cluster started for a test: masters that split the
// 16384 slots evenly, each with the same number of replicas, all on
// loopback.
type Cluster struct {
	// Nodes are every node as started: the masters, then the replicas of
	// the first master, of the second, and so on. Roles move on failover:
	// ask MasterForSlot and ReplicasOf for the current ones.
	Nodes []*Server
	ids   map[*Server]string // cluster node IDs, kept across Restart in nodes.conf
	args  []string           // every node's redis-server arguments (see AddMaster)
}

// StartCluster starts a cluster of masters (at least 3) without replicas
// and returns once every node reports cluster_state:ok. The nodes stop
// when the test ends.
func StartCluster(t testing.TB, masters int, adjust ...func(*ClusterOptions)) *Cluster {
	t.Helper()
	return StartClusterReplicas(t, masters, 0, adjust...)
}

// StartClusterReplicas starts a cluster of masters (at least 3), each with
// replicas replicas, and returns once every node reports cluster_state:ok,
// all nodes agree on who owns which slots and every replica's link to its
// master is up. The nodes stop when the test ends.
func StartClusterReplicas(t testing.TB, masters, replicas int, adjust ...func(*ClusterOptions)) *Cluster {
	t.Helper()
	c, err := NewCluster(masters, replicas, adjust...)
	if err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	t.Cleanup(c.Stop)
	logOnFailure(t, "cluster node", c.Nodes...)
	return c
}

// NewCluster is StartClusterReplicas for callers without a testing.TB.
// Call Stop when done.
func NewCluster(masters, replicas int, adjust ...func(*ClusterOptions)) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("a cluster needs at least 3 masters, got %d", masters)
	}
	if replicas < 0 {
		return nil, fmt.Errorf("negative replicas per master: %d", replicas)
	}
	o := ClusterOptions{NodeTimeout: 5 * time.Second}
	if replicas > 0 {
		o.NodeTimeout = 2 * time.Second
	}
	for _, f := range adjust {
		f(&o)
	}
	c := &Cluster{ids: map[*Server]string{}}
	args := append([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10)}, o.Args...)
	c.args = args
	for range masters * (1 + replicas) {
		s, err := Start(args...)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	if err := c.form(masters, replicas); err != nil {
		err = fmt.Errorf("forming the cluster: %w\n%s", err, tails(c.Nodes))
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) form(masters, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range c.Nodes {
		id, err := s.do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", s.Addr(), err)
		}
		c.ids[s] = id
	}
	// Distinct config epochs before the nodes meet, as redis-cli --cluster
	// create does: otherwise epoch collisions are resolved by bumps that a
	// replica may not have heard of when its master dies, and the masters
	// then deny its failover ("slot epoch > reqEpoch") for good.
	for i, s := range c.Nodes[:masters] {
		if err := s.do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", s.Addr(), err)
		}
	}
	per := 16384 / masters
	for i, s := range c.Nodes[:masters] {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if err := s.do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("ADDSLOTSRANGE on %s: %w", s.Addr(), err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if err := s.do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.Nodes[0].port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET on %s: %w", s.Addr(), err)
		}
	}
	for i := range masters {
		for k := range replicas {
			r, m := c.Nodes[masters+i*replicas+k], c.Nodes[i]
			// The replica must have heard of its master first.
			err := poll(ctx, func() error { return r.do(ctx, "CLUSTER", "REPLICATE", c.ids[m]).Err() })
			if err != nil {
				return fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr(), err)
			}
		}
	}
	return poll(ctx, func() error {
		views, err := c.check(ctx)
		if err != nil {
			return err
		}
		for s, v := range views {
			if len(v.nodes) != len(c.Nodes) {
				return fmt.Errorf("%s knows %d nodes of %d", s.Addr(), len(v.nodes), len(c.Nodes))
			}
			for _, m := range c.Nodes[:masters] {
				if n := len(v.replicasOf(c.ids[m])); n != replicas {
					return fmt.Errorf("%s sees %d replicas of %s, want %d", s.Addr(), n, m.Addr(), replicas)
				}
			}
		}
		return nil
	})
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
// ContextTimeoutEnabled set (lease.New requires it) and the password of
// nodes started with --requirepass (ClusterOptions.Args).
func (c *Cluster) Client(t testing.TB, adjust ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
	if len(c.Nodes) > 0 { // the password of nodes started with --requirepass
		s := c.Nodes[0]
		s.mu.Lock()
		o.Password = passwordIn(s.args)
		s.mu.Unlock()
	}
	for _, f := range adjust {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// MasterForKey returns the master that owns key's slot, as MasterForSlot.
func (c *Cluster) MasterForKey(ctx context.Context, key string) (*Server, error) {
	return c.MasterForSlot(ctx, Slot(key))
}

// MasterForSlot returns the master that owns slot in the views of every
// running node (CLUSTER NODES); when they disagree, as they may during a
// failover or migration, it returns an error saying so.
func (c *Cluster) MasterForSlot(ctx context.Context, slot int) (*Server, error) {
	owner := ""
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		v, err := c.view(ctx, s)
		if err != nil {
			return nil, err
		}
		id := v.owner(slot)
		if owner == "" {
			owner = id
		} else if id != owner {
			return nil, fmt.Errorf("nodes disagree on the owner of slot %d: %s and %s", slot, c.name(owner), c.name(id))
		}
	}
	if s := c.byID(owner); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("slot %d: owner %q is not a node of this cluster", slot, owner)
}

// ReplicasOf returns the nodes that replicate m in m's own view.
func (c *Cluster) ReplicasOf(ctx context.Context, m *Server) ([]*Server, error) {
	v, err := c.view(ctx, m)
	if err != nil {
		return nil, err
	}
	var rs []*Server
	for _, id := range v.replicasOf(c.ids[m]) {
		rs = append(rs, c.byID(id))
	}
	return rs, nil
}

// WaitOK waits until every running node reports cluster_state:ok, all of
// them agree on which master owns which slots (and its config epoch) and
// on every running node's role, none sees a running node as failing, every
// slot owner is running and every running replica's link to its master is
// up.
func (c *Cluster) WaitOK(ctx context.Context) error {
	return poll(ctx, func() error { _, err := c.check(ctx); return err })
}

// Takeover is what KillMaster did: the master it killed, the replica that
// took over its slots, and how long the cluster took to be ok again.
type Takeover struct {
	Killed, Promoted *Server
	Took             time.Duration
}

// KillMaster kills (SIGKILL) the master that owns key's slot and waits, as
// WaitFailover does, until a replica has taken over. The cluster needs
// replicas (StartClusterReplicas).
func (c *Cluster) KillMaster(ctx context.Context, key string) (Takeover, error) {
	m, err := c.MasterForKey(ctx, key)
	if err != nil {
		return Takeover{}, err
	}
	slots, err := c.slotsOf(ctx, m)
	if err != nil {
		return Takeover{}, err
	}
	m.Kill()
	start := time.Now()
	p, err := c.waitTakeover(ctx, m, slots)
	return Takeover{Killed: m, Promoted: p, Took: time.Since(start)}, err
}

// WaitFailover waits until another node owns every slot that old owns when
// the call begins and the cluster is ok (WaitOK) again; it returns that
// node. Call it after Kill or Pause of a master.
func (c *Cluster) WaitFailover(ctx context.Context, old *Server) (*Server, error) {
	slots, err := c.slotsOf(ctx, old)
	if err != nil {
		return nil, err
	}
	return c.waitTakeover(ctx, old, slots)
}

func (c *Cluster) waitTakeover(ctx context.Context, old *Server, slots []slotRange) (*Server, error) {
	var p *Server
	err := poll(ctx, func() error {
		views, err := c.check(ctx)
		if err != nil {
			return err
		}
		for _, v := range views {
			id := v.owner(slots[0].lo)
			for _, r := range slots {
				if v.owner(r.lo) != id || v.owner(r.hi) != id {
					return fmt.Errorf("slots %v of %s split between nodes", slots, old.Addr())
				}
			}
			if p = c.byID(id); p == old {
				return fmt.Errorf("%s still owns its slots", old.Addr())
			}
			return nil // check made sure all views agree
		}
		return errors.New("no node is running")
	})
	if err != nil {
		return nil, fmt.Errorf("failover of %s: %w", old.Addr(), err)
	}
	return p, nil
}

// slotsOf returns the slots m owns in the view of a running node.
func (c *Cluster) slotsOf(ctx context.Context, m *Server) ([]slotRange, error) {
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		v, err := c.view(ctx, s)
		if err != nil {
			return nil, err
		}
		if n, ok := v.nodes[c.ids[m]]; ok && len(n.slots) > 0 {
			return n.slots, nil
		}
		return nil, fmt.Errorf("%s owns no slots in the view of %s", m.Addr(), s.Addr())
	}
	return nil, errors.New("no node is running")
}

// check reports why the cluster is not ok (see WaitOK), or returns every
// running node's view.
func (c *Cluster) check(ctx context.Context) (map[*Server]*clusterView, error) {
	views := map[*Server]*clusterView{}
	replicasOf := map[*Server][]*Server{}
	var first *Server
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		info, err := s.do(ctx, "CLUSTER", "INFO").Text()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr(), err)
		}
		if f := parseInfo(info); f["cluster_state"] != "ok" || f["cluster_slots_ok"] != "16384" {
			return nil, fmt.Errorf("%s: cluster_state %s, cluster_slots_ok %s", s.Addr(), f["cluster_state"], f["cluster_slots_ok"])
		}
		v, err := c.view(ctx, s)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = s
		} else if a, b := views[first].slotMap(), v.slotMap(); a != b {
			return nil, fmt.Errorf("%s and %s disagree on slot owners:\n%s\n%s", first.Addr(), s.Addr(), a, b)
		} else if a, b := c.roles(views[first]), c.roles(v); a != b {
			return nil, fmt.Errorf("%s and %s disagree on roles:\n%s\n%s", first.Addr(), s.Addr(), a, b)
		}
		for _, n := range v.nodes {
			if o := c.byID(n.id); len(n.slots) > 0 && (o == nil || !o.running()) {
				return nil, fmt.Errorf("%s: slots %v owned by %s, which is down", s.Addr(), n.slots, c.name(n.id))
			}
		}
		for _, o := range c.Nodes {
			if n := v.nodes[c.ids[o]]; o.running() && (n == nil || n.flags["fail"] || n.flags["fail?"]) {
				return nil, fmt.Errorf("%s does not yet see %s as a healthy node", s.Addr(), o.Addr())
			}
		}
		if me := v.nodes[c.ids[s]]; me != nil && (me.flags["slave"] || me.flags["replica"]) {
			repl, err := s.info(ctx, "replication")
			if err != nil {
				return nil, err
			}
			if repl["master_link_status"] != "up" {
				return nil, fmt.Errorf("replica %s: link to %s is %s", s.Addr(), c.name(me.master), repl["master_link_status"])
			}
			if m := c.byID(me.master); m != nil && m.running() {
				replicasOf[m] = append(replicasOf[m], s)
			}
		}
		views[s] = v
	}
	if first == nil {
		return nil, errors.New("no node is running")
	}
	// A replica whose link is up may still be in wait_bgsave on its
	// master's side, and a master streams nothing to it until its first
	// REPLCONF ACK: WAIT would not count it yet (a lease Client with
	// WithReplicas refuses its grants). Healthy means counted.
	for m, rs := range replicasOf {
		if err := m.online(ctx, rs); err != nil {
			return nil, err
		}
		if err := m.acknowledged(ctx, len(rs)); err != nil {
			return nil, err
		}
	}
	return views, nil
}

func (c *Cluster) byID(id string) *Server {
	for s, sid := range c.ids {
		if sid == id {
			return s
		}
	}
	return nil
}

// name describes a node ID for messages.
func (c *Cluster) name(id string) string {
	if s := c.byID(id); s != nil {
		return s.Addr()
	}
	return "node " + id
}

type slotRange struct{ lo, hi int }

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	flags  map[string]bool
	master string // the master's ID for a replica, else "-"
	epoch  string // config epoch
	slots  []slotRange
}

// clusterView is one node's CLUSTER NODES.
type clusterView struct{ nodes map[string]*clusterNode }

func (c *Cluster) view(ctx context.Context, s *Server) (*clusterView, error) {
	text, err := s.do(ctx, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
	}
	return parseClusterNodes(text)
}

// parseClusterNodes reads CLUSTER NODES:
//
//	<id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
//
// Slots are single numbers or lo-hi ranges; entries in brackets are
// migrations in progress, which do not change the owner.
func parseClusterNodes(text string) (*clusterView, error) {
	v := &clusterView{nodes: map[string]*clusterNode{}}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: too few fields", line)
		}
		n := &clusterNode{id: f[0], flags: map[string]bool{}, master: f[3], epoch: f[6]}
		for fl := range strings.SplitSeq(f[2], ",") {
			n.flags[fl] = true
		}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES: bad slot %q", sl)
			}
			n.slots = append(n.slots, slotRange{l, h})
		}
		v.nodes[n.id] = n
	}
	return v, nil
}

// owner returns the ID of the node that owns slot in this view, or "".
func (v *clusterView) owner(slot int) string {
	for _, n := range v.nodes {
		for _, r := range n.slots {
			if r.lo <= slot && slot <= r.hi {
				return n.id
			}
		}
	}
	return ""
}

// replicasOf returns the IDs of the replicas of master that are not
// marked failed.
func (v *clusterView) replicasOf(master string) []string {
	var ids []string
	for _, n := range v.nodes {
		if n.master == master && !n.flags["fail"] {
			ids = append(ids, n.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// roles renders the role of every running node in view v, comparable
// between views.
func (c *Cluster) roles(v *clusterView) string {
	var b strings.Builder
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		n := v.nodes[c.ids[s]]
		switch {
		case n == nil:
			fmt.Fprintf(&b, "%s unknown\n", s.Addr())
		case n.master != "-":
			fmt.Fprintf(&b, "%s replica of %s\n", s.Addr(), c.name(n.master))
		default:
			fmt.Fprintf(&b, "%s master\n", s.Addr())
		}
	}
	return b.String()
}

// slotMap renders who owns which slots with which config epoch,
// comparable between views: a replica that has not heard of its master's
// current epoch could not fail over.
func (v *clusterView) slotMap() string {
	var lines []string
	for _, n := range v.nodes {
		if len(n.slots) > 0 {
			lines = append(lines, fmt.Sprint(n.id, " epoch ", n.epoch, " ", n.slots))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
