package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// nodeHook records, on each Cluster node's client, every command that
// node answered with a redirect (MOVED/ASK): a command rdb.Do routed to
// the wrong slot's node.
type nodeHook struct {
	addr  string
	mu    *sync.Mutex
	moved *[]string
	count *map[string]int
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		(*h.count)[cmd.Name()]++
		if err != nil && (strings.HasPrefix(err.Error(), "MOVED") || strings.HasPrefix(err.Error(), "ASK")) {
			*h.moved = append(*h.moved, h.addr+": "+trunc(fmt.Sprint(cmd.Args()))+" -> "+err.Error())
		}
		h.mu.Unlock()
		return err
	}
}
func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.mu.Lock()
		for _, cmd := range cmds {
			(*h.count)[cmd.Name()]++
			if e := cmd.Err(); e != nil && (strings.HasPrefix(e.Error(), "MOVED") || strings.HasPrefix(e.Error(), "ASK")) {
				*h.moved = append(*h.moved, h.addr+" (pipe): "+trunc(fmt.Sprint(cmd.Args()))+" -> "+e.Error())
			}
		}
		h.mu.Unlock()
		return err
	}
}

// Every command of the hot path (SET NX, the acquire script by EVALSHA and
// EVAL, the release, a waiter's acquires, a kept lease's release) goes to
// the node that owns the key's slot the first time: no MOVED redirect.
func TestAdversary9_ClusterCommandsRouteToTheKeysSlot(t *testing.T) {
	cl := leasetest.StartCluster(t, 3)
	var mu sync.Mutex
	var moved []string
	count := map[string]int{}
	rdb := cl.Client(t)
	rdb.OnNewNode(func(n *redis.Client) {
		n.AddHook(nodeHook{addr: n.Options().Addr, mu: &mu, moved: &moved, count: &count})
	})
	// Load the topology first (a cold client may route by a guess).
	if err := rdb.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	c, rec := newClient(t, rdb)
	other, _ := newClient(t, cl.Client(t))
	ctx := context.Background()
	for i := range 30 {
		key := fmt.Sprint("slot-key-", i)
		for _, s := range []lease.Spec{
			spec(2*time.Second, 5*time.Second),
			{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true},
			{TTL: 2 * time.Second, Deadline: 5 * time.Second, HoldMin: 10 * time.Millisecond},
		} {
			if err := c.Do(ctx, key, s, nop); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
		}
		// ForceRelease with an identity.
		var id string
		release := make(chan struct{})
		done := make(chan error, 1)
		held := make(chan struct{})
		go func() {
			hs := spec(2*time.Second, 5*time.Second)
			hs.Wait = time.Second // HoldMin of the call before
			done <- c.Do(ctx, key, hs, func(fctx context.Context) error {
				l, _ := lease.FromContext(fctx)
				id = l.Owner()
				close(held)
				select {
				case <-release:
				case <-fctx.Done():
				}
				return nil
			})
		}()
		select {
		case <-held:
		case err := <-done:
			t.Fatalf("holder %s: %v", key, err)
		}
		if i%3 == 0 {
			// A waiter on another client, woken by the release.
			w := spec(2*time.Second, 5*time.Second)
			w.Wait = 3 * time.Second
			wd := make(chan error, 1)
			go func() { wd <- other.Do(ctx, key, w, nop) }()
			time.Sleep(50 * time.Millisecond)
			close(release)
			if err := <-wd; err != nil {
				t.Fatalf("waiter %s: %v", key, err)
			}
			<-done
		} else {
			if _, err := c.ForceRelease(ctx, key, id); err != nil {
				t.Fatalf("ForceRelease %s: %v", key, err)
			}
			close(release)
			<-done
		}
	}
	// A kept lease released by its keep running out.
	keyK := "slot-kept"
	ks := spec(2*time.Second, 5*time.Second)
	ks.Keep = 100 * time.Millisecond
	if err := c.Do(ctx, keyK, ks, nop); err != nil {
		t.Fatal(err)
	}
	if !waitFor(3*time.Second, func() bool { return rec.Count(lease.EventReleased) > 0 && rdb.Exists(ctx, lockKey(keyK)).Val() == 0 }) {
		t.Fatal("kept lease not released")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("commands per name: %v", count)
	if len(moved) > 0 {
		t.Fatalf("%d commands were redirected (routed to the wrong node):\n%s", len(moved), strings.Join(moved, "\n"))
	}
}
