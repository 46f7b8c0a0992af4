package fence_test

// Adversarial tests, round 73: the Redis fenced write's identities
// (_fence_writes) against late copies, NOSCRIPT, concurrency, huge
// writes, older records, ACL users and Cluster.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
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

// adv73Cmdstat returns the calls= count of one command in INFO
// commandstats ("evalsha", "eval").
func adv73Cmdstat(t *testing.T, rdb redis.Cmdable, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
			f, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			v, _ := strconv.Atoi(f)
			return v
		}
	}
	return 0
}

// adv73WaitCmdstat waits (2s at most) until cmd's calls reach want.
func adv73WaitCmdstat(t *testing.T, rdb redis.Cmdable, cmd string, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for adv73Cmdstat(t, rdb, cmd) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s calls %d, never reached %d", cmd, adv73Cmdstat(t, rdb, cmd), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var adv73IDRe = regexp.MustCompile(`^[0-9a-f]{16}$`)

// adv73List returns the identities kept in the record, checking their form
// and that none repeats.
func adv73List(t *testing.T, rdb redis.Cmdable, key string) []string {
	t.Helper()
	l := strings.Fields(rdb.HGet(context.Background(), key, fence.WritesField).Val())
	seen := map[string]bool{}
	for _, id := range l {
		if !adv73IDRe.MatchString(id) {
			t.Fatalf("%s: identity %q is not 16 hex digits (list %v)", key, id, l)
		}
		if seen[id] {
			t.Fatalf("%s: identity %s kept twice (list %v)", key, id, l)
		}
		seen[id] = true
	}
	return l
}

// adv73ProxyClient is a client through the hold proxy that gives up on a
// reply after 300ms and re-sends on a new connection.
func adv73ProxyClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 300 * time.Millisecond, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// A holder's write v1 is held in the network; go-redis re-sends it and it
// is carried out. Then 15 later writes under the same stamp, alternately
// from this Client and from another Client (another process of the
// holder), fill the 16-write window exactly (v1's identity is the oldest
// kept). The held first send of v1 then reaches Redis: it must change
// nothing (claim a, at the window's edge, with writes from several
// Clients in between).
func TestAdversary73_RedisLateCopyAtWindowEdgeAcrossClients(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := adv72aStartHoldProxy(t, srv.Addr())
	store := fence.NewRedis(adv73ProxyClient(t, px.Addr()))
	other := fence.NewRedis(srv.Client(t))
	ctx := context.Background()
	s := stamp(7, "holder")
	key := "rec:{a}"
	if err := store.HSet(ctx, s, key, "warm", "1"); err != nil {
		t.Fatal(err)
	}
	before := adv73Cmdstat(t, direct, "evalsha")
	px.Arm()
	if err := store.HSet(ctx, s, key, "value", "v1", "extra", "e1"); err != nil {
		t.Fatalf("first write, re-sent after its first send was held: %v", err)
	}
	select {
	case <-px.held:
	default:
		t.Fatal("the proxy held nothing")
	}
	for i := 2; i <= 16; i++ {
		w := store
		if i%2 == 0 {
			w = other
		}
		if err := w.HSet(ctx, s, key, "value", fmt.Sprint("v", i), "extra", fmt.Sprint("e", i), fmt.Sprint("f", i), "x"); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if l := adv73List(t, direct, key); len(l) != 16 {
		t.Fatalf("before the late copy: %d identities kept, want 16: %v", len(l), l)
	}
	px.Release()
	<-px.fwd
	// 1 re-send of v1 + 15 later writes (7 of them through this server's
	// other client, all EVALSHA) + the late copy.
	adv73WaitCmdstat(t, direct, "evalsha", before+17)
	h := direct.HGetAll(ctx, key).Val()
	if h["value"] != "v16" || h["extra"] != "e16" {
		t.Fatalf("the late first send of v1, arriving 15 writes later (within the window), changed the record: value %q extra %q (want v16/e16)", h["value"], h["extra"])
	}
	if l := adv73List(t, direct, key); len(l) != 16 {
		t.Fatalf("after the late copy: %d identities kept, want 16", len(l))
	}
}

// adv73ArmOnEval arms the hold proxy when the next EVAL (the NOSCRIPT
// fallback) is processed, so that its first send is the one held.
type adv73ArmOnEval struct {
	px *adv72aHoldProxy
	on atomic.Bool
}

func (h *adv73ArmOnEval) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv73ArmOnEval) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "eval" && h.on.CompareAndSwap(true, false) {
			h.px.Arm()
		}
		return next(ctx, cmd)
	}
}
func (h *adv73ArmOnEval) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// After SCRIPT FLUSH, a write answers NOSCRIPT and falls back to EVAL;
// the EVAL's first send is held, go-redis re-sends the EVAL, which is
// carried out; a later write of the holder (EVALSHA, the script now
// cached) sets v2; the held EVAL then arrives. It carries the same
// identity and must write nothing (claims a and NOSCRIPT).
func TestAdversary73_RedisLateCopyOfEvalFallback(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := adv72aStartHoldProxy(t, srv.Addr())
	rdb := adv73ProxyClient(t, px.Addr())
	hook := &adv73ArmOnEval{px: px}
	rdb.AddHook(hook)
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	s := stamp(11, "h")
	if err := store.Set(ctx, s, "rec", "v0"); err != nil {
		t.Fatal(err)
	}
	direct.ScriptFlush(ctx)
	evals := adv73Cmdstat(t, direct, "eval")
	hook.on.Store(true)
	if err := store.Set(ctx, s, "rec", "v1"); err != nil {
		t.Fatalf("write after SCRIPT FLUSH, its EVAL re-sent: %v", err)
	}
	select {
	case <-px.held:
	default:
		t.Fatal("the proxy held nothing")
	}
	if err := store.Set(ctx, s, "rec", "v2"); err != nil {
		t.Fatal(err)
	}
	px.Release()
	<-px.fwd
	adv73WaitCmdstat(t, direct, "eval", evals+2) // the re-send and the late copy
	if v := direct.HGet(ctx, "rec", "value").Val(); v != "v2" {
		t.Fatalf("the late first send of the EVAL fallback undid the later write: record %q, want v2", v)
	}
	if l := adv73List(t, direct, "rec"); len(l) != 3 {
		t.Fatalf("%d identities kept, want 3 (v0, v1, v2): %v", len(l), l)
	}
}

// SCRIPT FLUSH before each of 20 writes: each is carried out once (one
// EVAL per write, never a second), every field lands, and the list holds
// the last 16 distinct identities. A stale write after a flush is still
// refused.
func TestAdversary73_RedisNoScriptEachWrite(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	store := fence.NewRedis(srv.Client(t))
	ctx := context.Background()
	s := stamp(50, "h")
	evals := adv73Cmdstat(t, direct, "eval")
	for i := 0; i < 20; i++ {
		direct.ScriptFlush(ctx)
		if err := store.HSet(ctx, s, "rec", "n", fmt.Sprint(i), fmt.Sprint("w", i), "1"); err != nil {
			t.Fatalf("write %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	if n := adv73Cmdstat(t, direct, "eval") - evals; n != 20 {
		t.Fatalf("%d EVALs for 20 writes each after SCRIPT FLUSH", n)
	}
	h := direct.HGetAll(ctx, "rec").Val()
	for i := 0; i < 20; i++ {
		if h[fmt.Sprint("w", i)] != "1" {
			t.Fatalf("write %d's field missing: %v", i, h)
		}
	}
	if h["n"] != "19" {
		t.Fatalf("n = %q, want 19", h["n"])
	}
	if l := adv73List(t, direct, "rec"); len(l) != 16 {
		t.Fatalf("%d identities kept, want 16", len(l))
	}
	direct.ScriptFlush(ctx)
	if err := store.Set(ctx, stamp(49, "h"), "rec", "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write after SCRIPT FLUSH = %v", err)
	}
	if err := store.Set(ctx, stamp(50, "x"), "rec", "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("same token, another owner, after SCRIPT FLUSH = %v", err)
	}
}

// Three Clients (separate pools, as separate processes of one holder),
// six goroutines each, 15 writes per goroutine, all under one stamp and
// each to a field of its own: every write returns nil and lands (none is
// taken for a copy of another), and the list stays 16 distinct identities.
func TestAdversary73_RedisConcurrentWritersOneStamp(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	ctx := context.Background()
	s := stamp(1<<60+3, "holder")
	var wg sync.WaitGroup
	var failed atomic.Int32
	for c := 0; c < 3; c++ {
		store := fence.NewRedis(srv.Client(t, func(o *redis.Options) { o.PoolSize = 4 }))
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					if err := store.HSet(ctx, s, "rec", fmt.Sprintf("c%d.g%d.i%d", c, g, i), "1", "last", fmt.Sprint(c, g, i)); err != nil {
						t.Errorf("client %d goroutine %d write %d: %v", c, g, i, err)
						failed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	h := direct.HGetAll(ctx, "rec").Val()
	missing := 0
	for c := 0; c < 3; c++ {
		for g := 0; g < 6; g++ {
			for i := 0; i < 15; i++ {
				if h[fmt.Sprintf("c%d.g%d.i%d", c, g, i)] != "1" {
					missing++
				}
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of 270 writes returned nil but did not land", missing)
	}
	if l := adv73List(t, direct, "rec"); len(l) != 16 {
		t.Fatalf("%d identities kept after 270 writes, want 16", len(l))
	}
	if h[fence.TokenField] != strconv.FormatUint(uint64(s.Token), 10) || h[fence.OwnerField] != "holder" {
		t.Fatalf("stamp %s/%s", h[fence.TokenField], h[fence.OwnerField])
	}
}

// Under real leases: the first holder fills the list; a newer holder's
// write starts it afresh (one identity); the first holder's late write is
// ErrStale, reported exactly once, and leaves the record and the list
// byte for byte unchanged; the newer holder's next write appends.
func TestAdversary73_RedisStaleLeavesListUntouched(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	store := fence.NewRedis(srv.Client(t))
	obs := &leasetest.Recorder{}
	c1, err := lease.New(leasetest.StartRedis(t).Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	ctx := context.Background()
	spec := lease.Spec{TTL: 2 * time.Second, Deadline: 3 * time.Second, Fence: true}
	var old, newer fence.Stamp
	if err := c1.Do(ctx, "k", spec, func(ctx context.Context) error {
		old, _ = fence.From(ctx)
		for i := 0; i < 20; i++ {
			if err := store.Set(ctx, old, "rec", fmt.Sprint("old", i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if l := adv73List(t, direct, "rec"); len(l) != 16 {
		t.Fatalf("%d identities, want 16", len(l))
	}
	if err := c1.Do(ctx, "k", spec, func(ctx context.Context) error {
		newer, _ = fence.From(ctx)
		return store.Set(ctx, newer, "rec", "new")
	}); err != nil || newer.Token <= old.Token {
		t.Fatalf("newer holder %d (old %d): %v", newer.Token, old.Token, err)
	}
	l := adv73List(t, direct, "rec")
	if len(l) != 1 {
		t.Fatalf("a newer stamp did not start the list afresh: %v", l)
	}
	snap := direct.HGetAll(ctx, "rec").Val()
	n0 := obs.Count(lease.EventStaleWriteRejected)
	if err := store.Set(ctx, old, "rec", "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("old holder's late write = %v", err)
	}
	if n := obs.Count(lease.EventStaleWriteRejected) - n0; n != 1 {
		t.Fatalf("stale write reported %d times", n)
	}
	if after := direct.HGetAll(ctx, "rec").Val(); fmt.Sprint(after) != fmt.Sprint(snap) {
		t.Fatalf("a refused write changed the record:\nbefore %v\nafter  %v", snap, after)
	}
	if err := store.Set(ctx, stamp(newer.Token, "intruder"), "rec", "x"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("same token, other owner = %v", err)
	}
	if err := store.Set(ctx, newer, "rec", "new2"); err != nil {
		t.Fatal(err)
	}
	if l2 := adv73List(t, direct, "rec"); len(l2) != 2 || l2[0] != l[0] {
		t.Fatalf("after the newer holder's second write: %v (before %v)", l2, l)
	}
}

// A write whose first send is held in the network; meanwhile a newer
// stamp is written; go-redis's re-send is refused: the result must be
// ErrUnknown (an earlier send may run), not ErrStale, and not reported.
// The held send then arrives and is refused too: the record keeps the
// newer stamp. A plain late write afterwards is ErrStale, reported once.
func TestAdversary73_RedisResendRefusedIsUnknown(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := adv72aStartHoldProxy(t, srv.Addr())
	store := fence.NewRedis(adv73ProxyClient(t, px.Addr()))
	obs := &leasetest.Recorder{}
	c1, err := lease.New(leasetest.StartRedis(t).Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	ctx := context.Background()
	spec := lease.Spec{TTL: 3 * time.Second, Deadline: 4 * time.Second, Fence: true}
	var st fence.Stamp
	err = c1.Do(ctx, "k", spec, func(ctx context.Context) error {
		st, _ = fence.From(ctx)
		if err := store.Set(ctx, st, "rec", "v0"); err != nil {
			return err
		}
		evs := adv73Cmdstat(t, direct, "evalsha")
		px.Arm()
		done := make(chan error, 1)
		go func() { done <- store.Set(ctx, st, "rec", "v1") }()
		<-px.held
		if err := fence.NewRedis(direct).Set(ctx, stamp(st.Token+1, "newer"), "rec", "newer"); err != nil {
			return err
		}
		werr := <-done
		t.Logf("re-sent write refused by the newer stamp: %v", werr)
		if !errors.Is(werr, lease.ErrUnknown) || errors.Is(werr, fence.ErrStale) {
			t.Errorf("re-sent write whose last send was refused = %v, want ErrUnknown", werr)
		}
		if n := obs.Count(lease.EventStaleWriteRejected); n != 0 {
			t.Errorf("an unknown outcome was reported as a stale write (%d)", n)
		}
		px.Release()
		<-px.fwd
		adv73WaitCmdstat(t, direct, "evalsha", evs+3) // the re-send, the newer write, the late copy
		if v := direct.HGet(ctx, "rec", "value").Val(); v != "newer" {
			t.Errorf("record %q after the late first send, want newer", v)
		}
		n0 := obs.Count(lease.EventStaleWriteRejected)
		if err := store.Set(ctx, st, "rec", "late"); !errors.Is(err, fence.ErrStale) {
			t.Errorf("plain late write = %v", err)
		}
		if n := obs.Count(lease.EventStaleWriteRejected) - n0; n != 1 {
			t.Errorf("plain late write reported %d times", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A huge write (4000 pairs, several TCP segments) whose first send is held
// and re-sent; a later small write changes one of its fields; the held
// huge copy then arrives and must change nothing. A huge write naming
// WritesField deep inside is refused and writes nothing.
func TestAdversary73_RedisHugeLateCopy(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := adv72aStartHoldProxy(t, srv.Addr())
	store := fence.NewRedis(adv73ProxyClient(t, px.Addr()))
	ctx := context.Background()
	s := stamp(3, "h")
	if err := store.Set(ctx, s, "rec", "warm"); err != nil {
		t.Fatal(err)
	}
	big := make([]string, 0, 8000)
	for i := 0; i < 4000; i++ {
		big = append(big, fmt.Sprint("f", i), strings.Repeat("a", 20)+fmt.Sprint(i))
	}
	evs := adv73Cmdstat(t, direct, "evalsha")
	px.Arm()
	if err := store.HSet(ctx, s, "rec", big...); err != nil {
		t.Fatalf("huge write, re-sent: %v", err)
	}
	<-px.held
	if err := store.HSet(ctx, s, "rec", "f0", "later", "f3999", "later"); err != nil {
		t.Fatal(err)
	}
	px.Release()
	<-px.fwd
	adv73WaitCmdstat(t, direct, "evalsha", evs+3)
	h := direct.HGetAll(ctx, "rec").Val()
	if h["f0"] != "later" || h["f3999"] != "later" {
		t.Fatalf("the huge write's late copy undid the later write: f0 %q f3999 %q", h["f0"], h["f3999"])
	}
	if len(h) != 4000+1+3 {
		t.Fatalf("%d fields, want 4004", len(h))
	}
	bad := append(append([]string(nil), big[:6000]...), fence.WritesField, " forged ")
	bad = append(bad, big[6000:]...)
	bad[1] = "should-not-land"
	if err := fence.NewRedis(direct).HSet(ctx, s, "rec", bad...); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("huge write naming %s = %v", fence.WritesField, err)
	}
	if v := direct.HGet(ctx, "rec", "f0").Val(); v != "later" || strings.Contains(direct.HGet(ctx, "rec", fence.WritesField).Val(), "forged") {
		t.Fatalf("a refused huge write changed the record: f0 %q", v)
	}
}

// adv73OldScript is the script before identities (ab8d24c^): a service
// still running the previous version during a rolling upgrade.
const adv73OldScript = `local function digits(s)
  if not string.find(s, '^%d+$') then return nil end
  s = string.gsub(s, '^0+', '')
  return s
end
local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y and -1 or 1 end
  end
  return 0
end
local t = digits(ARGV[1])
if not t then
  return redis.error_reply('ERR fence: the token is not a decimal integer')
end
local cur = redis.call('HMGET', KEYS[1], '_fence_token', '_fence_owner')
if cur[1] then
  local c = digits(cur[1])
  if not c then
    return redis.error_reply('ERR fence: the record\'s stored token is not a decimal integer')
  end
  local d = cmp(t, c)
  if d < 0 or (d == 0 and cur[2] ~= ARGV[2]) then
    return {0, cur[1], cur[2] or ''}
  end
end
for i = 3, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], '_fence_token', ARGV[1], '_fence_owner', ARGV[2])
return {1}`

// The previous version and this one write the same records in turn (a
// rolling upgrade): a record the old one wrote is taken up; the old one's
// writes under the same stamp and under a newer stamp keep working; the
// new one is then refused for the older stamp and accepted for the newer.
func TestAdversary73_RedisMixedVersions(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	store := fence.NewRedis(srv.Client(t))
	old := redis.NewScript(adv73OldScript)
	ctx := context.Background()
	oldSet := func(tok, owner, v string) []any {
		t.Helper()
		res, err := old.Run(ctx, direct, []string{"rec"}, tok, owner, "value", v).Slice()
		if err != nil {
			t.Fatalf("old script: %v", err)
		}
		return res
	}
	oldSet("5", "a", "o1")
	if err := store.Set(ctx, stamp(5, "a"), "rec", "n1"); err != nil {
		t.Fatal(err)
	}
	if res := oldSet("5", "a", "o2"); len(res) != 1 {
		t.Fatalf("old version, same stamp, on a record with identities: %v", res)
	}
	if err := store.Set(ctx, stamp(5, "a"), "rec", "n2"); err != nil {
		t.Fatal(err)
	}
	if v := direct.HGet(ctx, "rec", "value").Val(); v != "n2" {
		t.Fatalf("record %q, want n2", v)
	}
	if res := oldSet("4", "z", "stale"); len(res) != 3 {
		t.Fatalf("old version, older token: %v", res)
	}
	if res := oldSet("6", "b", "o3"); len(res) != 1 {
		t.Fatalf("old version, newer stamp: %v", res)
	}
	if err := store.Set(ctx, stamp(5, "a"), "rec", "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("new version, older stamp after the old version's newer one = %v", err)
	}
	if err := store.Set(ctx, stamp(6, "b"), "rec", "n3"); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, stamp(6, "c"), "rec", "x"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("same token other owner = %v", err)
	}
	h := direct.HGetAll(ctx, "rec").Val()
	if h["value"] != "n3" || h[fence.TokenField] != "6" || h[fence.OwnerField] != "b" {
		t.Fatalf("record %v", h)
	}
}

// adv73ACLWrites runs, for a user with only the recipe's commands, writes
// through EVAL after SCRIPT FLUSH, through EVALSHA, a huge write, a
// refused stale write and a newer stamp, on three keys.
func adv73ACLWrites(t *testing.T, name string, x redis.UniversalClient, flush func()) {
	t.Helper()
	ctx := context.Background()
	store := fence.NewRedis(x)
	big := make([]string, 0, 3000)
	for i := 0; i < 1500; i++ {
		big = append(big, fmt.Sprint("f", i), "x")
	}
	for k := 0; k < 3; k++ {
		key := fmt.Sprintf("rec:%d", k)
		flush()
		if err := store.Set(ctx, stamp(10, "a"), key, "v1"); err != nil {
			t.Fatalf("%s %s: write through EVAL: %v", name, key, err)
		}
		if err := store.Set(ctx, stamp(10, "a"), key, "v2"); err != nil {
			t.Fatalf("%s %s: write through EVALSHA: %v", name, key, err)
		}
		if err := store.HSet(ctx, stamp(10, "a"), key, big...); err != nil {
			t.Fatalf("%s %s: huge write: %v", name, key, err)
		}
		if err := store.Set(ctx, stamp(9, "b"), key, "stale"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s %s: stale write = %v", name, key, err)
		}
		if err := store.Set(ctx, stamp(11, "b"), key, "v3"); err != nil {
			t.Fatalf("%s %s: newer stamp: %v", name, key, err)
		}
	}
}

// A user with only +evalsha +eval +hmget +hset on the records' keys (the
// README's recipe): EVAL after SCRIPT FLUSH, EVALSHA, a huge write, a
// refused stale write, and a lost reply whose re-send is taken for a copy.
func TestAdversary73_RedisACLUserRecipe(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	srv.ACLUser(t, "fencer", "pw", "~rec:*", "+evalsha", "+eval", "+hmget", "+hset")
	px := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), Username: "fencer", Password: "pw", ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	adv73ACLWrites(t, "single", rdb, func() { direct.ScriptFlush(ctx) })
	cut := px.Cut()
	px.Set(leasetest.CutNextReply)
	if err := fence.NewRedis(rdb).Set(ctx, stamp(11, "b"), "rec:0", "v4"); err != nil {
		t.Fatalf("ACL user, lost reply re-sent: %v", err)
	}
	if px.Cut() != cut+1 {
		t.Fatalf("proxy cut %d replies", px.Cut()-cut)
	}
	if v := direct.HGet(ctx, "rec:0", "value").Val(); v != "v4" {
		t.Fatalf("record %q", v)
	}
	if l := adv73List(t, direct, "rec:0"); len(l) != 2 {
		t.Fatalf("%d identities after a re-sent write under stamp 11 (want 2: v3, v4)", len(l))
	}
}

// The same user on a Cluster (with the slot map and command table that
// go-redis needs).
func TestAdversary73_RedisACLUserRecipeCluster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	crdb := cl.ACLUser(t, "fencer", "pw", "~rec:*", "+evalsha", "+eval", "+hmget", "+hset", "+cluster|slots", "+command", "+asking")
	ctx := context.Background()
	adv73ACLWrites(t, "cluster", crdb, func() {
		for _, n := range cl.Nodes {
			n.Client(t).ScriptFlush(ctx)
		}
	})
}

// On a Cluster, the key's master is reached through the hold proxy: a
// write's first send is held, go-redis (its node client) re-sends it, a
// later write of the holder lands, and the held copy then arrives: it
// must change nothing. Writes to keys on every master keep a list each.
func TestAdversary73_RedisClusterLateCopy(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	key := "rec:{c}"
	slot := leasetest.Slot(key)
	var target *leasetest.Server
	for _, n := range cl.Nodes {
		var ok bool
		slots, err := n.Client(t).ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 && s.Nodes[0].Addr == n.Addr() {
				ok = true
			}
		}
		if ok {
			target = n
		}
	}
	if target == nil {
		t.Fatalf("no master found for slot %d", slot)
	}
	direct := target.Client(t)
	px := adv72aStartHoldProxy(t, target.Addr())
	crdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{cl.Nodes[0].Addr()},
		ContextTimeoutEnabled: true,
		ReadTimeout:           300 * time.Millisecond,
		MaxRetries:            3,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == target.Addr() {
				addr = px.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { crdb.Close() })
	store := fence.NewRedis(crdb)
	s := stamp(21, "h")
	if err := store.Set(ctx, s, key, "v0"); err != nil {
		t.Fatal(err)
	}
	evs := adv73Cmdstat(t, direct, "evalsha")
	px.Arm()
	if err := store.Set(ctx, s, key, "v1"); err != nil {
		t.Fatalf("cluster write, re-sent: %v", err)
	}
	select {
	case <-px.held:
	default:
		t.Fatal("the proxy held nothing")
	}
	if err := store.Set(ctx, s, key, "v2"); err != nil {
		t.Fatal(err)
	}
	px.Release()
	<-px.fwd
	adv73WaitCmdstat(t, direct, "evalsha", evs+3)
	if v := direct.HGet(ctx, key, "value").Val(); v != "v2" {
		t.Fatalf("cluster: the late first send undid the later write: %q, want v2", v)
	}
	// Keys on every master, written concurrently.
	var wg sync.WaitGroup
	for k := 0; k < 6; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 17; i++ {
				if err := store.HSet(ctx, s, fmt.Sprintf("rec:%d", k), fmt.Sprint("f", i), "1"); err != nil {
					t.Errorf("key %d write %d: %v", k, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for k := 0; k < 6; k++ {
		h := crdb.HGetAll(ctx, fmt.Sprintf("rec:%d", k)).Val()
		if len(h) != 20 || len(strings.Fields(h[fence.WritesField])) != 16 {
			t.Fatalf("key %d: %d fields, list %q", k, len(h), h[fence.WritesField])
		}
	}
}
