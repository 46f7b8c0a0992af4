package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func TestNewRefusesBadClients(t *testing.T) {
	if _, err := lease.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": shared.Addr()}})
	defer ring.Close()
	if _, err := lease.New(ring); err == nil || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(ring) = %v, want a refusal naming Ring", err)
	}
	rdb := shared.Client(t)
	for _, o := range []lease.Option{
		lease.WithPrefix("a{b"), lease.WithReplicas(-1, time.Second), lease.WithReleaseTimeout(0), lease.WithObserver(nil), lease.WithCounterTTL(-1),
	} {
		if _, err := lease.New(rdb, o); err == nil {
			t.Errorf("New with a bad option succeeded")
		}
	}
}

// countHook counts the commands a go-redis client processes (as an
// instrumentation hook such as redisotel would see them).
type countHook struct{ n atomic.Int64 }

func (*countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// A *redis.Client as redis.NewClient makes it by default (no
// ContextTimeoutEnabled: go-redis then bounds reads by its ReadTimeout,
// 3 s, not by the context) is taken as it is: DESIGN §4 asks that
// deadlines hold whatever that setting. Lease traffic still goes through
// the user's pool (not its hooks: go-redis's clone starts without them),
// the user's options are not modified, and Do returns by its Deadline
// when Redis stops answering, not after the ReadTimeout.
func TestNewHonoursDeadlinesOfAPlainClient(t *testing.T) {
	srv := leasetest.StartRedis(t)
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer plain.Close()
	c, err := lease.New(plain)
	if err != nil {
		t.Fatalf("New(a client without ContextTimeoutEnabled) = %v, want it taken", err)
	}
	defer c.Close()
	if plain.Options().ContextTimeoutEnabled {
		t.Fatal("New modified the user's options")
	}
	if c.Redis() != plain {
		t.Fatalf("Redis() = %p, want the client given to New %p", c.Redis(), plain)
	}
	if err := c.Do(context.Background(), uniqueKey(t), spec(time.Second, 5*time.Second), nop); err != nil {
		t.Fatal(err)
	}
	if n := plain.PoolStats().TotalConns; n == 0 {
		t.Fatal("the lease commands did not use the user's connection pool")
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	err = c.Do(context.Background(), uniqueKey(t), spec(5*time.Second, 400*time.Millisecond), func(context.Context) error {
		t.Error("fn entered with Redis paused")
		return nil
	})
	took := time.Since(start)
	mustIs(t, err, lease.ErrUnknown)
	if took > 400*time.Millisecond+250*time.Millisecond {
		t.Fatalf("Do with a 400ms Deadline returned after %v with Redis paused (the client's 3s ReadTimeout, not the deadline)", took.Round(time.Millisecond))
	}
}

// New uses the user's client itself (its pool and hooks), never modifies
// it, and Close leaves it open.
func TestNewUsesTheUsersClient(t *testing.T) {
	user := shared.Client(t) // ContextTimeoutEnabled
	hook := &countHook{}
	user.AddHook(hook)
	c, err := lease.New(user)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis() != user {
		t.Fatalf("Redis() = %p, want the user's client %p", c.Redis(), user)
	}
	if err := c.Do(context.Background(), uniqueKey(t), spec(time.Second, 5*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := hook.n.Load(); n < 2 {
		t.Fatalf("the user's hook saw %d lease commands, want the acquire and the release", n)
	}
	c.Close()
	if err := user.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Close closed the user's client: %v", err)
	}
}

// Bad input is refused before anything is sent: the client points at a
// closed port, so a sent command would fail as unknown instead.
func TestBadInputSendsNothing(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fn := func(context.Context) error { t.Error("fn called"); return nil }
	cases := []struct {
		name string
		key  string
		spec lease.Spec
		fn   func(context.Context) error
		is   error
	}{
		{"empty key", "", lease.Spec{Deadline: time.Second}, fn, lease.ErrBadKey},
		{"zero deadline", "k", lease.Spec{}, fn, nil},
		{"negative ttl", "k", lease.Spec{TTL: -1, Deadline: time.Second}, fn, nil},
		{"negative wait", "k", lease.Spec{Wait: -1, Deadline: time.Second}, fn, nil},
		{"min validity >= ttl", "k", lease.Spec{TTL: time.Second, MinValidity: time.Second, Deadline: 2 * time.Second}, fn, nil},
		{"wait >= deadline", "k", lease.Spec{Wait: time.Second, Deadline: time.Second}, fn, nil},
		{"hold > deadline", "k", lease.Spec{HoldMin: 2 * time.Second, Deadline: time.Second}, fn, nil},
		{"unknown busy policy", "k", lease.Spec{Deadline: time.Second, Busy: 7}, fn, nil},
		{"nil fn", "k", lease.Spec{Deadline: time.Second}, nil, nil},
	}
	for _, tc := range cases {
		err := c.Do(context.Background(), tc.key, tc.spec, tc.fn)
		if err == nil || errors.Is(err, lease.ErrUnknown) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: Do = %v; want a validation error%s", tc.name, err, map[bool]string{true: " wrapping " + fmt.Sprint(tc.is)}[tc.is != nil])
		}
	}
	var nilClient *lease.Client
	if err := nilClient.Do(context.Background(), "k", lease.Spec{Deadline: time.Second}, fn); err == nil {
		t.Error("Do on a nil client succeeded")
	}
}

func TestKeyPartIsInjective(t *testing.T) {
	key := func(x, y string) string { return "a:" + lease.KeyPart(x) + ":" + lease.KeyPart(y) }
	pairs := [][4]string{
		{"1:2", "3", "1", "2:3"},
		{"%3A", "", ":", ""},
		{"a}", "b", "a", "}b"},
		{"x y", "", "x", " y"},
	}
	for _, p := range pairs {
		if key(p[0], p[1]) == key(p[2], p[3]) {
			t.Errorf("(%q,%q) and (%q,%q) give the same key %q", p[0], p[1], p[2], p[3], key(p[0], p[1]))
		}
	}
	if got := lease.KeyPart("order-42_x.y"); got != "order-42_x.y" {
		t.Errorf("KeyPart changed a plain value: %q", got)
	}
	if got := lease.KeyPart("a:b%c"); got != "a%3Ab%25c" {
		t.Errorf("KeyPart(a:b%%c) = %q", got)
	}
}

func FuzzKeyPartNoSeparators(f *testing.F) {
	f.Add("1:2")
	f.Add("{x}%")
	f.Fuzz(func(t *testing.T, s string) {
		e := lease.KeyPart(s)
		if strings.ContainsAny(e, lease.KeySeparators) {
			t.Fatalf("KeyPart(%q) = %q keeps a separator", s, e)
		}
		if dec, err := url.PathUnescape(e); err != nil || dec != s {
			t.Fatalf("KeyPart(%q) = %q does not decode back (%q, %v)", s, e, dec, err)
		}
	})
}

// The runtime keeps a user key inside one hash tag: braces in the key are
// escaped, so all keys of a lease hash to the same Cluster slot.
func TestLockKeyLayout(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	for _, key := range []string{"plain", "with{brace}", "a%b"} {
		err := c.Do(context.Background(), key, lease.Spec{Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
			ks, _ := rdb.Keys(ctx, "lease:*").Result()
			var mine []string
			for _, k := range ks {
				if strings.HasSuffix(k, ":l") || strings.HasSuffix(k, ":f") {
					if strings.Contains(k, "{"+strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(key)+"}") {
						mine = append(mine, k)
					}
				}
			}
			if len(mine) != 2 {
				t.Errorf("key %q: lease keys %v, want lock and counter under one hash tag", key, mine)
			}
			slots := map[int64]bool{}
			for _, k := range mine {
				s, _ := rdb.ClusterKeySlot(ctx, k).Result()
				slots[s] = true
			}
			if len(slots) != 1 {
				t.Errorf("key %q: keys %v span slots %v", key, mine, slots)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if lockKey("plain") != "lease:{plain}:l" {
		t.Fatal("lockKey helper out of date")
	}
}

// Many waiters on many keys share one subscription connection.
func TestOneSubscriptionPerClient(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	release := make(chan struct{})
	var holders []<-chan error
	for i := range 5 {
		holders = append(holders, hold(t, c, fmt.Sprintf("%s-%d", t.Name(), i), spec(10*time.Second, 20*time.Second), release))
	}
	var wg sync.WaitGroup
	s := spec(10*time.Second, 20*time.Second)
	s.Wait = 10 * time.Second
	for i := range 5 {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Do(context.Background(), fmt.Sprintf("%s-%d", t.Name(), i), s, func(context.Context) error { return nil }); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	time.Sleep(300 * time.Millisecond) // all waiting
	list, _ := rdb.ClientList(context.Background()).Result()
	subs := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "sub=") && !strings.Contains(line, " sub=0 ") {
			subs++
		}
	}
	close(release)
	wg.Wait()
	for _, h := range holders {
		if err := <-h; err != nil {
			t.Error(err)
		}
	}
	if subs != 1 {
		t.Fatalf("%d subscribed connections for 15 waiters on 5 keys, want 1:\n%s", subs, list)
	}
}

// Under contention a releasing worker that loops straight back does not
// take the lease from the workers already waiting.
func TestContendedHandoffsGoToWaiters(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	const workers, loops = 4, 25
	var mu sync.Mutex
	var owners []int
	var wg sync.WaitGroup
	s := spec(5*time.Second, 30*time.Second)
	s.Wait = 20 * time.Second
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range loops {
				err := c.Do(context.Background(), key, s, func(context.Context) error {
					mu.Lock()
					owners = append(owners, w)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	changed := 0
	for i := 1; i < len(owners); i++ {
		if owners[i] != owners[i-1] {
			changed++
		}
	}
	share := float64(changed) / float64(len(owners)-1)
	t.Logf("%d grants, %.0f%% of handoffs changed owner", len(owners), 100*share)
	if len(owners) != workers*loops || share < 0.5 {
		t.Fatalf("%d grants, %.0f%% of handoffs changed owner; want %d and most", len(owners), 100*share, workers*loops)
	}
}
