package lease_test

// Adversary round 70b on Check over a Cluster (5b3bc64). Also held, not
// kept (half a minute each): a paused master (SIGSTOP, with
// cluster-require-full-coverage no) fails its own 7 steps only, in 17-32s
// (7 steps of at most 5s), also with ReadTimeout -1 and no deadline.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var adv70bRules = append(append([]string{}, leastPrivilege...), "+cluster|slots", "+command", "+asking")

func adv70bByMaster(steps []lease.CheckStep) (map[string]int, map[string]int) {
	n, bad := map[string]int{}, map[string]int{}
	for _, s := range steps {
		addr := "(none)"
		if strings.HasPrefix(s.Name, "master ") {
			addr, _, _ = strings.Cut(strings.TrimPrefix(s.Name, "master "), ": ")
		}
		n[addr]++
		if s.Err != nil {
			bad[addr]++
		}
	}
	return n, bad
}

// One master's user may touch no lease key at all: every one of that
// master's steps must fail, and no other one (the keys of each label are
// on that master); afterwards no check key is left on any node.
func TestAdversary70b_KeysOnLabelledMaster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	c, _ := newClient(t, cl.ACLUser(t, "u70b", "pw", adv70bRules...))
	odd, err := cl.MasterForSlot(ctx, 16383)
	if err != nil {
		t.Fatal(err)
	}
	if err := odd.Client(t).Do(ctx, "ACL", "SETUSER", "u70b", "resetkeys", "~other:*").Err(); err != nil {
		t.Fatal(err)
	}
	steps, err := c.Check(ctx)
	adv70Log(t, steps)
	if err == nil {
		t.Fatal("Check passed")
	}
	n, bad := adv70bByMaster(steps)
	t.Logf("steps %v failed %v", n, bad)
	if len(n) != 3 {
		t.Errorf("masters %v", n)
	}
	for addr, k := range n {
		if k != 7 {
			t.Errorf("%s: %d steps", addr, k)
		}
		if addr == odd.Addr() && bad[addr] != 7 {
			t.Errorf("odd master %s: %d of 7 failed", addr, bad[addr])
		}
		if addr != odd.Addr() && bad[addr] != 0 {
			t.Errorf("master %s: %d failed", addr, bad[addr])
		}
	}
	// The ACL log of the others holds no refusal.
	for _, s := range cl.Nodes {
		log, err := s.Client(t).Do(ctx, "ACL", "LOG").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if s != odd && len(log) > 0 {
			t.Errorf("%s ACL LOG: %v", s.Addr(), log)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	for _, s := range cl.Nodes {
		keys, err := s.Client(t).Keys(ctx, "*leasegen-check*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("%s keeps %v", s.Addr(), keys)
		}
	}
}

// A prefix with separators (no braces allowed); leasetest needs 3 masters.
func TestAdversary70b_Prefix(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	prefix := "a:%c|d#,"
	rules := []string{"~" + prefix + "*", "&" + prefix + "*"}
	rules = append(rules, adv70bRules[3:]...)
	c, _ := newClient(t, cl.ACLUser(t, "u70b", "pw", rules...), lease.WithPrefix(prefix))
	steps, err := c.Check(ctx)
	adv70Log(t, steps)
	if err != nil {
		t.Errorf("Check: %v", err)
	}
	n, _ := adv70bByMaster(steps)
	if len(n) != 3 {
		t.Errorf("steps %v", n)
	}
	time.Sleep(1500 * time.Millisecond)
	for _, s := range cl.Nodes {
		keys, _ := s.Client(t).Keys(ctx, "*").Result()
		if len(keys) > 0 {
			t.Errorf("left on %s: %v", s.Addr(), keys)
		}
	}
}

// Finding (4/4 before the fix): after a failover (master killed, replica
// promoted, cluster ok again), the first Check labelled the promoted
// master from a fresh CLUSTER SLOTS, but its Clients share the go-redis
// client's slot map, still the old one: a step of the promoted master
// failed with "dial tcp <killed master>: connection refused" (or
// subscription_failed to it); the next Check passed. Check now reloads
// that map until it routes each master's keys to it. Replicas whose user
// is off do not matter.
func TestAdversary70b_FailoverAndReplicas(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	rdb := cl.ACLUser(t, "u70b", "pw", adv70bRules...)
	c, _ := newClient(t, rdb)
	if _, err := c.Check(ctx); err != nil {
		t.Fatalf("first Check: %v", err)
	}
	to, err := cl.KillMaster(ctx, lockKey("x"))
	if err != nil {
		t.Fatal(err)
	}
	// Replicas of every master: user off.
	for _, s := range cl.Nodes {
		if s == to.Killed {
			continue
		}
		role, _ := s.Client(t).Do(ctx, "ROLE").Slice()
		if len(role) > 0 && role[0] == "slave" {
			s.Client(t).Do(ctx, "ACL", "SETUSER", "u70b", "off")
		}
	}
	start := time.Now()
	steps, err := c.Check(ctx)
	adv70Log(t, steps)
	n, bad := adv70bByMaster(steps)
	t.Logf("took %v steps %v failed %v", time.Since(start), n, bad)
	if err != nil {
		t.Errorf("Check after failover: %v", err)
	}
	steps2, err2 := c.Check(ctx)
	n2, bad2 := adv70bByMaster(steps2)
	t.Logf("second Check: steps %v failed %v err %v", n2, bad2, err2)
	if _, ok := n[to.Killed.Addr()]; ok {
		t.Errorf("steps labelled with the killed master %s", to.Killed.Addr())
	}
	if n[to.Promoted.Addr()] != 7 {
		t.Errorf("promoted %s: %d steps", to.Promoted.Addr(), n[to.Promoted.Addr()])
	}
}

// Close during a Cluster Check ends it promptly, wrapping ErrClosed.
func TestAdversary70b_CloseDuringClusterCheck(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rdb := cl.ACLUser(t, "u70b", "pw", adv70bRules...)
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Check(context.Background()); done <- err }()
	time.Sleep(1200 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrClosed) {
			t.Errorf("err %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Check still running 2s after Close")
	}
}

// CLUSTER SLOTS refused: one failed step, naming it (seven more failed
// with the same cause before: go-redis routes by that map).
func TestAdversary70b_SlotsRefused(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	c, _ := newClient(t, cl.ACLUser(t, "u70b", "pw", without(adv70bRules, "+cluster|slots")...))
	steps, err := c.Check(context.Background())
	adv70Log(t, steps)
	n, bad := adv70bByMaster(steps)
	t.Logf("steps %v failed %v err=%v", n, bad, err)
	if err == nil {
		t.Error("Check passed without CLUSTER SLOTS")
	}
	if len(steps) != 1 || !namesCommand(steps[0].Err, "cluster|slots") {
		t.Errorf("%d steps, want one naming CLUSTER SLOTS", len(steps))
	}
}
