package lease_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// adv32Hook is a go-redis hook: before runs ahead of every command (and
// may answer it itself).
type adv32Hook struct {
	before func(ctx context.Context, cmd redis.Cmder) error
}

func (h adv32Hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h adv32Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.before(ctx, cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h adv32Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// adv32WaitLoaded waits for c's command-table load to be over.
func adv32WaitLoaded(t *testing.T, c *lease.Client, within time.Duration) {
	t.Helper()
	select {
	case <-lease.CommandTableReady(c):
	case <-time.After(within):
		t.Fatalf("the command-table load was not over after %v", within)
	}
}

// A hook that answers a command whose context has already ended at once
// (the usual guard of a rate limiter or a circuit breaker: golang.org/x/time/rate's
// Wait does so) made the load's look fast without loading anything: the
// Client took the table for loaded, and its first call, with every node
// silent by then, waited out go-redis's own load (5 s) with a 600 ms
// Deadline.
func TestAdversary32_HookAnsweringEndedContextKeepsDeadline(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rdb := cl.Client(t)
	rdb.AddHook(adv32Hook{before: func(ctx context.Context, _ redis.Cmder) error { return ctx.Err() }})
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adv32WaitLoaded(t, c, 3*time.Second)
	for _, m := range cl.Nodes {
		m.Pause()
		defer m.Resume()
	}
	const deadline = 600 * time.Millisecond
	start := time.Now()
	entered := false
	err = c.Do(context.Background(), "adv32-hook", lease.Spec{TTL: 2 * time.Second, Deadline: deadline},
		func(context.Context) error { entered = true; return nil })
	took := time.Since(start)
	t.Logf("Do: %v after %v", err, took.Round(time.Millisecond))
	if err == nil || entered {
		t.Errorf("Do with every master paused entered or succeeded: %v", err)
	}
	if took > deadline+300*time.Millisecond {
		t.Errorf("Do returned after %v with a %v Deadline: %v", took, deadline, err)
	}
}

// A hook that takes a while on every command (here 80 ms: a synchronous
// log, a concurrency limiter) made every look at the table slow, so the
// Client never took it for loaded: on a healthy Cluster, every Do was
// refused ("still loading its command table") for as long as the Client
// lived.
func TestAdversary32_SlowHookDoesNotRefuseForever(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rdb := cl.Client(t)
	rdb.AddHook(adv32Hook{before: func(context.Context, redis.Cmder) error {
		time.Sleep(80 * time.Millisecond)
		return nil
	}})
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(time.Second)
	err = c.Do(context.Background(), "adv32-slow", lease.Spec{TTL: 2 * time.Second, Deadline: 2 * time.Second},
		func(context.Context) error { return nil })
	if err != nil {
		t.Errorf("Do on a healthy Cluster through a slow hook: %v", err)
	}
	if errors.Is(err, lease.ErrRefused) && strings.Contains(err.Error(), "command table") {
		t.Errorf("refused for the command table a second after New, on a healthy Cluster")
	}
}

// Close while the command table is loading, every node paused: the
// load's goroutine ends once the go-redis client is closed too, and the
// Client's calls after Close say ErrClosed.
func TestAdversary32_CloseDuringLoadLeavesNothing(t *testing.T) {
	cl := leasetest.StartCluster(t, 3)
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	for _, m := range cl.Nodes {
		m.Pause()
	}
	resumed := false
	defer func() {
		if !resumed {
			for _, m := range cl.Nodes {
				m.Resume()
			}
		}
	}()
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c.Close()
	err = c.Do(context.Background(), "adv32-close", lease.Spec{TTL: time.Second, Deadline: 300 * time.Millisecond}, func(context.Context) error { return nil })
	if !errors.Is(err, lease.ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
	closed := time.Now()
	rdb.Close()
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left %v after Close (the go-redis client closed too): %v", time.Since(closed), err)
	}
	t.Logf("all gone %v after Close", time.Since(closed).Round(time.Millisecond))
	for _, m := range cl.Nodes {
		m.Resume()
	}
	resumed = true
}

// WatchLeader on a fresh Client whose command-table load is held up
// (every node paused after go-redis got its slot map) read the leader
// without waiting for the load: go-redis started it under its own 5 s
// timeout, and the watch (with a 600 ms context) went on for 5 s. Now
// it reports the refusal and ends with its context.
func TestAdversary32_WatchLeaderOnFreshClientKeepsContext(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rdb := cl.Client(t)
	c := adv32NewWithNodesPaused(t, cl, rdb)
	const budget = 600 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	var seen []lease.Leader
	for l := range c.WatchLeader(ctx, "adv32-watch") {
		seen = append(seen, l)
	}
	took := time.Since(start)
	t.Logf("WatchLeader: %v, ended after %v", seen, took.Round(time.Millisecond))
	if took > budget+300*time.Millisecond {
		t.Errorf("WatchLeader with a %v context ended after %v", budget, took)
	}
	for _, l := range seen {
		if l.Err == nil {
			t.Errorf("WatchLeader reported %+v with every node paused", l)
		}
	}
}

// List with a ReadOnly Cluster client (go-redis then loads the command
// table for a pipeline, to see whether its commands may go to replicas)
// on fresh Clients whose load is held up by paused masters: List
// inspected its keys with a pipeline that started go-redis's own load,
// and returned after up to 5 s with a 600 ms context.
func TestAdversary32_ListReadOnlyOnFreshClientKeepsContext(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3, func(o *leasetest.ClusterOptions) { o.NodeTimeout = time.Minute })
	ctx := context.Background()
	masters := slices.Clone(cl.Nodes[:3])
	slices.SortFunc(masters, func(a, b *leasetest.Server) int { return strings.Compare(a.Addr(), b.Addr()) })
	first := masters[0] // List scans the masters in the order of their addresses
	key := ""
	for i := 0; key == ""; i++ {
		k := "adv32-list-" + strconv.Itoa(i)
		if m, err := cl.MasterForKey(ctx, "lease:{"+k+"}:l"); err != nil {
			t.Fatal(err)
		} else if m == first {
			key = k
		}
	}
	c0, err := lease.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	hold, held := make(chan struct{}), make(chan struct{})
	go func() {
		_ = c0.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, func(context.Context) error {
			close(held)
			<-hold
			return nil
		})
	}()
	defer close(hold)
	<-held
	var rdbs []*redis.ClusterClient
	for range 4 { // each with its slot map, without its command table
		rdb := cl.Client(t, func(o *redis.ClusterOptions) { o.ReadOnly = true })
		if err := rdb.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }); err != nil {
			t.Fatal(err)
		}
		rdbs = append(rdbs, rdb)
	}
	for _, m := range masters[1:] {
		m.Pause()
		defer m.Resume()
	}
	const budget = 600 * time.Millisecond
	for run, rdb := range rdbs {
		c, err := lease.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithTimeout(ctx, budget)
		start := time.Now()
		page, _, err := c.List(lctx, "*", "")
		took := time.Since(start)
		cancel()
		c.Close()
		t.Logf("run %d: List: %d leases, %v, after %v", run, len(page), err, took.Round(time.Millisecond))
		if took > budget+300*time.Millisecond {
			t.Errorf("run %d: List with a %v context returned after %v: %v", run, budget, took, err)
		}
		if err == nil {
			t.Errorf("run %d: List with two masters paused: no error", run)
		}
	}
}

// Held: an ACL user without +command (go-redis's command-table load is
// refused at once, NOPERM, and tried again by go-redis on each command)
// is not refused for the table: the load counts as over, and Do gets its
// lease on a healthy Cluster.
func TestAdversary32_ACLWithoutCommandNotRefusedForTable(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rdb := cl.ACLUser(t, "adv32nocmd", "secret", "~lease:*", "&lease:*", "-@all",
		"+evalsha", "+eval", "+get", "+set", "+pttl", "+pexpire", "+del", "+exists", "+time", "+publish",
		"+zadd", "+zrem", "+zrange", "+hset", "+hget", "+hdel", "+subscribe", "+unsubscribe", "+pubsub|numsub",
		"+cluster|slots", "+asking")
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adv32WaitLoaded(t, c, 3*time.Second)
	for i := range 3 {
		if err := c.Do(context.Background(), "adv32-nocmd-"+strconv.Itoa(i), lease.Spec{TTL: 2 * time.Second, Deadline: 2 * time.Second},
			func(context.Context) error { return nil }); err != nil {
			t.Errorf("Do %d by a user without +command: %v", i, err)
		}
	}
}

// Held: with DisableRoutingPolicies (and no ReadOnly) go-redis never loads
// the command table on a command's path, so there is nothing to wait for:
// with every node paused after go-redis got its slot map, the load is over
// at once and Do ends by its Deadline without the table's refusal.
func TestAdversary32_DisableRoutingPoliciesNoWait(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rdb := cl.Client(t, func(o *redis.ClusterOptions) { o.DisableRoutingPolicies = true })
	c := adv32NewWithNodesPaused(t, cl, rdb)
	adv32WaitLoaded(t, c, 100*time.Millisecond)
	const deadline = 600 * time.Millisecond
	start := time.Now()
	err := c.Do(context.Background(), "adv32-norouting", lease.Spec{TTL: 2 * time.Second, Deadline: deadline},
		func(context.Context) error { return nil })
	took := time.Since(start)
	t.Logf("Do: %v after %v", err, took.Round(time.Millisecond))
	if err == nil || strings.Contains(err.Error(), "command table") {
		t.Errorf("Do with every node paused: %v, want a failure that is not the table's", err)
	}
	if took > deadline+300*time.Millisecond {
		t.Errorf("Do returned after %v with a %v Deadline", took, deadline)
	}
}

// Held: a seed list that starts with a dead address (connection refused)
// and a second Client on the same go-redis client: the load is over
// quickly and both Clients' first calls get their leases.
func TestAdversary32_DeadSeedAndSharedClient(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	rdb := cl.Client(t, func(o *redis.ClusterOptions) { o.Addrs = append([]string{deadAddr}, o.Addrs...) })
	var cs []*lease.Client
	for range 2 {
		c, err := lease.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	for i, c := range cs {
		adv32WaitLoaded(t, c, 2*time.Second)
		if err := c.Do(context.Background(), "adv32-seed-"+strconv.Itoa(i), lease.Spec{TTL: 2 * time.Second, Deadline: 2 * time.Second},
			func(context.Context) error { return nil }); err != nil {
			t.Errorf("Client %d: Do: %v", i, err)
		}
	}
}

// adv32NewWithNodesPaused lets rdb load its slot map, pauses every node of
// cl (resumed when the test ends) and returns a new lease Client on rdb,
// closed when the test ends: its command-table load finds no node.
func adv32NewWithNodesPaused(t *testing.T, cl *leasetest.Cluster, rdb *redis.ClusterClient) *lease.Client {
	t.Helper()
	if err := rdb.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, m := range cl.Nodes {
		m.Pause()
		t.Cleanup(m.Resume)
	}
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
