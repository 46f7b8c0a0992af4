package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// acquireKeys are an acquire's keys for key k (the layout is the
// script's, not the Client's: these tests run the script alone).
func acquireKeys(k string) []string {
	k = "{" + k + "}"
	return []string{k, k + ":f", k + ":q", k + ":qx"}
}

// runAcquire runs the acquire script src for identity id: ttl and queue
// entry lifetime in ms (life 0: not waiting), unfenced.
func runAcquire(t *testing.T, rdb *redis.Client, src, k, id string, ttl, life int) int64 {
	t.Helper()
	member := fmt.Sprintf("%s|%d|0|100|inbox", id, ttl)
	n, err := redis.NewScript(src).Run(context.Background(), rdb, acquireKeys(k),
		id, ttl, "0", 60000, life, member, "{"+k+"}:ch", 1).Int64()
	if err != nil {
		t.Fatalf("acquire %s: %v", id, err)
	}
	return n
}

// A caller that finds the key held and will wait reads the holder's time
// left and joins the queue: the key's value comes back with its SET NX
// (SET NX GET), and the queue's expiry is lengthened by PEXPIRE GT, one
// command per key where a read and a write were two. Counted exactly, on
// a server of the test's own: 9 commands with the EVALSHA, where there
// were 12.
func TestBusyAcquireServerCommands(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	k := uniqueKey(t)
	if n := runAcquire(t, rdb, lease.AcquireSrc, k, "holder", 10000, 0); n != 0 {
		t.Fatalf("holder's acquire answered %d, want a grant (0)", n)
	}
	// The first waiter makes the queue: its expiry is set (GT does not
	// set one on a key without), and the queue lives as long as the entry.
	if n := runAcquire(t, rdb, lease.AcquireSrc, k, "w1", 10000, 5000); n >= -3 {
		t.Fatalf("first waiter's acquire answered %d, want busy (< -3)", n)
	}
	qs := acquireKeys(k)[2:]
	for _, q := range qs {
		if d := rdb.PTTL(ctx, q).Val(); d <= 4*time.Second || d > 5*time.Second {
			t.Fatalf("%s expires in %v after a waiter with a 5s entry joined a new queue, want about 5s", q, d)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A second waiter with a longer entry: the queue's expiry grows to it.
	if n := runAcquire(t, rdb, lease.AcquireSrc, k, "w2", 10000, 8000); n >= -3 {
		t.Fatalf("second waiter's acquire answered %d, want busy", n)
	}
	got := serverCalls(t, rdb)
	delete(got, "config|resetstat")
	want := map[string]int64{"evalsha": 1, "set": 1, "pttl": 1, "time": 1, "zadd": 1, "publish": 1, "hset": 1, "pexpire": 2}
	var total int64
	for _, v := range got {
		total += v
	}
	if total != 9 {
		t.Errorf("a busy acquire that joins a queue ran %d server commands, want 9: %v", total, got)
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s ran %d times, want %d (all: %v)", name, got[name], n, got)
		}
	}
	for _, q := range qs {
		if d := rdb.PTTL(ctx, q).Val(); d <= 7*time.Second || d > 8*time.Second {
			t.Errorf("%s expires in %v after a waiter with an 8s entry joined, want about 8s", q, d)
		}
	}
	// A third with a shorter entry does not shorten it.
	runAcquire(t, rdb, lease.AcquireSrc, k, "w3", 10000, 1000)
	for _, q := range qs {
		if d := rdb.PTTL(ctx, q).Val(); d <= 7*time.Second {
			t.Errorf("%s expires in %v after a waiter with a 1s entry joined, want the 8s entry's expiry kept", q, d)
		}
	}
}

// Before Redis 7.0, SET takes NX or GET but not both, and PEXPIRE has no
// GT: the acquire script then reads and writes as two commands. No older
// server runs here, so the script runs under a stand-in for one: a local
// redis table (adv52Shim) whose pcall answers those forms with the syntax error an
// old server gives. Every outcome must be the one the script gives on
// this server: a grant, a replay's own grant, a busy answer with the
// time left, the queue's entries and expiries.
func TestAcquireScriptBeforeRedis7(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, v := range []struct{ name, src string }{{"7.0", lease.AcquireSrc}, {"before 7.0", adv52Shim + lease.AcquireSrc}} {
		t.Run(v.name, func(t *testing.T) {
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			k := uniqueKey(t)
			if n := runAcquire(t, rdb, v.src, k, "holder", 10000, 0); n != 0 {
				t.Fatalf("free key: %d, want a grant (0)", n)
			}
			if n := runAcquire(t, rdb, v.src, k, "holder", 10000, 0); n != 0 {
				t.Fatalf("the holder's replay: %d, want its grant (0)", n)
			}
			n := runAcquire(t, rdb, v.src, k, "w1", 10000, 5000)
			if left := time.Duration(-3-n) * time.Millisecond; left <= 9*time.Second || left > 10*time.Second {
				t.Fatalf("held key: %d (%v left), want busy with about 10s left", n, left)
			}
			runAcquire(t, rdb, v.src, k, "w2", 10000, 8000)
			runAcquire(t, rdb, v.src, k, "w3", 10000, 1000)
			// Each form ran. Counted before this test's own reads: with the
			// stand-in, the script read the key (GET) after each held key's
			// SET NX (the replay and three busy answers), and read both
			// expiries (PTTL) before setting them, besides each busy
			// answer's PTTL of the key; on this server it reads no key, and
			// reads an expiry only where GT did not lengthen it (w1's new
			// queue, w3's shorter entry).
			calls := serverCalls(t, rdb)
			want := map[string]int64{"get": 0, "pttl": 3 + 2 + 2}
			if v.src != lease.AcquireSrc {
				want = map[string]int64{"get": 4, "pttl": 3 + 6}
			}
			for name, n := range want {
				if calls[name] != n {
					t.Errorf("%s ran %d times, want %d (all: %v)", name, calls[name], n, calls)
				}
			}
			q := acquireKeys(k)
			if m := rdb.ZRange(ctx, q[2], 0, -1).Val(); strings.Join(m, ",") != "w1|10000|0|100|inbox,w2|10000|0|100|inbox,w3|10000|0|100|inbox" {
				t.Errorf("queue %v, want w1, w2, w3 in order", m)
			}
			if e := rdb.HLen(ctx, q[3]).Val(); e != 3 {
				t.Errorf("%d queue expiries, want 3", e)
			}
			for _, k := range q[2:] {
				if d := rdb.PTTL(ctx, k).Val(); d <= 7*time.Second || d > 8*time.Second {
					t.Errorf("%s expires in %v, want about 8s (the longest entry's)", k, d)
				}
			}
			if got := rdb.Get(ctx, q[0]).Val(); got != "holder:0" {
				t.Errorf("key holds %q, want the holder's grant", got)
			}
		})
	}
}

// At maxmemory a script's first write that may grow memory is refused,
// and ZADD is one even for a member already in the queue. A waiter that
// is queued must keep its place there: its re-check (a timer, or its
// subscription coming up) finds the key still held and answers busy, its
// entry refreshed (lifetime and sequence number), so that the release's
// message names its last acquire. A new waiter, or one whose entry has
// expired, is refused as before (TestAdversary40_WaiterAtMaxmemory): its
// entry would grow memory. CI saw the refusal end a queued waiter's wait
// (TestAdversary39_OOMRelease, its subscription coming up after the
// server reached maxmemory).
func TestAcquireQueuedWaiterAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	for _, v := range []struct{ name, src string }{{"7.0", lease.AcquireSrc}, {"before 7.0", adv52Shim + lease.AcquireSrc}} {
		t.Run(v.name, func(t *testing.T) {
			k := uniqueKey(t)
			q := acquireKeys(k)
			run := func(id string, life, seq int) (int64, error) {
				member := fmt.Sprintf("%s|10000|0|100|inbox", id)
				return redis.NewScript(v.src).Run(ctx, rdb, q, id, 10000, "0", 60000, life, member, "{"+k+"}:ch", seq).Int64()
			}
			if n, err := run("holder", 0, 1); n != 0 || err != nil {
				t.Fatalf("holder: %d, %v; want a grant", n, err)
			}
			if n, err := run("w1", 3000, 1); n >= -3 || err != nil {
				t.Fatalf("w1 joins: %d, %v; want busy", n, err)
			}
			oom(true)
			defer oom(false)
			n, err := run("w1", 5000, 2)
			if left := time.Duration(-3-n) * time.Millisecond; err != nil || left <= 9*time.Second {
				t.Fatalf("w1 re-checks at maxmemory: %d, %v; want busy with about 10s left", n, err)
			}
			e := rdb.HGet(ctx, q[3], "w1|10000|0|100|inbox").Val()
			if !strings.HasSuffix(e, ":2") {
				t.Errorf("w1's entry after its re-check at maxmemory: %q, want it refreshed by acquire 2", e)
			}
			for _, k := range q[2:] {
				if d := rdb.PTTL(ctx, k).Val(); d <= 4*time.Second || d > 5*time.Second {
					t.Errorf("%s expires in %v after w1's 5s re-check at maxmemory, want about 5s", k, d)
				}
			}
			if _, err := run("w2", 5000, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Errorf("a new waiter at maxmemory: %v, want refused (OOM)", err)
			}
			// w1's entry expired, its member still queued (no release has
			// passed it over): it is kept, as below maxmemory.
			oom(false)
			rdb.HSet(ctx, q[3], "w1|10000|0|100|inbox", "1:2")
			oom(true)
			if n, err := run("w1", 5000, 3); n >= -3 || err != nil {
				t.Errorf("a waiter whose entry expired, still queued, at maxmemory: %d, %v; want busy", n, err)
			}
			if e := rdb.HGet(ctx, q[3], "w1|10000|0|100|inbox").Val(); !strings.HasSuffix(e, ":3") {
				t.Errorf("w1's entry after its re-check: %q, want it refreshed by acquire 3", e)
			}
			// w3's entry is there, its member is not (a release passed it
			// over): refused, its ZADD undone.
			oom(false)
			rdb.HSet(ctx, q[3], "w3|10000|0|100|inbox", "99999999999999:1")
			oom(true)
			if _, err := run("w3", 5000, 2); err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Errorf("a waiter no longer queued, at maxmemory: %v, want refused (OOM)", err)
			}
			if m := rdb.ZRange(ctx, q[2], 0, -1).Val(); strings.Join(m, ",") != "w1|10000|0|100|inbox" {
				t.Errorf("queue %v, want w1 alone", m)
			}
			if got := rdb.Get(ctx, q[0]).Val(); got != "holder:0" {
				t.Errorf("key holds %q, want the holder's grant", got)
			}
			// The key freed without a handover (a hold-min ended, the
			// holder's lease ran out): the queued w1 is granted it, taken
			// out of the queue; a caller not queued is refused.
			oom(false)
			rdb.Del(ctx, q[0])
			oom(true)
			if _, err := run("w2", 5000, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Errorf("a caller not queued, free key at maxmemory: %v, want refused (OOM)", err)
			}
			if n, err := run("w1", 5000, 4); n != 0 || err != nil {
				t.Errorf("queued w1, free key at maxmemory: %d, %v; want a grant", n, err)
			}
			if got := rdb.Get(ctx, q[0]).Val(); got != "w1:0" {
				t.Errorf("key holds %q, want w1's grant", got)
			}
			if rdb.Exists(ctx, q[2]).Val() != 0 || rdb.HExists(ctx, q[3], "w1|10000|0|100|inbox").Val() {
				t.Errorf("queue and expiries after w1's grant: %v, %v", rdb.ZRange(ctx, q[2], 0, -1).Val(), rdb.HGetAll(ctx, q[3]).Val())
			}
		})
	}
}
