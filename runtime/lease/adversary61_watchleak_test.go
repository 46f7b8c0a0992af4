package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Watch's doc (watch.go:55-56): it reports "until ctx ends; it then
// returns nil". With the server's replies blackholed mid-watch, a
// cancelled ctx ends it within its read bound, and nothing it started is
// left running; WatchLeader's channel closes likewise.
func TestAdversary61_WatchAndWatchLeaderEndWhileBlackholed(t *testing.T) {
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := newClient(t, srv.Client(t))
	holdUntil(t, holder, "leak61:a", lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
	ignore := goleak.IgnoreCurrent()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	changes := make(chan lease.Change, 100)
	go func() {
		done <- c.Watch(ctx, "leak61:*", 100*time.Millisecond, func(ch lease.Change) { changes <- ch })
	}()
	lch := c.WatchLeader(ctx, "leak61:a")
	select {
	case ch := <-changes:
		t.Logf("first change: %v %s", ch.Kind, ch.Info.Key)
	case <-time.After(5 * time.Second):
		t.Fatal("no change")
	}
	l := <-lch
	t.Logf("leader: %+v", l)
	p.Set(leasetest.Blackhole)
	time.Sleep(150 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		t.Logf("Watch returned %v after %v", err, time.Since(start))
		if err != nil {
			t.Errorf("Watch after its ctx ended: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return within 5s of its ctx ending")
	}
	for range lch {
	}
	t.Logf("WatchLeader closed after %v", time.Since(start))
	c.Close()
	rdb.Close()
	p.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(ignore)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
