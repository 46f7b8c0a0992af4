package fence_test

// Adversarial tests, round 72a: the Redis fenced write under re-sends.

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv72aHoldProxy is a TCP proxy that, when armed, holds the next chunk a
// client sends (it does not reach the server) until Release: a request
// segment delayed in the network (retransmitted late) while the client
// gives up on the connection and re-sends on a new one.
type adv72aHoldProxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	held    chan struct{} // one value when a chunk is held
	release chan struct{} // closed to let it through
	fwd     chan struct{} // one value once the held chunk was written to the server
	mu      sync.Mutex
	conns   []net.Conn
}

func adv72aStartHoldProxy(t *testing.T, target string) *adv72aHoldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &adv72aHoldProxy{ln: ln, target: target, held: make(chan struct{}, 1), release: make(chan struct{}), fwd: make(chan struct{}, 1)}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Release()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *adv72aHoldProxy) Addr() string { return p.ln.Addr().String() }

func (p *adv72aHoldProxy) Arm() { p.armed.Store(true) }

var adv72aReleaseOnce sync.Map

func (p *adv72aHoldProxy) Release() {
	if _, done := adv72aReleaseOnce.LoadOrStore(p, true); !done {
		close(p.release)
	}
}

func (p *adv72aHoldProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { io.Copy(c, s); c.Close() }()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					chunk := append([]byte(nil), buf[:n]...)
					hold := p.armed.CompareAndSwap(true, false)
					if hold {
						p.held <- struct{}{}
						<-p.release
					}
					s.Write(chunk)
					if hold {
						p.fwd <- struct{}{}
					}
				}
				if err != nil {
					if tc, ok := s.(*net.TCPConn); ok {
						tc.CloseWrite()
					}
					return
				}
			}
		}()
	}
}

// adv72aEvalCalls returns how many scripts the server has run
// (EVALSHA + EVAL calls, from INFO commandstats).
func adv72aEvalCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, c := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), c); ok {
				f, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				v, _ := strconv.Atoi(f)
				n += v
			}
		}
	}
	return n
}

// A holder writes v1; the request is delayed in the network past the
// client's read timeout, so go-redis re-sends it on a new connection,
// where it is carried out: HSet returns nil. The holder then writes v2
// under the same grant (nil). The delayed first send of v1 then reaches
// Redis: same token, same owner, so the script admits it and v1 replaces
// v2. The holder's later write, reported done, is silently undone by a
// replay of its own earlier write (claim: "must not double-apply anything
// harmful"; HSet: "It returns nil when written").
func TestAdversary72a_RedisDelayedFirstSendRevertsLaterWrite(t *testing.T) {
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := adv72aStartHoldProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, ReadTimeout: 300 * time.Millisecond, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	store := fence.NewRedis(rdb)
	// The lease on a server of its own, so that the store's server runs
	// only the store's scripts (counted below).
	c, err := lease.New(leasetest.StartRedis(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// Warm: the script is loaded and a connection pooled.
	if err := store.Set(ctx, stamp(1, "warm"), "rec:{acct}", "v0"); err != nil {
		t.Fatal(err)
	}
	var err1, err2 error
	err = c.Do(ctx, "acct", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		before := adv72aEvalCalls(t, direct)
		px.Arm()
		err1 = store.Set(ctx, st, "rec:{acct}", "v1")
		select {
		case <-px.held:
		default:
			t.Fatal("the proxy held no request")
		}
		err2 = store.Set(ctx, st, "rec:{acct}", "v2")
		if v, _ := store.Get(ctx, "rec:{acct}"); v != "v2" {
			t.Fatalf("after the holder's second write: %q (first write %v, second %v)", v, err1, err2)
		}
		// The delayed first send arrives.
		px.Release()
		<-px.fwd
		deadline := time.Now().Add(2 * time.Second)
		for adv72aEvalCalls(t, direct) < before+3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("scripts run during the test: %d (first write %v, second write %v)", adv72aEvalCalls(t, direct)-before, err1, err2)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := store.Get(ctx, "rec:{acct}")
	if err1 == nil && err2 == nil && v != "v2" {
		t.Fatalf("both writes reported done (v1 then v2), record now %q: the delayed first send of v1, admitted by the same stamp, overwrote the later write v2", v)
	}
	if err1 != nil && !errors.Is(err1, lease.ErrUnknown) {
		t.Fatalf("first write = %v", err1)
	}
}

// Under a real lease, a lost reply to the holder's own accepted write:
// go-redis re-sends it, the replay (equal token, same owner) is accepted
// again, the call returns nil, the record holds every field once, and the
// observer hears of no stale write. Then a newer holder writes; the old
// holder's late write with a lost reply is never nil, never writes, and a
// late write without fault is ErrStale, reported exactly once.
func TestAdversary72a_RedisReplayOfOwnWriteUnderLease(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	store := fence.NewRedis(rdb)
	obs := &leasetest.Recorder{}
	c1, err := lease.New(direct, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx := context.Background()
	spec := lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}
	var old fence.Stamp
	err = c1.Do(ctx, "k", spec, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		old = st
		if err := store.HSet(ctx, st, "rec:{k}", "a", "1"); err != nil {
			return err
		}
		for i, fv := range [][]string{{"a", "2", "b", "x"}, {"value", "v", "c", "y"}} {
			cut := px.Cut()
			px.Set(leasetest.CutNextReply)
			if err := store.HSet(ctx, st, "rec:{k}", fv...); err != nil {
				t.Errorf("write %d of the holder, reply lost and re-sent: %v (cut %d)", i, err, px.Cut()-cut)
			}
			if px.Cut() != cut+1 {
				t.Errorf("write %d: proxy cut %d replies", i, px.Cut()-cut)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h := direct.HGetAll(ctx, "rec:{k}").Val()
	if h["a"] != "2" || h["b"] != "x" || h["value"] != "v" || h["c"] != "y" || h[fence.TokenField] != strconv.FormatUint(uint64(old.Token), 10) || h[fence.OwnerField] != old.Owner || len(h) != 7 {
		t.Fatalf("record %v", h)
	}
	if n := obs.Count(lease.EventStaleWriteRejected); n != 0 {
		t.Fatalf("%d stale writes reported for the holder's own replayed writes", n)
	}
	var newer fence.Stamp
	err = c2.Do(ctx, "k", spec, func(ctx context.Context) error {
		newer, _ = fence.From(ctx)
		return fence.NewRedis(direct).Set(ctx, newer, "rec:{k}", "new")
	})
	if err != nil || newer.Token <= old.Token {
		t.Fatalf("newer holder: token %d (old %d): %v", newer.Token, old.Token, err)
	}
	px.Set(leasetest.CutNextReply)
	err = store.Set(ctx, old, "rec:{k}", "late")
	if err == nil {
		t.Fatal("a stale write with a lost reply returned nil")
	}
	t.Logf("stale write with a lost reply: %v", err)
	if v := direct.HGet(ctx, "rec:{k}", "value").Val(); v != "new" {
		t.Fatalf("record %q after the stale write", v)
	}
	before := obs.Count(lease.EventStaleWriteRejected)
	if err := store.Set(ctx, old, "rec:{k}", "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late write = %v, want ErrStale", err)
	}
	if n := obs.Count(lease.EventStaleWriteRejected) - before; n != 1 {
		t.Fatalf("late write reported %d times, want 1", n)
	}
}
