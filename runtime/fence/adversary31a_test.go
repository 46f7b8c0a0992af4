package fence_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv31aCounterKey finds the fence counter key of the only lease taken so
// far on srv (the key ending in ":f").
func adv31aCounterKey(t *testing.T, direct *redis.Client) string {
	t.Helper()
	keys, err := direct.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":f") {
			return k
		}
	}
	t.Fatalf("no fence counter among %q", keys)
	return ""
}

// The lease package mints exact tokens past 2^53 (a counter set from
// outside, see lease's TestAdversary27_FenceCounterPast2To53), so the Redis
// store must compare them exactly too: a newer grant's token must be
// accepted and an older one refused, even where doubles skip integers.
func TestAdversary31a_RedisTokensPast2To53(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	direct := srv.Client(t)
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	spec := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}
	write := func(v string) (fence.Stamp, error) {
		var st fence.Stamp
		var werr error
		err := c.Do(ctx, "big", spec, func(ctx context.Context) error {
			st, _ = fence.From(ctx)
			werr = store.Set(ctx, st, "rec:{big}", v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return st, werr
	}
	if _, err := write("v0"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Set(ctx, adv31aCounterKey(t, direct), "9007199254740991", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	s1, err := write("v1")
	if err != nil || s1.Token != 9007199254740992 {
		t.Fatalf("grant at 2^53: token %d, write %v", s1.Token, err)
	}
	s2, err := write("v2")
	if s2.Token != 9007199254740993 {
		t.Fatalf("next grant: token %d, want 2^53+1", s2.Token)
	}
	if err != nil {
		t.Fatalf("the newer grant's write (token %d after %d) = %v, want accepted", s2.Token, s1.Token, err)
	}
	if v, _ := store.Get(ctx, "rec:{big}"); v != "v2" {
		t.Fatalf("value %q, want v2", v)
	}
	// An older token presented with the stored owner is still older.
	older := fence.Stamp{Token: s2.Token - 1, Owner: s2.Owner}
	if err := store.Set(ctx, older, "rec:{big}", "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token %d after %d from the same owner = %v, want ErrStale", older.Token, s2.Token, err)
	}
	// Hand-made stamps up to 2^64-1 compare exactly as well.
	steps := []struct {
		tok   lease.Token
		owner string
		ok    bool
	}{
		{18446744073709551614, "a", true},
		{18446744073709551615, "b", true},
		{18446744073709551614, "b", false},
		{18446744073709551615, "a", false},
		{18446744073709551615, "b", true},
	}
	for i, s := range steps {
		err := store.Set(ctx, stamp(s.tok, s.owner), "huge", s.owner)
		if s.ok != (err == nil) || (!s.ok && !errors.Is(err, fence.ErrStale)) {
			t.Fatalf("step %d (%d/%s) = %v, want ok=%v", i, s.tok, s.owner, err, s.ok)
		}
	}
	if h := direct.HGetAll(ctx, "huge").Val(); h[fence.TokenField] != "18446744073709551615" || h["value"] != "b" {
		t.Fatalf("huge record %v", h)
	}
}

// adv31aDialHook runs onDial after the n-th dial of a go-redis client.
type adv31aDialHook struct {
	dials  atomic.Int32
	n      int32
	onDial func()
}

func (h *adv31aDialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if h.dials.Add(1) == h.n && h.onDial != nil {
			h.onDial()
		}
		return c, err
	}
}
func (h *adv31aDialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *adv31aDialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A write whose reply is lost was carried out; go-redis re-sends it on a
// new connection, and a newer holder writes in between: the re-sent write
// is refused. ErrStale ("nothing was written") would be false: the first
// attempt was written, and the newer holder may have built on it. The
// outcome is unknown (lease.ErrUnknown), not stale.
func TestAdversary31a_RedisRetriedWriteRefusedIsUnknown(t *testing.T) {
	srv := leasetest.StartRedis(t)
	px := leasetest.StartProxy(t, srv.Addr())
	direct := srv.Client(t)
	ctx := context.Background()
	hook := &adv31aDialHook{n: 2}
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	store := fence.NewRedis(rdb)
	if err := store.Set(ctx, stamp(101, "c"), "rec", "v1"); err != nil {
		t.Fatal(err)
	}
	var newer error
	hook.onDial = func() {
		// The newer holder writes another field only, so that the value
		// shows whose write was carried out.
		newer = fence.NewRedis(direct).HSet(ctx, stamp(103, "e"), "rec", "note", "by e")
	}
	px.Set(leasetest.CutNextReply)
	err := store.Set(ctx, stamp(102, "d"), "rec", "v2 by d")
	if newer != nil {
		t.Fatalf("the newer write: %v", newer)
	}
	h := direct.HGetAll(ctx, "rec").Val()
	if h["value"] != "v2 by d" || h[fence.TokenField] != "103" {
		t.Fatalf("record %v: want d's value under e's stamp (the proxy cut %d replies, dials %d)", h, px.Cut(), hook.dials.Load())
	}
	if errors.Is(err, fence.ErrStale) || err == nil {
		t.Fatalf("a write that was carried out (then superseded) = %v, want unknown, not stale or done", err)
	}
	if !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("a retried write refused at the retry = %v, want lease.ErrUnknown", err)
	}
}

// An observer told of a stale write may look at the store that refused
// it (a test's or an example's observer checking what the store holds):
// the Memory store must not call the observer while holding its lock.
func TestAdversary31a_MemoryObserverMayReadStore(t *testing.T) {
	srv := leasetest.StartRedis(t)
	m := fence.NewMemory[string]()
	seen := make(chan string, 4)
	obs := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventStaleWriteRejected {
			v, _, _ := m.Get("acct")
			seen <- v
		}
	})
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := m.Set(stamp(1<<62, "newer"), "acct", "newest"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	err = c.Do(context.Background(), "acct", lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		go func() { done <- m.Set(st, "acct", "late") }()
		select {
		case err := <-done:
			if !errors.Is(err, fence.ErrStale) {
				t.Errorf("stale write = %v, want ErrStale", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("the stale write did not return in 2s: the observer, called under the store's lock, deadlocked reading the store")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-seen:
		if v != "newest" {
			t.Fatalf("the observer read %q", v)
		}
	default:
		t.Fatal("the stale write was not reported")
	}
}

// A zero Memory (a struct field, a var) is usable, as a Go type with a
// mutex inside is expected to be, instead of panicking on a nil map.
func TestAdversary31a_MemoryZeroValue(t *testing.T) {
	var m fence.Memory[int]
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("a write to a zero Memory panicked: %v", p)
			}
		}()
		if err := m.Set(stamp(5, "a"), "k", 1); err != nil {
			t.Fatal(err)
		}
	}()
	if err := m.Set(stamp(4, "b"), "k", 2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older write = %v", err)
	}
	if v, s, ok := m.Get("k"); !ok || v != 1 || s.Token != 5 {
		t.Fatalf("Get = %d @%d %v", v, s.Token, ok)
	}
}
