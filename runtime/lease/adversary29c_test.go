package lease_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv29cNilHook is a hook users write so that a missing key is not an
// error ("GET of a missing key returns the empty string"): it turns
// redis.Nil into success. go-redis's Client.Process then clears the
// command's error (cmd.SetErr(nil)).
type adv29cNilHook struct{}

func (adv29cNilHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (adv29cNilHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		return nil
	}
}
func (adv29cNilHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// adv29cSwallowHook is a "fail open" instrumentation hook: it records
// errors and never returns them (when on), so go-redis clears the
// command's error, leaving its zero value.
type adv29cSwallowHook struct {
	on      atomic.Bool
	swallow atomic.Int64
}

func (h *adv29cSwallowHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv29cSwallowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && h.on.Load() {
			h.swallow.Add(1)
			return nil
		}
		return err
	}
}
func (h *adv29cSwallowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A key held by another owner must never be entered, whatever a hook does
// to the busy answer of SET NX: with a hook that maps redis.Nil to
// success, the unfenced no-wait acquire (native SET NX) reads "not set" as
// a grant.
func TestAdversary29c_NilSwallowingHookTurnsBusyIntoGrant(t *testing.T) {
	holder, _ := sharedClient(t)
	key := uniqueKey(t)
	release := make(chan struct{})
	done := hold(t, holder, key, spec(5*time.Second, 10*time.Second), release)
	defer func() { close(release); <-done }()

	rdb := shared.Client(t)
	rdb.AddHook(adv29cNilHook{})
	c, _ := newClient(t, rdb)
	entered := false
	err := c.Do(context.Background(), key, spec(5*time.Second, 2*time.Second), func(context.Context) error {
		entered = true
		return nil
	})
	if entered {
		t.Fatalf("entered a lease held by another owner (Do = %v)", err)
	}
	mustIs(t, err, lease.ErrBusy)
}

// A hook that swallows errors leaves the command's zero value: for the
// acquire, no reply was read, so the outcome is unknown, never a grant.
// Blackholed replies: go-redis times out, the hook returns nil.
func TestAdversary29c_SwallowedTimeoutIsNotAGrant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    lease.Spec
	}{
		{"setnx", spec(2*time.Second, 600*time.Millisecond)},
		{"fenced", func() lease.Spec { s := spec(2*time.Second, 600*time.Millisecond); s.Fence = true; return s }()},
		{"waiting", func() lease.Spec {
			s := spec(2*time.Second, 600*time.Millisecond)
			s.Wait = 100 * time.Millisecond
			return s
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &adv29cSwallowHook{}
			c, rec, p, direct, _ := proxied(t, func(o *redis.Options) { o.MaxRetries = -1 })
			c.Redis().(*redis.Client).AddHook(h)
			key := "swallow-" + tc.name
			if err := c.Do(context.Background(), key, tc.s, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			h.on.Store(true)
			p.Set(leasetest.Blackhole)
			entered := false
			start := time.Now()
			err := c.Do(context.Background(), key, tc.s, func(context.Context) error {
				entered = true
				return nil
			})
			el := time.Since(start)
			p.Set(leasetest.Pass)
			v, _ := direct.Get(context.Background(), lockKey(key)).Result()
			t.Logf("Do = %v after %v; swallowed %d; lock value %q; events %v", err, el, h.swallow.Load(), v, adv29cKinds(rec))
			if entered {
				t.Fatalf("entered without any parsed reply (Do = %v)", err)
			}
			mustIs(t, err, lease.ErrUnknown)
			if rec.Count(lease.EventAcquireUnknown) != 1 || rec.Count(lease.EventReleaseUnconfirmed) != 1 {
				t.Fatalf("want one acquire_unknown and one release_unconfirmed, got %v", adv29cKinds(rec))
			}
		})
	}
}

func adv29cKinds(rec *leasetest.Recorder) []string {
	var out []string
	for _, e := range rec.Events() {
		out = append(out, e.Kind.String())
	}
	return out
}

// adv29cConn calls onWrite (once armed) before a write that contains
// match, while the connection is taken from the pool for that request.
type adv29cConn struct {
	net.Conn
	armed   *atomic.Bool
	match   []byte
	onWrite func()
}

func (c *adv29cConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.match) && c.armed.CompareAndSwap(true, false) {
		c.onWrite()
	}
	return c.Conn.Write(b)
}

// A lost acquire reply is retried by go-redis; when the retry then cannot
// get a connection (PoolSize 1, another goroutine took the slot the broken
// connection freed), go-redis returns ErrPoolTimeout. The first attempt
// was carried out: the key is held by this call's identity. Do must not
// report "refused" (not executed) and leave that grant behind without a
// release attempt or a report.
func TestAdversary29c_LostReplyThenPoolTimeoutLeavesSilentGrant(t *testing.T) {
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	key := "pool-after-send"
	var armed atomic.Bool
	// Another user of the client queues for the connection while the
	// acquire has it, and holds it for a while (see poolTakenClient).
	rdb, blocked := poolTakenClient(t, p.Addr(), lockKey(key), &armed, func(o *redis.Options) {
		o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 2, 10*time.Millisecond, 20*time.Millisecond
	})
	c, rec := newClient(t, rdb)
	direct := srv.Client(t)
	warm(t, c, key)

	armed.Store(true)
	p.Set(leasetest.CutNextReply)
	entered := false
	err := c.Do(context.Background(), key, spec(10*time.Second, 3*time.Second), func(context.Context) error {
		entered = true
		return nil
	})
	<-blocked
	v, _ := direct.Get(context.Background(), lockKey(key)).Result()
	t.Logf("Do = %v; cut %d; lock value %q; events %v", err, p.Cut(), v, adv29cKinds(rec))
	if entered {
		t.Fatal("entered")
	}
	if p.Cut() != 1 {
		t.Fatalf("cut %d replies, want 1", p.Cut())
	}
	if v == "" {
		t.Fatal("the first attempt was not carried out: the attack did not happen")
	}
	// The key is held by the call's own identity after Do returned.
	mustIs(t, err, lease.ErrUnknown)
	mustNotIs(t, err, lease.ErrRefused)
	if rec.Count(lease.EventReleaseUnconfirmed) == 0 {
		t.Fatalf("a grant left behind without a release_unconfirmed report: %v", adv29cKinds(rec))
	}
}

// Deadlines hold "regardless of the go-redis client's ReadTimeout": with
// ReadTimeout -2 (or WriteTimeout -2) go-redis never sets a socket
// deadline, so ContextTimeoutEnabled has nothing to bound a read with. A
// blackholed server must still see Do return by its deadline (or New
// refuse the client with a clear error).
func TestAdversary29c_NoDeadlineTimeoutsBlackholed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		adjust func(*redis.Options)
	}{
		{"read-2", func(o *redis.Options) { o.ReadTimeout = -2 }},
		{"read-2-write-2", func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = -2, -2 }},
		{"read-1", func(o *redis.Options) { o.ReadTimeout = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			p := leasetest.StartProxy(t, srv.Addr())
			o := &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true}
			tc.adjust(o)
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			rec := &leasetest.Recorder{}
			c, err := lease.New(rdb, lease.WithObserver(rec))
			if err != nil {
				// Refusing what cannot be honoured is allowed, with a
				// clear error naming the setting.
				if !strings.Contains(err.Error(), "Timeout") {
					t.Fatalf("New refused the client without naming the setting: %v", err)
				}
				t.Logf("New refused the client: %v", err)
				return
			}
			t.Cleanup(func() { c.Close() })
			warm(t, c, "nodl")
			p.Set(leasetest.Blackhole)
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				done <- c.Do(context.Background(), "nodl", spec(2*time.Second, 400*time.Millisecond), func(context.Context) error {
					t.Error("entered")
					return nil
				})
			}()
			select {
			case err := <-done:
				el := time.Since(start)
				t.Logf("Do = %v after %v", err, el)
				mustIs(t, err, lease.ErrUnknown)
				if el > 400*time.Millisecond+300*time.Millisecond {
					t.Fatalf("Do took %v, budget 400ms", el)
				}
			case <-time.After(3 * time.Second):
				p.CloseConns()
				p.Set(leasetest.Pass)
				<-done
				t.Fatalf("Do still running 3s after start with a 400ms budget (returned after the proxy closed its connections)")
			}
		})
	}
}

// adv29cBreaker is a circuit-breaker hook: while open, it fails every
// command without sending it.
type adv29cBreaker struct {
	open  atomic.Bool
	calls atomic.Int64 // commands failed while open
}

var errAdv29cOpen = errors.New("breaker open")

func (h *adv29cBreaker) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv29cBreaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.open.Load() {
			h.calls.Add(1)
			return errAdv29cOpen
		}
		return next(ctx, cmd)
	}
}
func (h *adv29cBreaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.open.Load() {
			h.calls.Add(1)
			return errAdv29cOpen
		}
		return next(ctx, cmds)
	}
}

// A hook that fails a command without sending it (a circuit breaker, a
// rate limiter) leaves nothing on the wire: the acquire was definitely not
// executed. Do must say so (ErrRefused, the cause named), not "sent, no
// parsed reply" (ErrUnknown), and send no release.
func TestAdversary29c_HookFailsWithoutSending(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    lease.Spec
	}{
		{"setnx", spec(2*time.Second, time.Second)},
		{"fenced", lease.Spec{TTL: 2 * time.Second, Deadline: time.Second, Fence: true}},
		{"waiting", lease.Spec{TTL: 2 * time.Second, Deadline: time.Second, Wait: 100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := shared.Client(t)
			h := &adv29cBreaker{}
			rdb.AddHook(h)
			c, rec := newClient(t, rdb)
			key := uniqueKey(t)
			warm(t, c, key)
			h.open.Store(true)
			err := c.Do(context.Background(), key, tc.s, func(context.Context) error {
				t.Error("entered")
				return nil
			})
			h.open.Store(false)
			t.Logf("Do = %v; hook failed %d commands; events %v", err, h.calls.Load(), adv29cKinds(rec))
			mustIs(t, err, lease.ErrRefused, errAdv29cOpen)
			mustNotIs(t, err, lease.ErrUnknown)
			if rec.Count(lease.EventAcquireUnknown) != 0 {
				t.Fatalf("reported acquire_unknown: %v", adv29cKinds(rec))
			}
		})
	}
}

// Replies delayed past the deadline, then delivered: the acquire ran on
// the server. Do returns by its deadline with ErrUnknown, never enters fn,
// and the grant is released (the release ran too, its reply late) or its
// release reported unconfirmed; once the client is closed, nothing Do
// started is left running.
func TestAdversary29c_DelayedRepliesPastDeadline(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond) // before the subtests' IgnoreCurrent
	for _, tc := range []struct {
		name string
		s    lease.Spec
	}{
		{"setnx", spec(2*time.Second, 300*time.Millisecond)},
		{"fenced", lease.Spec{TTL: 2 * time.Second, Deadline: 300 * time.Millisecond, Fence: true}},
		{"waiting", lease.Spec{TTL: 2 * time.Second, Deadline: 300 * time.Millisecond, Wait: 50 * time.Millisecond, MinValidity: 100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			direct := srv.Client(t)
			ignore := goleak.IgnoreCurrent()
			p, err := leasetest.NewProxy(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			rec := &leasetest.Recorder{}
			c, err := lease.New(rdb, lease.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			key := "delayed-" + tc.name
			warm(t, c, key)
			p.SetDelay(500 * time.Millisecond)
			start := time.Now()
			err = c.Do(context.Background(), key, tc.s, func(context.Context) error {
				t.Error("entered")
				return nil
			})
			end := time.Now()
			el := end.Sub(start)
			time.Sleep(700 * time.Millisecond) // the late replies arrive
			v, _ := direct.Get(context.Background(), lockKey(key)).Result()
			t.Logf("Do = %v after %v; lock value afterwards %q; events %v", err, el, v, adv29cKinds(rec))
			mustIs(t, err, lease.ErrUnknown)
			if el-st.lost(start.Add(tc.s.Deadline), end) > tc.s.Deadline+150*time.Millisecond {
				t.Errorf("Do took %v with a %v budget", el, tc.s.Deadline)
			}
			if v != "" && rec.Count(lease.EventReleaseUnconfirmed) == 0 {
				t.Errorf("key left held (%q) without a release_unconfirmed report", v)
			}
			c.Close()
			rdb.Close()
			p.Close()
			if err := goleak.Find(ignore); err != nil {
				t.Errorf("goroutines left behind: %v", err)
			}
		})
	}
}

// A server that accepts connections but never answers, met with no idle
// connection in the pool: go-redis's handshake (HELLO) never completes, so
// the acquire is never written. The server provably did not execute it:
// the outcome is not unknown ("sent, no parsed reply"), no release is
// needed, and Do returns by its deadline.
func TestAdversary29c_BlackholedHandshakeNeverSends(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	for _, tc := range []struct {
		name string
		s    lease.Spec
	}{
		{"setnx", spec(2*time.Second, 300*time.Millisecond)},
		{"fenced", lease.Spec{TTL: 2 * time.Second, Deadline: 300 * time.Millisecond, Fence: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			direct := srv.Client(t)
			p := leasetest.StartProxy(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			c, rec := newClient(t, rdb)
			p.Set(leasetest.Blackhole)
			before := serverCalls(t, direct)
			start := time.Now()
			err := c.Do(context.Background(), "hs", tc.s, func(context.Context) error {
				t.Error("entered")
				return nil
			})
			end := time.Now()
			el := end.Sub(start)
			after := serverCalls(t, direct)
			sent := after["set"] - before["set"] + after["evalsha"] - before["evalsha"] + after["eval"] - before["eval"]
			t.Logf("Do = %v after %v; acquire commands executed %d; events %v", err, el, sent, adv29cKinds(rec))
			if sent != 0 {
				t.Fatalf("the acquire reached the server (%d): the attack did not happen", sent)
			}
			if el-st.lost(start.Add(tc.s.Deadline), end) > tc.s.Deadline+150*time.Millisecond {
				t.Errorf("Do took %v with a %v budget", el, tc.s.Deadline)
			}
			mustNotIs(t, err, lease.ErrUnknown)
			mustIs(t, err, lease.ErrRefused)
			if rec.Count(lease.EventAcquireUnknown) != 0 {
				t.Fatalf("reported acquire_unknown for a request never sent: %v", adv29cKinds(rec))
			}
		})
	}
}

// A server busy running another client's slow script answers BUSY: the
// acquire was not executed (ErrRefused naming BUSY, no release), fn is not
// entered, and nothing is left held. Also under RESP2 (Protocol 2).
func TestAdversary29c_BusyScriptIsRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t, "--busy-reply-threshold", "50")
	for _, proto := range []int{3, 2} {
		t.Run(itoa(proto), func(t *testing.T) {
			rdb := srv.Client(t, func(o *redis.Options) { o.Protocol = proto })
			c, rec := newClient(t, rdb)
			key := "busy-script-" + itoa(proto)
			fenced := lease.Spec{TTL: 2 * time.Second, Deadline: time.Second, Fence: true}
			warm(t, c, key)
			if err := c.Do(context.Background(), key, fenced, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			slow := make(chan error, 1)
			go func() {
				slow <- srv.Client(t).Eval(context.Background(), `local t = redis.call('TIME')
local s = t[1] * 1000000 + t[2]
repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - s > 700000
return 1`, nil).Err()
			}()
			time.Sleep(150 * time.Millisecond)
			for _, s := range []lease.Spec{spec(2*time.Second, time.Second), fenced} {
				err := c.Do(context.Background(), key, s, func(context.Context) error {
					t.Error("entered")
					return nil
				})
				t.Logf("Do = %v; events %v", err, adv29cKinds(rec))
				mustIs(t, err, lease.ErrRefused)
				mustNotIs(t, err, lease.ErrUnknown)
				if !strings.Contains(err.Error(), "BUSY") {
					t.Errorf("error does not name BUSY: %v", err)
				}
			}
			if err := <-slow; err != nil {
				t.Fatal(err)
			}
			if n := srv.Client(t).Exists(context.Background(), lockKey(key)).Val(); n != 0 {
				t.Fatal("key held after refused acquires")
			}
			// RESP2 grants and busy answers parse as under RESP3.
			release := make(chan struct{})
			done := hold(t, c, key, fenced, release)
			err := c.Do(context.Background(), key, spec(2*time.Second, time.Second), func(context.Context) error {
				t.Error("entered a held key")
				return nil
			})
			mustIs(t, err, lease.ErrBusy)
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// adv29cSwallowAll is adv29cSwallowHook for pipelines too.
type adv29cSwallowAll struct{ adv29cSwallowHook }

func (h *adv29cSwallowAll) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && h.on.Load() {
			h.swallow.Add(1)
			return nil
		}
		return err
	}
}

// A kept lease is reused only on an answer that the key still holds it
// when the Client cannot trust its channel: a check whose reply never
// came (a fail-open hook swallowed the pipeline's error) is no such
// answer. Here the key was deleted from outside meanwhile (a failover
// that lost it), so reusing it enters fn with no lease on the server.
func TestAdversary29c_KeptVerifyWithoutReplyIsNotOK(t *testing.T) {
	t.Parallel()
	h := &adv29cSwallowAll{}
	c, rec, p, direct, _ := proxied(t, func(o *redis.Options) { o.MaxRetries = -1 })
	c.Redis().(*redis.Client).AddHook(h)
	key := "kept-verify"
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, MinValidity: time.Second, Keep: 5 * time.Second}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := direct.Del(context.Background(), lockKey(key)).Val(); n != 1 {
		t.Fatalf("the kept lease's key was not there (%d)", n)
	}
	h.on.Store(true)
	p.Set(leasetest.Blackhole)
	p.CloseConns()
	time.Sleep(600 * time.Millisecond) // the subscription is down: the channel is not trusted
	entered := false
	err := c.Do(context.Background(), key, s, func(context.Context) error {
		entered = true
		return nil
	})
	h.on.Store(false)
	p.Set(leasetest.Pass)
	t.Logf("Do = %v; swallowed %d; events %v", err, h.swallow.Load(), adv29cKinds(rec))
	if entered {
		t.Fatalf("entered a kept lease whose key was gone, on a check that got no reply (Do = %v)", err)
	}
}

// An ACL without GET (a recipe trimmed by hand): SET NX still answers "not
// set" (the server executed it: the key is held), then the look at the
// holder is refused. A first "not set" is a busy answer, not "not
// executed"; one that follows go-redis's retry of a lost reply may be the
// replay of the call's own grant, so it is unknown, and the grant must be
// released or reported, never left silently.
func TestAdversary29c_SetNXLookRefused(t *testing.T) {
	srv := leasetest.StartRedis(t)
	aclClient(t, srv, "noget", without(leastPrivilege, "+get")...).Close()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, Username: "noget", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	c, rec := newClient(t, rdb)
	direct := srv.Client(t)
	s := spec(5*time.Second, time.Second)

	t.Run("busy", func(t *testing.T) {
		key := "noget-busy"
		if err := direct.Set(context.Background(), lockKey(key), "someone:0", 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		err := c.Do(context.Background(), key, s, func(context.Context) error {
			t.Error("entered")
			return nil
		})
		t.Logf("Do = %v", err)
		mustIs(t, err, lease.ErrBusy)
	})
	t.Run("replay", func(t *testing.T) {
		key := "noget-replay"
		warm(t, c, key)
		p.Set(leasetest.CutNextReply)
		err := c.Do(context.Background(), key, s, func(context.Context) error {
			t.Error("entered")
			return nil
		})
		v, _ := direct.Get(context.Background(), lockKey(key)).Result()
		t.Logf("Do = %v; cut %d; lock value %q; events %v", err, p.Cut(), v, adv29cKinds(rec))
		if p.Cut() != 1 {
			t.Fatalf("cut %d", p.Cut())
		}
		mustIs(t, err, lease.ErrUnknown)
		if v != "" && rec.Count(lease.EventReleaseUnconfirmed) == 0 {
			t.Fatalf("own grant left held (%q) without a report", v)
		}
	})
}

// The caller cancels while the acquire waits for a pooled connection (the
// pool's one connection is held by another goroutine's BLPOP): nothing was
// written, so the outcome is not unknown, no release is needed, and Do
// returns promptly after the cancel.
func TestAdversary29c_CancelDuringPoolWait(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.PoolSize = 1; o.PoolTimeout = 5 * time.Second })
	c, rec := newClient(t, rdb)
	key := "cancel-pool"
	warm(t, c, key)
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		rdb.BLPop(context.Background(), 2*time.Second, "adv29c-nothing")
	}()
	waitBLPOP(t, srv.Client(t))
	st := watchStalls(t, 5*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := c.Do(ctx, key, spec(5*time.Second, 3*time.Second), func(context.Context) error {
		t.Error("entered")
		return nil
	})
	end := time.Now()
	el := end.Sub(start)
	t.Logf("Do = %v after %v; events %v", err, el, adv29cKinds(rec))
	mustIs(t, err, context.Canceled)
	mustNotIs(t, err, lease.ErrUnknown)
	if late := el - st.lost(start.Add(100*time.Millisecond), end); late > 150*time.Millisecond+50*time.Millisecond {
		t.Errorf("Do returned %v after start (%v without the process's stalls), the cancel came at 100ms", el, late)
	}
	<-blocked
}

// waitBLPOP waits until the server (through admin) runs a BLPOP: the
// goroutine a test started to hold a pool's only connection has it.
// Slept for instead (50ms), a loaded machine could start the BLPOP after
// the call under test had taken the connection.
func waitBLPOP(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if !waitFor(5*time.Second, func() bool {
		return strings.Contains(admin.ClientList(ctx).Val(), "cmd=blpop")
	}) {
		t.Fatal("no BLPOP on the server in 5s")
	}
}
