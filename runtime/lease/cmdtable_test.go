package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// A fresh Client on a Cluster with one master paused: go-redis's Cluster
// client loads the servers' command table on its first routed command,
// from up to 3 random nodes one after another, under a 5 s timeout of its
// own that ignores the command's context. Do used to return after 5.0 s
// with a 600 ms Deadline, for a key on a live master too (found by
// adversary round 31c). Now every call returns within its Deadline: a
// grant, or (while the load is held up by the paused node) ErrRefused with
// nothing sent; the paused master's key is never granted.
func TestClusterFreshClientWithPausedMasterKeepsDeadline(t *testing.T) {
	t.Parallel()
	// The master stays paused for longer than the default node timeout
	// (5 s): the others would mark it failed, and the Cluster would answer
	// CLUSTERDOWN after the resume.
	cl := leasetest.StartCluster(t, 3, func(o *leasetest.ClusterOptions) { o.NodeTimeout = time.Minute })
	ctx := context.Background()
	stuck, err := cl.MasterForKey(ctx, "lease:{ct-stuck}:l")
	if err != nil {
		t.Fatal(err)
	}
	live := ""
	for i := 0; live == ""; i++ {
		k := "ct-live:" + strconv.Itoa(i)
		if m, err := cl.MasterForKey(ctx, "lease:{"+k+"}:l"); err != nil {
			t.Fatal(err)
		} else if m != stuck {
			live = k
		}
	}
	stuck.Pause()
	resumed := false
	defer func() {
		if !resumed {
			stuck.Resume()
		}
	}()
	const deadline = 600 * time.Millisecond
	spec := lease.Spec{TTL: 2 * time.Second, Deadline: deadline}
	refusedLoading := 0
	for run := range 4 {
		c, err := lease.New(cl.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{live, "ct-stuck"} {
			entered := false
			start := time.Now()
			err := c.Do(ctx, key, spec, func(context.Context) error { entered = true; return nil })
			took := time.Since(start)
			t.Logf("run %d key %s (live master %v): %v after %v", run, key, key == live, err, took.Round(time.Millisecond))
			if took > deadline+300*time.Millisecond {
				t.Errorf("run %d: Do on %q returned after %v with a %v Deadline: %v", run, key, took, deadline, err)
			}
			switch {
			case key != live && (err == nil || entered):
				t.Errorf("run %d: Do on the paused master's key %q entered or succeeded: %v", run, key, err)
			case err != nil && !errors.Is(err, lease.ErrRefused) && !errors.Is(err, lease.ErrUnknown):
				t.Errorf("run %d: Do on %q: %v, want a grant, ErrRefused or ErrUnknown", run, key, err)
			}
			if errors.Is(err, lease.ErrRefused) && strings.Contains(err.Error(), "command table") {
				refusedLoading++
			}
		}
		c.Close()
	}
	t.Logf("%d calls refused while the command table loaded", refusedLoading)
	// Inspect, Leader and ForceRelease, each the first call of a fresh
	// Client, keep their context's deadline too.
	for run := range 2 {
		for _, op := range []string{"inspect", "leader", "force"} {
			c, err := lease.New(cl.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			octx, cancel := context.WithTimeout(ctx, deadline)
			start := time.Now()
			switch op {
			case "inspect":
				_, err = c.Inspect(octx, live)
			case "leader":
				_, err = c.Leader(octx, live)
			case "force":
				_, err = c.ForceRelease(octx, live, strings.Repeat("ab", 16))
			}
			cancel()
			took := time.Since(start)
			t.Logf("run %d: %s: %v after %v", run, op, err, took.Round(time.Millisecond))
			if took > deadline+300*time.Millisecond {
				t.Errorf("run %d: %s of %q, the first call of a fresh Client, returned after %v with a %v context: %v", run, op, live, took, deadline, err)
			}
			c.Close()
		}
	}
	// Once the node answers again, a fresh Client's calls go through.
	stuck.Resume()
	resumed = true
	c, err := lease.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, key := range []string{live, "ct-stuck"} {
		if err := c.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second}, func(context.Context) error { return nil }); err != nil {
			t.Errorf("after the resume, Do on %q: %v", key, err)
		}
	}
}

// Loading the command table sends nothing of the lease's own: its look is
// a routed command whose context has already ended, so that go-redis
// loads the table and then fails to send it. No node sees it, and a call
// right after New is not held up.
func TestClusterCommandTableLoadSendsNothing(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	c, err := lease.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := c.Do(ctx, "ct-first", lease.Spec{TTL: 2 * time.Second, Deadline: 2 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("first call on a fresh Client: %v", time.Since(start).Round(time.Millisecond))
	gets := 0
	var all strings.Builder
	for _, addr := range cl.Addrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		stats, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_ = rdb.Close()
		// The look is a GET of "{%cmdtable}"; the call's own is its
		// release's GET of the lock, on the node of "ct-first"'s slot.
		for _, l := range strings.Split(stats, "\n") {
			if strings.HasPrefix(l, "cmdstat_get:") {
				var n int
				fmt.Sscanf(strings.TrimPrefix(l, "cmdstat_get:"), "calls=%d", &n)
				gets += n
			}
		}
		all.WriteString(addr + ":\n" + stats)
	}
	if gets != 1 {
		t.Errorf("the nodes ran %d GETs, want 1 (the release's): the command table's look was sent:\n%s", gets, all.String())
	}
}
