package lease_test

// Round 53: adversary of commit 482bf98 (a waiter queued before the server
// reached maxmemory keeps its place: its re-check's refused ZADD is
// followed by a PEXPIRE of the queue, after which the entry's HSET passes).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv53Variants are the acquire script on this server and under the
// pre-7.0 stand-in.
var adv53Variants = []struct{ name, src string }{{"7.0", lease.AcquireSrc}, {"before 7.0", adv52Shim + lease.AcquireSrc}}

// adv53Run runs the acquire script src for identity id on key k: TTL 10s,
// unfenced, queue entry lifetime life ms, attempt seq. The member is
// "id|10000|0|100|inbox".
func adv53Run(rdb *redis.Client, src, k, id string, life, seq int) (int64, error) {
	return adv53RunKeys(rdb, src, acquireKeys(k), "{"+k+"}:ch", id, life, seq)
}

func adv53RunKeys(rdb *redis.Client, src string, keys []string, channel, id string, life, seq int) (int64, error) {
	member := adv53Member(id)
	return redis.NewScript(src).Run(context.Background(), rdb, keys, id, 10000, "0", 60000, life, member, channel, seq).Int64()
}

// adv53LeaseKeys are the script's keys for key k under the lease: prefix
// (as the Client lays them out), so that the README ACL covers them.
func adv53LeaseKeys(k string) ([]string, string) {
	l := lockKey(k)
	b := strings.TrimSuffix(l, ":l")
	return []string{l, b + ":f", b + ":q", b + ":x"}, b + ":c"
}

func adv53Member(id string) string { return id + "|10000|0|100|inbox" }

// adv53ServerMs is the server's time in ms.
func adv53ServerMs(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

// TestAdversary53_PexpireThenHsetAtMaxmemory checks the server behavior the
// change relies on, on this server: at maxmemory a script's HSET as first
// write is refused (OOM), while the same HSET after a PEXPIRE of an
// existing key passes. So does one after a write that changes nothing (a
// PEXPIRE of a missing key, an HDEL of a missing field): the acquire
// script's re-check at maxmemory opens with such an HDEL.
func TestAdversary53_PexpireThenHsetAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, rdb)
	rdb.Set(ctx, "{x}a", "1", time.Minute)
	oom(true)
	defer oom(false)
	hsetOnly := `return redis.pcall('HSET', KEYS[2], 'f', 'v')`
	r, _ := rdb.Eval(ctx, hsetOnly, []string{"{x}a", "{x}h"}).Result()
	err := rdb.Eval(ctx, hsetOnly, []string{"{x}a", "{x}h"}).Err()
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("HSET first at maxmemory: %v, %v; want OOM", r, err)
	}
	after := `redis.call('PEXPIRE', KEYS[1], 60000) return redis.call('HSET', KEYS[2], 'f', 'v')`
	if n, err := rdb.Eval(ctx, after, []string{"{x}a", "{x}h"}).Int64(); err != nil || n != 1 {
		t.Fatalf("HSET after PEXPIRE at maxmemory: %d, %v; want 1", n, err)
	}
	// A write that changes nothing opens the way too: the acquire script's
	// re-check at maxmemory opens with an HDEL of a field no entry has.
	for field, open := range map[string]string{
		"g": `redis.call('PEXPIRE', KEYS[1], 60000)`, // of a missing key
		"i": `redis.call('HDEL', KEYS[2], '')`,       // of a missing field
	} {
		script := open + ` return redis.call('HSET', KEYS[2], '` + field + `', 'v')`
		if n, err := rdb.Eval(ctx, script, []string{"{x}none", "{x}h"}).Int64(); err != nil || n != 1 {
			t.Errorf("HSET after %s at maxmemory: %d, %v; want 1", open, n, err)
		}
	}
	info := rdb.Info(ctx, "server").Val()
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "redis_version") || strings.HasPrefix(l, "valkey_version") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// TestAdversary53_ScriptEdgesAtMaxmemory runs the acquire script at
// maxmemory against queues in odd states (each set up with the server out
// of maxmemory, as from outside). A demanding user expects: a queued
// waiter (member and entry there) answered busy with its entry
// refreshed; everything else
// refused, with nothing changed; the lock still the holder's; no queue
// key left without expiry; the queue's expiry never shortened.
func TestAdversary53_ScriptEdgesAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, rdb)
	type tc struct {
		name  string
		setup func(t *testing.T, q []string) // out of maxmemory; w1 queued (life 3s, seq 1)
		// busy: the re-check of w1 (life 5s, seq 2) must answer busy;
		// otherwise it must be refused and change nothing.
		busy bool
		// qttl: the queue's least expiry after the re-check (busy only)
		qttl time.Duration
	}
	m := adv53Member("w1")
	cases := []tc{
		{"plain", func(t *testing.T, q []string) {}, true, 4 * time.Second},
		{"queue without expiry", func(t *testing.T, q []string) { rdb.Persist(ctx, q[2]) }, true, 4 * time.Second},
		{"hash without expiry", func(t *testing.T, q []string) { rdb.Persist(ctx, q[3]) }, true, 4 * time.Second},
		{"both without expiry", func(t *testing.T, q []string) { rdb.Persist(ctx, q[2]); rdb.Persist(ctx, q[3]) }, true, 4 * time.Second},
		{"queue expiry shortened", func(t *testing.T, q []string) { rdb.PExpire(ctx, q[2], 300*time.Millisecond) }, true, 4 * time.Second},
		{"queue expiry longer (another waiter)", func(t *testing.T, q []string) {
			rdb.ZAdd(ctx, q[2], redis.Z{Score: 1e18, Member: "w9|10000|0|100|inbox"})
			rdb.HSet(ctx, q[3], "w9|10000|0|100|inbox", strconv.FormatInt(adv53ServerMs(t, rdb)+30000, 10)+":1")
			rdb.PExpire(ctx, q[2], 30*time.Second)
			rdb.PExpire(ctx, q[3], 30*time.Second)
		}, true, 29 * time.Second},
		{"entry near expiry (150ms left)", func(t *testing.T, q []string) {
			rdb.HSet(ctx, q[3], m, strconv.FormatInt(adv53ServerMs(t, rdb)+150, 10)+":1")
		}, true, 4 * time.Second},
		{"entry without seq (older Client)", func(t *testing.T, q []string) {
			rdb.HSet(ctx, q[3], m, strconv.FormatInt(adv53ServerMs(t, rdb)+3000, 10))
		}, true, 4 * time.Second},
		// Still queued (no release passed it over): kept, as below
		// maxmemory, the entry written anew.
		{"entry expired", func(t *testing.T, q []string) {
			rdb.HSet(ctx, q[3], m, strconv.FormatInt(adv53ServerMs(t, rdb)-1, 10)+":1")
		}, true, 4 * time.Second},
		{"queue expiry set from outside to 1e15 ms", func(t *testing.T, q []string) { rdb.Do(ctx, "PEXPIRE", q[2], "1000000000000000") }, true, 4 * time.Second},
		{"entry malformed", func(t *testing.T, q []string) { rdb.HSet(ctx, q[3], m, "soon:1") }, true, 4 * time.Second},
		{"entry missing, member there", func(t *testing.T, q []string) { rdb.HDel(ctx, q[3], m) }, false, 0},
		{"hash missing, member there", func(t *testing.T, q []string) { rdb.Del(ctx, q[3]) }, false, 0},
		{"member missing, entry live", func(t *testing.T, q []string) { rdb.ZRem(ctx, q[2], m) }, false, 0},
		{"queue of the wrong type", func(t *testing.T, q []string) {
			rdb.Del(ctx, q[2])
			rdb.Set(ctx, q[2], "x", time.Minute)
		}, false, 0},
		{"hash of the wrong type", func(t *testing.T, q []string) {
			rdb.Del(ctx, q[3])
			rdb.Set(ctx, q[3], "x", time.Minute)
		}, false, 0},
	}
	for _, v := range adv53Variants {
		for _, c := range cases {
			t.Run(v.name+"/"+c.name, func(t *testing.T) {
				k := uniqueKey(t)
				q := acquireKeys(k)
				if n, err := adv53Run(rdb, v.src, k, "holder", 0, 1); n != 0 || err != nil {
					t.Fatalf("holder: %d, %v", n, err)
				}
				if n, err := adv53Run(rdb, v.src, k, "w1", 3000, 1); n >= -3 || err != nil {
					t.Fatalf("w1 joins: %d, %v", n, err)
				}
				c.setup(t, q)
				before := adv53Dump(rdb, q)
				oom(true)
				n, err := adv53Run(rdb, v.src, k, "w1", 5000, 2)
				oom(false)
				after := adv53Dump(rdb, q)
				if c.busy {
					if err != nil || n >= -3 {
						t.Fatalf("re-check: %d, %v; want busy", n, err)
					}
					if e := rdb.HGet(ctx, q[3], m).Val(); !strings.HasSuffix(e, ":2") {
						t.Errorf("entry %q after the re-check, want it refreshed by attempt 2", e)
					}
					for _, key := range q[2:] {
						if d := rdb.PTTL(ctx, key).Val(); d < c.qttl {
							t.Errorf("%s expires in %v after the re-check, want at least %v", key, d, c.qttl)
						}
					}
				} else {
					if err == nil {
						t.Fatalf("re-check: %d; want refused", n)
					}
					t.Logf("refused: %v", err)
					if after != before {
						t.Errorf("refused re-check changed the queue:\n before %s\n after  %s", before, after)
					}
				}
				if got := rdb.Get(ctx, q[0]).Val(); got != "holder:0" {
					t.Errorf("lock holds %q, want holder:0", got)
				}
				for _, key := range q[2:] {
					if rdb.Exists(ctx, key).Val() == 1 && rdb.PTTL(ctx, key).Val() == -1 && c.name != "queue without expiry" && c.name != "hash without expiry" && c.name != "both without expiry" {
						t.Errorf("%s left without expiry", key)
					}
					if c.busy && rdb.PTTL(ctx, key).Val() == -1 {
						t.Errorf("%s left without expiry by the busy re-check", key)
					}
				}
			})
		}
	}
}

// adv53Dump describes the queue and its entries, without their TTLs'
// exact values (only whether they have one).
func adv53Dump(rdb *redis.Client, q []string) string {
	ctx := context.Background()
	var b strings.Builder
	for _, key := range q[2:] {
		typ := rdb.Type(ctx, key).Val()
		fmt.Fprintf(&b, "%s(%s,ttl=%v) ", key, typ, rdb.PTTL(ctx, key).Val() >= 0)
		switch typ {
		case "zset":
			fmt.Fprint(&b, rdb.ZRangeWithScores(ctx, key, 0, -1).Val(), " ")
		case "hash":
			fmt.Fprint(&b, rdb.HGetAll(ctx, key).Val(), " ")
		}
	}
	return b.String()
}

// TestAdversary53_LeastPrivilegeACLScriptAtMaxmemory: the README's
// least-privilege ACL (TestLeastPrivilegeACLRecipe) at maxmemory. A queued
// waiter's re-check must answer busy (the change's claim), and a new
// waiter must be refused naming OOM (README: "a new waiter's queue entry
// [is] refused with ErrRefused naming OOM").
func TestAdversary53_LeastPrivilegeACLScriptAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	oom := maxmemoryFull(t, admin)
	user := aclClient(t, srv, "leases53", leastPrivilege...)
	// The script's keys under the lease: prefix, so the ACL's key pattern
	// covers them.
	for _, v := range adv53Variants {
		t.Run(v.name, func(t *testing.T) {
			keys, ch := adv53LeaseKeys(uniqueKey(t))
			run := func(id string, life, seq int) (int64, error) {
				return adv53RunKeys(user, v.src, keys, ch, id, life, seq)
			}
			if n, err := run("holder", 0, 1); n != 0 || err != nil {
				t.Fatalf("holder: %d, %v", n, err)
			}
			if n, err := run("w1", 3000, 1); n >= -3 || err != nil {
				t.Fatalf("w1 joins: %d, %v", n, err)
			}
			oom(true)
			defer oom(false)
			if n, err := run("w1", 5000, 2); err != nil || n >= -3 {
				t.Errorf("queued w1 re-checks at maxmemory under the README ACL: %d, %v; want busy", n, err)
			}
			if _, err := run("w2", 5000, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Errorf("new waiter at maxmemory under the README ACL: %v; want refused naming OOM", err)
			}
		})
	}
}

// TestAdversary53_LeastPrivilegeACLQueuedWaiterAtMaxmemory is
// TestAdversary39_QueuedWaiterRechecksAtMaxmemory with both Clients on the
// README's least-privilege ACL: the waiter queued before maxmemory must
// keep its place through its re-checks there and be handed the key.
func TestAdversary53_LeastPrivilegeACLQueuedWaiterAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	hc, _ := newClient(t, aclClient(t, srv, "h53", leastPrivilege...))
	wc, wrec := newClient(t, aclClient(t, srv, "w53", leastPrivilege...), lease.WithRecheck(100*time.Millisecond))
	key := uniqueKey(t)
	release := make(chan struct{})
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}
	hdone := hold(t, hc, key, s, release)
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	wdone := make(chan error, 1)
	entered := make(chan struct{}, 1)
	go func() {
		ws := s
		ws.Wait = 5 * time.Second
		wdone <- wc.Do(ctx, key, ws, func(context.Context) error { entered <- struct{}{}; return nil })
	}()
	for end := time.Now().Add(3 * time.Second); admin.ZCard(ctx, q).Val() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the waiter did not queue")
		}
	}
	oom(true)
	time.Sleep(600 * time.Millisecond) // about six re-checks
	close(release)
	herr, werr := <-hdone, <-wdone
	oom(false)
	if herr != nil || werr != nil {
		t.Fatalf("holder's Do = %v, waiter's = %v; want both nil (refusals observed: %d)", herr, werr, wrec.Count(lease.EventRefused))
	}
	select {
	case <-entered:
	default:
		t.Fatal("waiter did not enter")
	}
}

// adv53WaitQueued waits until the queue of key holds n members.
func adv53WaitQueued(t *testing.T, admin *redis.Client, key string, n int64) {
	t.Helper()
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	for end := time.Now().Add(5 * time.Second); admin.ZCard(context.Background(), q).Val() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d waiters queued, want %d", admin.ZCard(context.Background(), q).Val(), n)
		}
	}
}

// adv53Scene is a holder of key (its Spec hs) on one Client and a waiter
// (ws, under wctx, running fn) on another that re-checks every recheck,
// queued before the server is put at maxmemory, which it is on return.
type adv53Scene struct {
	admin   *redis.Client
	oom     func(on bool)
	key     string
	release chan struct{} // closed: the holder's call returns
	hdone   <-chan error
	wdone   chan error
	wrec    *leasetest.Recorder // the waiter's Client's events
}

func adv53Queued(t *testing.T, hs, ws lease.Spec, recheck time.Duration, wctx context.Context, fn func(context.Context) error) *adv53Scene {
	t.Helper()
	srv := leasetest.StartRedis(t)
	sc := &adv53Scene{admin: srv.Client(t), key: uniqueKey(t), release: make(chan struct{}), wdone: make(chan error, 1)}
	sc.oom = maxmemoryFull(t, sc.admin)
	hc, _ := newClient(t, srv.Client(t))
	wc, wrec := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	sc.wrec = wrec
	sc.hdone = hold(t, hc, sc.key, hs, sc.release)
	go func() { sc.wdone <- wc.Do(wctx, sc.key, ws, fn) }()
	adv53WaitQueued(t, sc.admin, sc.key, 1)
	sc.oom(true)
	return sc
}

// TestAdversary53_ManyQueuedWaitersAtMaxmemory: eight waiters on two
// Clients (one re-checking every 100ms, one at the default 500ms) queue
// before the server reaches maxmemory; the holder releases there. Each
// must be handed the key in turn (all at maxmemory), no two bodies may
// overlap (a shared counter inside fn), fenced tokens must increase, and
// afterwards the lock is free and no key is left without expiry.
func TestAdversary53_ManyQueuedWaitersAtMaxmemory(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprint("fence=", fence), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			ctx := context.Background()
			oom := maxmemoryFull(t, admin)
			hc, _ := newClient(t, srv.Client(t))
			c1, r1 := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
			c2, r2 := newClient(t, srv.Client(t))
			key := uniqueKey(t)
			release := make(chan struct{})
			s := lease.Spec{TTL: 5 * time.Second, Deadline: 14 * time.Second, Fence: fence}
			hdone := hold(t, hc, key, s, release)
			var (
				inside, maxInside atomic.Int32
				mu                sync.Mutex
				order             []int
				tokens            []lease.Token
			)
			errs := make(chan error, 8)
			for i := 0; i < 8; i++ {
				c := c1
				if i%2 == 1 {
					c = c2
				}
				go func(i int, c *lease.Client) {
					ws := s
					ws.Wait = 8 * time.Second
					errs <- c.Do(ctx, key, ws, func(ctx context.Context) error {
						if n := inside.Add(1); n > maxInside.Load() {
							maxInside.Store(n)
						}
						tok, _ := lease.TokenFrom(ctx)
						mu.Lock()
						order = append(order, i)
						tokens = append(tokens, tok)
						mu.Unlock()
						time.Sleep(30 * time.Millisecond)
						inside.Add(-1)
						return nil
					})
				}(i, c)
				adv53WaitQueued(t, admin, key, int64(i+1)) // queue order is i
			}
			oom(true)
			time.Sleep(700 * time.Millisecond) // re-checks of both Clients at maxmemory
			close(release)
			if err := <-hdone; err != nil {
				t.Errorf("holder: %v", err)
			}
			for i := 0; i < 8; i++ {
				if err := <-errs; err != nil {
					t.Errorf("waiter: %v", err)
				}
			}
			oom(false)
			if m := maxInside.Load(); m > 1 {
				t.Errorf("%d bodies ran at once", m)
			}
			t.Logf("entry order %v, tokens %v; refusals %d/%d, unconfirmed releases %d/%d", order, tokens,
				r1.Count(lease.EventRefused), r2.Count(lease.EventRefused), r1.Count(lease.EventReleaseUnconfirmed), r2.Count(lease.EventReleaseUnconfirmed))
			for i := range order {
				if order[i] != i {
					t.Errorf("entry order %v, want queue order 0..7", order)
					break
				}
			}
			for i := 1; fence && i < len(tokens); i++ {
				if tokens[i] <= tokens[i-1] {
					t.Errorf("tokens %v not increasing", tokens)
					break
				}
			}
			if v := admin.Exists(ctx, lockKey(key)).Val(); v != 0 {
				t.Errorf("lock still there after every call returned: %q", admin.Get(ctx, lockKey(key)).Val())
			}
			adv52NoKeyWithoutExpiry(t, admin)
		})
	}
}

// TestAdversary53_ToggledMaxmemoryExclusion: nine fenced, waiting callers
// on three Clients loop for 3s while maxmemory is switched on and off every
// 60-140ms. Refusals at maxmemory are expected (a new waiter, a free
// key's grant), but only those: every error must be ErrRefused naming
// OOM; no two bodies overlap; tokens only increase; afterwards no key is
// left without expiry and the lock is free.
func TestAdversary53_ToggledMaxmemoryExclusion(t *testing.T) {
	t.Parallel()
	admin, key := adv53Toggle{callers: 9, recheck: 50 * time.Millisecond, step: 100 * time.Millisecond,
		spec: lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 4 * time.Second, Fence: true},
		hold: 10 * time.Millisecond, toggle: 60 * time.Millisecond, span: 80 * time.Millisecond}.run(t)
	time.Sleep(100 * time.Millisecond)
	if v := admin.Exists(context.Background(), lockKey(key)).Val(); v != 0 {
		t.Errorf("lock still there after every call returned: %q (pttl %v)", admin.Get(context.Background(), lockKey(key)).Val(), admin.PTTL(context.Background(), lockKey(key)).Val())
	}
	adv52NoKeyWithoutExpiry(t, admin)
}

// adv53Toggle is a workload: fenced callers (spec) on three Clients, the
// i-th re-checking every recheck + i×step, loop on one key for 3s, each
// holding it for hold, while maxmemory is switched on and off every
// toggle to toggle + span. Every error must be ErrRefused naming OOM (a
// new waiter, a free key's grant to a caller not queued), no two bodies
// may overlap, tokens only increase, and some calls must be granted.
type adv53Toggle struct {
	callers            int
	recheck, step      time.Duration
	spec               lease.Spec
	hold, toggle, span time.Duration
}

// run runs the workload on a server of its own, and returns its admin
// client and the key once every call returned (out of maxmemory).
func (w adv53Toggle) run(t *testing.T) (*redis.Client, string) {
	t.Helper()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	key := uniqueKey(t)
	var clients []*lease.Client
	for i := 0; i < 3; i++ {
		c, _ := newClient(t, srv.Client(t), lease.WithRecheck(w.recheck+time.Duration(i)*w.step))
		clients = append(clients, c)
	}
	stop := time.Now().Add(3 * time.Second)
	var (
		inside, maxInside atomic.Int32
		mu                sync.Mutex
		last              lease.Token
		grants, oomErrs   int
		bad               []string
		wg                sync.WaitGroup
	)
	for g := 0; g < w.callers; g++ {
		wg.Add(1)
		go func(c *lease.Client) {
			defer wg.Done()
			for time.Now().Before(stop) {
				err := c.Do(ctx, key, w.spec, func(ctx context.Context) error {
					if n := inside.Add(1); n > maxInside.Load() {
						maxInside.Store(n)
					}
					tok, _ := lease.TokenFrom(ctx)
					mu.Lock()
					if tok <= last {
						bad = append(bad, fmt.Sprintf("token %d after %d", tok, last))
					}
					last = tok
					grants++
					mu.Unlock()
					time.Sleep(w.hold)
					inside.Add(-1)
					return nil
				})
				mu.Lock()
				switch {
				case err == nil:
				case errors.Is(err, lease.ErrRefused) && strings.Contains(err.Error(), "OOM"):
					oomErrs++
				default:
					bad = append(bad, err.Error())
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}(clients[g%3])
	}
	on := false
	for i := 0; time.Now().Before(stop); i++ {
		on = !on
		oom(on)
		time.Sleep(w.toggle + time.Duration(i*37)*time.Millisecond%w.span)
	}
	oom(false)
	wg.Wait()
	if m := maxInside.Load(); m > 1 {
		t.Errorf("%d bodies ran at once", m)
	}
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d grants, %d OOM refusals", grants, oomErrs)
	if grants == 0 {
		t.Error("no grants")
	}
	return admin, key
}

// TestAdversary53_WaiterGivesUpAtMaxmemory: a queued waiter whose context
// ends while the server is at maxmemory leaves the queue (its giving up is
// a removal, allowed there), so that the release does not hand the key to
// a caller that is gone: the key is free right after the release.
func TestAdversary53_WaiterGivesUpAtMaxmemory(t *testing.T) {
	ctx := context.Background()
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}
	ws := s
	ws.Wait = 5 * time.Second
	wctx, cancel := context.WithCancel(ctx)
	sc := adv53Queued(t, s, ws, 100*time.Millisecond, wctx, func(context.Context) error { return errors.New("entered") })
	admin, oom, key, release, hdone := sc.admin, sc.oom, sc.key, sc.release, sc.hdone
	time.Sleep(350 * time.Millisecond) // re-checks at maxmemory
	cancel()
	if err := <-sc.wdone; !errors.Is(err, context.Canceled) {
		t.Errorf("waiter: %v, want canceled", err)
	}
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	if n := admin.ZCard(ctx, q).Val(); n != 0 {
		t.Errorf("%d entries left in the queue after the waiter gave up at maxmemory", n)
	}
	close(release)
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	if v := admin.Get(ctx, lockKey(key)).Val(); v != "" {
		t.Errorf("after the release at maxmemory the lock holds %q (handed to the waiter that gave up?)", v)
	}
	oom(false)
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary53_HolderExpiresAtMaxmemory: the holder dies (its lease
// runs out, no release) while the server is at maxmemory and a waiter is
// queued. The waiter, queued before maxmemory, is granted the free key
// there (its queue entry goes first, a write that frees memory) and
// enters; it leaves the queue. (482bf98 refused it, OOM.)
func TestAdversary53_HolderExpiresAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	wc, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	key := uniqueKey(t)
	if err := admin.Set(ctx, lockKey(key), "ghost:0", 800*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	wdone := make(chan error, 1)
	go func() {
		wdone <- wc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second},
			func(context.Context) error { return nil })
	}()
	adv53WaitQueued(t, admin, key, 1)
	oom(true)
	var err error
	select {
	case err = <-wdone:
	case <-time.After(6 * time.Second):
		t.Fatal("waiter still waiting 6s after the holder's lease ran out at maxmemory")
	}
	if err != nil {
		t.Errorf("waiter: %v; want it granted the free key", err)
	}
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	if n := admin.ZCard(ctx, q).Val(); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
	oom(false)
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary53_KeepHolderHandsOverAtMaxmemory: the holder keeps its
// lease between calls (Spec.Keep). A waiter queued before maxmemory asked
// for it ("w"); when the holder's call returns, at maxmemory, its Client
// releases the kept lease at once and the waiter is handed the key and
// enters, well before the Keep would have ended.
func TestAdversary53_KeepHolderHandsOverAtMaxmemory(t *testing.T) {
	t.Parallel()
	entered := make(chan time.Time, 1)
	sc := adv53Queued(t, lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Keep: 8 * time.Second},
		lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Wait: 6 * time.Second}, 100*time.Millisecond,
		context.Background(), func(context.Context) error { entered <- time.Now(); return nil })
	admin, oom, release, hdone, wdone := sc.admin, sc.oom, sc.release, sc.hdone, sc.wdone
	time.Sleep(400 * time.Millisecond)
	returned := time.Now()
	close(release)
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	if err := <-wdone; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	oom(false)
	if d := (<-entered).Sub(returned); d > time.Second {
		t.Errorf("waiter entered %v after the keeping holder's call returned, want at once", d)
	}
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary53_NewWaiterBehindQueuedOneAtMaxmemory: with w1 queued
// before maxmemory, a second caller w2 arriving at maxmemory is refused
// (ErrRefused naming OOM, promptly, not after its Wait), leaves nothing
// behind, and w1 is still handed the key by the release.
func TestAdversary53_NewWaiterBehindQueuedOneAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	hc, _ := newClient(t, srv.Client(t))
	c1, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	c2, r2 := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	key := uniqueKey(t)
	release := make(chan struct{})
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}
	hdone := hold(t, hc, key, s, release)
	ws := s
	ws.Wait = 5 * time.Second
	w1 := make(chan error, 1)
	go func() { w1 <- c1.Do(ctx, key, ws, func(context.Context) error { return nil }) }()
	adv53WaitQueued(t, admin, key, 1)
	oom(true)
	start := time.Now()
	err := c2.Do(ctx, key, ws, func(context.Context) error { return errors.New("w2 entered") })
	if !errors.Is(err, lease.ErrRefused) || !strings.Contains(err.Error(), "OOM") || time.Since(start) > time.Second {
		t.Errorf("w2 at maxmemory: %v after %v; want ErrRefused naming OOM at once", err, time.Since(start))
	}
	if n := r2.Count(lease.EventAcquireUnknown); n != 0 {
		t.Errorf("w2: %d unknown acquires", n)
	}
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	if m := admin.ZRange(ctx, q, 0, -1).Val(); len(m) != 1 {
		t.Errorf("queue %v after w2's refusal, want w1 alone", m)
	}
	close(release)
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	if err := <-w1; err != nil {
		t.Errorf("w1: %v", err)
	}
	oom(false)
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary53_QueuedWaiterStalledAtMaxmemory: the waiter's re-checks
// are held up for longer than its place in the queue lives (2 re-checks +
// 100ms: here a CLIENT PAUSE WRITE of 1.5s stands in for a network stall
// or a process pause) while the server is at maxmemory. The queue and its
// entries expire meanwhile: the waiter is a new one when it looks again,
// and a new waiter's entry grows memory. A limit (README): its wait ends
// at once with ErrRefused naming OOM, not a hang, and nothing is left
// without expiry. (Below maxmemory it would queue again.)
func TestAdversary53_QueuedWaiterStalledAtMaxmemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := lease.Spec{TTL: 8 * time.Second, Deadline: 12 * time.Second}
	ws := s
	ws.Wait = 6 * time.Second
	// Re-checks every 200ms: the waiter's place lives 500ms.
	sc := adv53Queued(t, s, ws, 200*time.Millisecond, ctx, func(context.Context) error { return nil })
	admin, oom, release, hdone, wdone := sc.admin, sc.oom, sc.release, sc.hdone, sc.wdone
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "1500", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	close(release)
	herr, werr := <-hdone, <-wdone
	oom(false)
	if herr != nil {
		t.Errorf("holder: %v", herr)
	}
	if !errors.Is(werr, lease.ErrRefused) || !strings.Contains(werr.Error(), "OOM") {
		t.Errorf("waiter stalled %v at maxmemory, its place expired: %v; want ErrRefused naming OOM", 1500*time.Millisecond, werr)
	}
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary53_WaiterClientClosedAtMaxmemory: the queued waiter's
// Client is closed while the server is at maxmemory. Close gives up its
// place (a removal, allowed there): the release then frees the key
// instead of handing it to a caller that is gone.
func TestAdversary53_WaiterClientClosedAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	hc, _ := newClient(t, srv.Client(t))
	wc, err := lease.New(srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	release := make(chan struct{})
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}
	hdone := hold(t, hc, key, s, release)
	wdone := make(chan error, 1)
	go func() {
		ws := s
		ws.Wait = 5 * time.Second
		wdone <- wc.Do(ctx, key, ws, func(context.Context) error { return errors.New("entered") })
	}()
	adv53WaitQueued(t, admin, key, 1)
	oom(true)
	time.Sleep(350 * time.Millisecond)
	wc.Close()
	if err := <-wdone; !errors.Is(err, lease.ErrClosed) {
		t.Errorf("waiter: %v, want ErrClosed", err)
	}
	// Close returns once its give-up was written (not necessarily
	// answered): the queue is looked at for up to 1s.
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	closed := time.Now()
	for admin.ZCard(ctx, q).Val() != 0 && time.Since(closed) < time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if n := admin.ZCard(ctx, q).Val(); n != 0 {
		t.Errorf("%d entries left 1s after Close at maxmemory: %v", n, admin.ZRange(ctx, q, 0, -1).Val())
	}
	t.Logf("queue empty %v after Close returned", time.Since(closed))
	close(release)
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	if v := admin.Get(ctx, lockKey(key)).Val(); v != "" {
		t.Errorf("lock holds %q after the release (handed to the closed waiter?)", v)
	}
	oom(false)
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary53_HoldMinHolderAtMaxmemory: the holder's call has HoldMin,
// so its release at maxmemory sets the remaining hold instead of handing
// the key over; when the hold ends the key is free, and the queued
// waiter's grant is a write of a free key. A demanding user reading "a
// waiter queued before maxmemory keeps its place and is handed the key"
// expects the waiter to get the key once the hold ends: it does (its
// queue entry goes first, a write that frees memory; 482bf98 refused it).
func TestAdversary53_HoldMinHolderAtMaxmemory(t *testing.T) {
	t.Parallel()
	sc := adv53Queued(t, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, HoldMin: 1500 * time.Millisecond},
		lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 6 * time.Second}, 100*time.Millisecond,
		context.Background(), func(context.Context) error { return nil })
	admin, oom, release, hdone, wdone := sc.admin, sc.oom, sc.release, sc.hdone, sc.wdone
	close(release) // about 0s into the hold: the remaining ~1.5s becomes the TTL
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	werr := <-wdone
	oom(false)
	if werr != nil {
		t.Errorf("waiter queued before maxmemory, behind a HoldMin holder: %v; want it handed the key when the hold ends", werr)
	}
	adv52NoKeyWithoutExpiry(t, admin)
}
