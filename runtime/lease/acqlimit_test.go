package lease_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// An acquire whose reply does not come by its limit (the grant could no
// longer be entered) is unknown, whatever go-redis does next: it retries
// a read timeout, and on a pool of one connection the retry must dial a
// new one, which the server now refuses. That dial error names no request
// on the wire, but the first attempt was sent and may have been granted:
// the call is ErrUnknown (and releases), never ErrRefused.
func TestAcquireReplyPastItsLimitIsUnknownDespiteRetries(t *testing.T) {
	for _, fence := range []bool{false, true} {
		srv := leasetest.StartRedis(t)
		p := leasetest.StartProxy(t, srv.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, PoolSize: 1})
		c, rec := newClient(t, rdb)
		direct := srv.Client(t)
		key := uniqueKey(t)
		s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second, Fence: fence}
		if err := c.Do(context.Background(), key, s, nop); err != nil { // warm: connection, scripts
			t.Fatal(err)
		}
		p.Set(leasetest.Blackhole)
		time.AfterFunc(150*time.Millisecond, func() { p.Refuse() }) // after the acquire was sent
		entered := false
		start := time.Now()
		err := c.Do(context.Background(), key, s, func(context.Context) error { entered = true; return nil })
		took := time.Since(start)
		t.Logf("fence %v: Do = %v after %v", fence, err, took.Round(time.Millisecond))
		if entered {
			t.Fatal("fn ran on a grant whose reply came after its limit")
		}
		if !errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrRefused) {
			t.Fatalf("fence %v: Do = %v, want ErrUnknown (the acquire was sent; only its reply was late)", fence, err)
		}
		if rec.Count(lease.EventAcquireUnknown) == 0 {
			t.Fatalf("fence %v: no EventAcquireUnknown", fence)
		}
		// The grant, if the server made it, is released or runs out with
		// its TTL: the key is free again soon.
		if !waitFor(3*time.Second, func() bool { return direct.Exists(context.Background(), lockKey(key)).Val() == 0 }) {
			t.Fatalf("fence %v: the key is still held 3s after the unknown acquire", fence)
		}
		// go-redis re-dials the refused server every second until its
		// client is closed; wait for that goroutine to end (goleak).
		c.Close()
		rdb.Close()
		waitFor(3*time.Second, func() bool {
			buf := make([]byte, 1<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "tryDial")
		})
	}
}
