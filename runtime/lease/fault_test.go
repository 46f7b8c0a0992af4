package lease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// proxied returns a lease client whose connections go through a fault proxy
// to a fresh server, plus a direct client to inspect the server.
func proxied(t *testing.T, adjust func(*redis.Options), opts ...lease.Option) (*lease.Client, *leasetest.Recorder, *leasetest.Proxy, *redis.Client, *leasetest.Server) {
	t.Helper()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	o := &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true}
	if adjust != nil {
		adjust(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	c, rec := newClient(t, rdb, opts...)
	return c, rec, p, srv.Client(t), srv
}

// A lost acquire reply makes go-redis re-send the script; the replay must
// answer with our own grant, not "busy".
func TestLostAcquireReplyIsRetriedIntoOwnGrant(t *testing.T) {
	c, rec, p, direct, _ := proxied(t, nil)
	key := "retry"
	// Warm the pool and load the scripts so the next reply is the acquire's.
	if err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.CutNextReply)
	s := spec(5*time.Second, 10*time.Second)
	s.Fence = true
	called := 0
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		called++
		if v, _ := direct.Get(ctx, lockKey(key)).Result(); v == "" {
			t.Error("no lock key while entered")
		}
		return nil
	})
	if err != nil || called != 1 {
		t.Fatalf("Do = %v, called %d; want our own grant after the retry", err, called)
	}
	if p.Cut() != 1 {
		t.Fatalf("proxy cut %d replies, want 1", p.Cut())
	}
	if rec.Count(lease.EventBusy) != 0 || rec.Count(lease.EventAcquireUnknown) != 0 {
		t.Fatalf("events %+v", rec.Events())
	}
	table(t, "acquire reply lost, go-redis retries", "the replay answers our own grant, never busy", 1, 0)
}

// With retries disabled the same fault is an unknown outcome: not entered,
// and the conditional release with the same identity removes the orphan.
func TestLostAcquireReplyWithoutRetryIsUnknown(t *testing.T) {
	c, rec, p, direct, _ := proxied(t, func(o *redis.Options) { o.MaxRetries = -1 })
	key := "noretry"
	if err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.CutNextReply)
	err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error {
		t.Error("entered on an unknown outcome")
		return nil
	})
	mustIs(t, err, lease.ErrUnknown)
	mustNotIs(t, err, lease.ErrBusy)
	if n, _ := direct.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Fatal("orphaned grant not released")
	}
	if rec.Count(lease.EventAcquireUnknown) != 1 {
		t.Fatal("unknown acquire not observed")
	}
	table(t, "acquire reply lost, no retries", "unknown, not entered, orphan released", 1, 0)
}

// Redis stops answering: Do returns by its deadline even though the go-redis
// client was built with a 10s ReadTimeout.
func TestDeadlineHonouredWhenRepliesBlackholed(t *testing.T) {
	c, rec, p, direct, _ := proxied(t, func(o *redis.Options) {
		o.ReadTimeout = 10 * time.Second
	})
	key := "blackhole"
	if err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.Blackhole)
	const budget = 300 * time.Millisecond
	st := watchStalls(t, 5*time.Millisecond)
	start := time.Now()
	err := c.Do(context.Background(), key, spec(5*time.Second, budget), func(context.Context) error {
		t.Error("entered")
		return nil
	})
	end := time.Now()
	el := end.Sub(start)
	t.Logf("returned %v after start (budget %v)", el.Round(time.Millisecond), budget)
	mustIs(t, err, lease.ErrUnknown)
	mustNotIs(t, err, lease.ErrBusy)
	if !strings.Contains(err.Error(), "release unconfirmed") {
		t.Fatalf("error %q does not report the unconfirmed release", err)
	}
	if el-st.lost(start.Add(budget), end) > budget+150*time.Millisecond {
		t.Fatalf("Do returned after %v, budget %v", el, budget)
	}
	if rec.Count(lease.EventReleaseUnconfirmed) != 1 {
		t.Fatal("unconfirmed release not observed")
	}
	// The orphan, if the script ran, ends by its TTL: never later.
	if pttl, _ := direct.PTTL(context.Background(), lockKey(key)).Result(); pttl > 5*time.Second {
		t.Fatalf("orphan PTTL %v beyond the TTL", pttl)
	}
	table(t, "acquire reply blackholed (ReadTimeout 10s)", "returns by deadline + ε; unknown; release unconfirmed reported", 1, 0)
}

// A grant that arrives after valid-until − MinValidity is known but not
// entered, and is released.
func TestLateGrantIsLowValidity(t *testing.T) {
	c, rec, p, direct, _ := proxied(t, nil)
	key := "late"
	if err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(400 * time.Millisecond) // 0.8 × TTL
	s := spec(500*time.Millisecond, 10*time.Second)
	err := c.Do(context.Background(), key, s, func(context.Context) error {
		t.Error("entered with low validity")
		return nil
	})
	mustIs(t, err, lease.ErrLowValidity)
	mustNotIs(t, err, lease.ErrUnknown)
	if rec.Count(lease.EventLowValidity) != 1 {
		t.Fatal("low validity not observed")
	}
	// The release ran (its reply is also delayed, but it reached the server).
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, _ := direct.Exists(context.Background(), lockKey(key)).Result()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("late grant not released")
		}
		time.Sleep(10 * time.Millisecond)
	}
	table(t, "late grant (replies delayed 0.8×TTL)", "ErrLowValidity, not entered, released", 1, 0)
}

// Redis pauses while the work runs: renewals get no reply, and the work is
// cancelled when the last confirmed validity ends, not later.
func TestPausedRedisCancelsWorkAtValidityEnd(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, rec := newClient(t, srv.Client(t))
	ttl := 600 * time.Millisecond
	var lostAfter time.Duration
	err := c.Do(context.Background(), "paused", spec(ttl, 10*time.Second), func(ctx context.Context) error {
		start := time.Now()
		srv.Pause()
		defer srv.Resume()
		select {
		case <-ctx.Done():
			lostAfter = time.Since(start)
			if !errors.Is(context.Cause(ctx), lease.ErrLost) {
				t.Errorf("cause %v, want ErrLost", context.Cause(ctx))
			}
		case <-time.After(5 * time.Second):
			t.Error("work not cancelled while Redis was paused")
		}
		return nil
	})
	mustIs(t, err, lease.ErrLost)
	if lostAfter > ttl {
		t.Fatalf("work cancelled %v after entry; the lease could not be valid past %v", lostAfter, ttl)
	}
	if rec.Count(lease.EventRenewFailed) == 0 {
		t.Fatal("failed renewals not observed")
	}
	table(t, "renewals fail while working (redis-server SIGSTOP)", "work cancelled by last confirmed validity", 1, 0)
}

// A server restart without persistence loses the counter and the scripts;
// tokens still increase (time floor) and scripts are reloaded.
func TestTokensIncreaseAcrossRestart(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t))
	s := spec(time.Second, 5*time.Second)
	s.Fence = true
	token := func() lease.Token {
		t.Helper()
		var tok lease.Token
		var err error
		for range 20 { // the pool may hold connections to the old process
			err = c.Do(context.Background(), "restart", s, func(ctx context.Context) error {
				tok, _ = lease.TokenFrom(ctx)
				return nil
			})
			if err == nil {
				return tok
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("Do after restart: %v", err)
		return 0
	}
	before := token()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if after := token(); after <= before {
		t.Fatalf("token after restart %d not above %d", after, before)
	}
	table(t, "redis-server kill -9 and restart without persistence", "tokens still increase; scripts reloaded", 1, 0)
}

func TestScriptFlushIsRecovered(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	for i := range 3 {
		if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(context.Background(), uniqueKey(t), spec(time.Second, 5*time.Second), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Do %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	// Mid-run: the scripts vanish while a lease is held; renewals and the
	// release reload them and the lease is never lost.
	err := c.Do(context.Background(), uniqueKey(t), spec(900*time.Millisecond, 5*time.Second), func(ctx context.Context) error {
		rdb.ScriptFlush(ctx)
		select {
		case <-time.After(1200 * time.Millisecond): // renewals at 300ms intervals, the first reloads the script
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatalf("SCRIPT FLUSH while held: %v", err)
	}
	table(t, "SCRIPT FLUSH between calls and while a lease is held", "scripts reloaded (NOSCRIPT fallback); lease kept", 4, 0)
}

func TestReplicasRequired(t *testing.T) {
	t.Parallel()
	master := leasetest.StartRedis(t)
	master.WaitReplicas(t, master.StartReplica(t))
	rdbM := master.Client(t)

	// A generous WAIT timeout: this checks the acknowledged path, not timing
	// (a loaded CI machine can starve the replica for a moment).
	one, _ := newClient(t, rdbM, lease.WithReplicas(1, 3*time.Second))
	if err := one.Do(context.Background(), "repl", spec(5*time.Second, 10*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("WithReplicas(1): %v", err)
	}
	two, rec := newClient(t, rdbM, lease.WithReplicas(2, 200*time.Millisecond))
	err := two.Do(context.Background(), "repl", spec(5*time.Second, 10*time.Second), func(context.Context) error {
		t.Error("entered without the required replicas")
		return nil
	})
	mustIs(t, err, lease.ErrUnknown)
	if rec.Count(lease.EventUnreplicated) != 1 {
		t.Fatal("unreplicated grant not observed")
	}
	if n, _ := rdbM.Exists(context.Background(), lockKey("repl")).Result(); n != 0 {
		t.Fatal("unreplicated grant not released")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
