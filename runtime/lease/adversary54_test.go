package lease_test

// Round 54: adversary of commit 03ea85e (acquire.lua at maxmemory: a
// queued waiter's place checked by HGET then ZADD NX after a PEXPIRE; a
// key freed without a handover granted to a queued waiter after the ZREM
// of its entry, a write that frees memory).

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

// adv54Run runs the acquire script src for identity id on keys (lock,
// counter, queue, expiries): TTL 10s, fenced or not, queue entry lifetime
// life ms, attempt seq. The member is "id|10000|fence|100|inbox".
func adv54Run(rdb *redis.Client, src string, keys []string, ch, id string, fence bool, life, seq int) (int64, error) {
	f := "0"
	if fence {
		f = "1"
	}
	member := id + "|10000|" + f + "|100|inbox"
	return redis.NewScript(src).Run(context.Background(), rdb, keys, id, 10000, f, 60000, life, member, ch, seq).Int64()
}

// adv54State describes a key's type, value and whether it expires.
func adv54State(rdb *redis.Client, key string) string {
	ctx := context.Background()
	typ := rdb.Type(ctx, key).Val()
	var v any
	switch typ {
	case "string":
		v = rdb.Get(ctx, key).Val()
	case "hash":
		v = rdb.HGetAll(ctx, key).Val()
	case "zset":
		v = rdb.ZRange(ctx, key, 0, -1).Val()
	}
	return fmt.Sprintf("%s %v ttl=%v", typ, v, rdb.PTTL(ctx, key).Val() >= 0)
}

// TestAdversary54_FreedKeyCounterUnusableAtMaxmemory: path (b) of 03ea85e
// for a fenced queued waiter when the fencing counter cannot give a token
// (a hash set from outside; a counter at 2^63 - 1). The script has SET the
// lock before takeTok fails, and DELs it again. A demanding user expects
// the same as below maxmemory: the caller is told an error, the lock is
// free, the counter is as it was, and no key is left without expiry.
func TestAdversary54_FreedKeyCounterUnusableAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, rdb)
	setups := []struct {
		name string
		set  func(f string)
	}{
		{"hash counter", func(f string) {
			rdb.Del(ctx, f)
			rdb.HSet(ctx, f, "x", "y")
			rdb.PExpire(ctx, f, time.Minute)
		}},
		{"counter at 2^63-1", func(f string) { rdb.Set(ctx, f, "9223372036854775807", time.Minute) }},
	}
	for _, v := range adv53Variants {
		for _, s := range setups {
			t.Run(v.name+"/"+s.name, func(t *testing.T) {
				type outcome struct {
					err                 string
					lock, counter, rest string
				}
				run := func(atMax bool) outcome {
					k := uniqueKey(t)
					keys := acquireKeys(k)
					ch := "{" + k + "}:ch"
					if _, err := adv54Run(rdb, v.src, keys, ch, "holder", true, 0, 1); err != nil {
						t.Fatalf("holder: %v", err)
					}
					if n, err := adv54Run(rdb, v.src, keys, ch, "w1", true, 3000, 1); n >= -3 || err != nil {
						t.Fatalf("w1 joins: %d, %v", n, err)
					}
					s.set(keys[1])
					rdb.Del(ctx, keys[0]) // the holder's lease ran out
					before := adv54State(rdb, keys[1])
					oom(atMax)
					n, err := adv54Run(rdb, v.src, keys, ch, "w1", true, 5000, 2)
					oom(false)
					o := outcome{lock: adv54State(rdb, keys[0]), counter: adv54State(rdb, keys[1]),
						rest: adv54State(rdb, keys[2]) + " / " + adv54State(rdb, keys[3])}
					if err == nil {
						t.Errorf("maxmemory=%v: w1 granted token %d with an unusable counter", atMax, n)
					} else {
						o.err = err.Error()
					}
					if o.counter != before {
						t.Errorf("maxmemory=%v: counter %s, was %s", atMax, o.counter, before)
					}
					if rdb.Exists(ctx, keys[0]).Val() != 0 {
						t.Errorf("maxmemory=%v: lock left: %s", atMax, o.lock)
					}
					for _, key := range keys {
						if rdb.PTTL(ctx, key).Val() == -1 {
							t.Errorf("maxmemory=%v: %s left without expiry: %s", atMax, key, adv54State(rdb, key))
						}
					}
					return o
				}
				below, at := run(false), run(true)
				t.Logf("below maxmemory: %q; queue %s", below.err, below.rest)
				t.Logf("at maxmemory:    %q; queue %s", at.err, at.rest)
				if (below.err == "") != (at.err == "") {
					t.Errorf("outcomes differ: below %q, at %q", below.err, at.err)
				}
			})
		}
	}
}

// TestAdversary54_FreedKeyFencedTokenAboveHolder: a fenced queued waiter
// granted a key freed without a handover at maxmemory (path (b)) must get
// a token above the previous holder's: with the counter set ahead of the
// clock (the holder's token is counter + 1), and with the counter gone
// (expired) after a time token. A replay of the grant (go-redis re-sending
// after a lost reply) answers the same token, the lock expires, and so
// does the counter.
func TestAdversary54_FreedKeyFencedTokenAboveHolder(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, rdb)
	for _, v := range adv53Variants {
		for _, c := range []string{"counter ahead", "counter expired"} {
			t.Run(v.name+"/"+c, func(t *testing.T) {
				k := uniqueKey(t)
				keys := acquireKeys(k)
				ch := "{" + k + "}:ch"
				var ahead uint64
				if c == "counter ahead" {
					ahead = uint64(time.Now().UnixMicro()) + 3_600_000_000
					rdb.Set(ctx, keys[1], strconv.FormatUint(ahead, 10), time.Hour)
				}
				h, err := adv54Run(rdb, v.src, keys, ch, "holder", true, 0, 1)
				if err != nil || h <= 0 {
					t.Fatalf("holder: %d, %v", h, err)
				}
				if ahead != 0 && uint64(h) != ahead+1 {
					t.Fatalf("holder's token %d, want %d", h, ahead+1)
				}
				if n, err := adv54Run(rdb, v.src, keys, ch, "w1", true, 3000, 1); n >= -3 || err != nil {
					t.Fatalf("w1 joins: %d, %v", n, err)
				}
				rdb.Del(ctx, keys[0])
				if c == "counter expired" {
					rdb.Del(ctx, keys[1])
				}
				oom(true)
				defer oom(false)
				w, err := adv54Run(rdb, v.src, keys, ch, "w1", true, 5000, 2)
				if err != nil || w <= h {
					t.Fatalf("w1 at maxmemory on the freed key: %d, %v; want a grant with a token above the holder's %d", w, err, h)
				}
				r, err := adv54Run(rdb, v.src, keys, ch, "w1", true, 5000, 2)
				if err != nil || r != w {
					t.Errorf("replay of w1's grant: %d, %v; want %d", r, err, w)
				}
				if got := rdb.Get(ctx, keys[0]).Val(); got != "w1:"+strconv.FormatInt(w, 10) {
					t.Errorf("lock %q, want w1:%d", got, w)
				}
				if n := rdb.ZCard(ctx, keys[2]).Val(); n != 0 {
					t.Errorf("%d left in the queue after w1's grant", n)
				}
				for _, key := range keys {
					if rdb.PTTL(ctx, key).Val() == -1 {
						t.Errorf("%s left without expiry", key)
					}
				}
				// A later waiter w2 (not queued) at maxmemory is refused
				// while w1 holds, and after w1's lease ends.
				if _, err := adv54Run(rdb, v.src, keys, ch, "w2", true, 5000, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Errorf("new waiter w2 at maxmemory, key held: %v; want OOM", err)
				}
				rdb.Del(ctx, keys[0])
				if _, err := adv54Run(rdb, v.src, keys, ch, "w2", true, 5000, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Errorf("new waiter w2 at maxmemory, key free: %v; want OOM", err)
				}
				if rdb.Exists(ctx, keys[0]).Val() != 0 || rdb.Exists(ctx, keys[2]).Val() != 0 {
					t.Errorf("refused w2 left %s / %s", adv54State(rdb, keys[0]), adv54State(rdb, keys[2]))
				}
			})
		}
	}
}

// TestAdversary54_FreedKeyUnderACLAtMaxmemory: path (b) under the README's
// least-privilege ACL: a queued fenced waiter gets the freed key, its
// replay the same token, and a caller that was not queued is refused
// naming OOM, nothing left.
func TestAdversary54_FreedKeyUnderACLAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	user := aclClient(t, srv, "leases54", leastPrivilege...)
	for _, v := range adv53Variants {
		for _, fence := range []bool{false, true} {
			t.Run(fmt.Sprint(v.name, "/fence=", fence), func(t *testing.T) {
				keys, ch := adv53LeaseKeys(uniqueKey(t))
				run := func(id string, life, seq int) (int64, error) {
					return adv54Run(user, v.src, keys, ch, id, fence, life, seq)
				}
				h, err := run("holder", 0, 1)
				if err != nil {
					t.Fatalf("holder: %v", err)
				}
				if n, err := run("w1", 3000, 1); n >= -3 || err != nil {
					t.Fatalf("w1 joins: %d, %v", n, err)
				}
				admin.Del(ctx, keys[0])
				oom(true)
				defer oom(false)
				w, err := run("w1", 5000, 2)
				if err != nil || w < 0 || fence && w <= h {
					t.Fatalf("queued w1 on the freed key at maxmemory under the README ACL: %d, %v; want a grant (holder's token %d)", w, err, h)
				}
				if r, err := run("w1", 5000, 2); err != nil || r != w {
					t.Errorf("replay: %d, %v; want %d", r, err, w)
				}
				admin.Del(ctx, keys[0])
				if _, err := run("w2", 5000, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Errorf("w2 not queued at maxmemory, key free: %v; want OOM", err)
				}
				if _, err := run("w3", 0, 1); err == nil || !strings.Contains(err.Error(), "OOM") {
					t.Errorf("w3 not waiting at maxmemory, key free: %v; want OOM", err)
				}
				for _, key := range keys {
					if admin.Exists(ctx, key).Val() != 0 && key != keys[1] {
						t.Errorf("left after the refusals: %s %s", key, adv54State(admin, key))
					}
				}
			})
		}
	}
}

// TestAdversary54_RefusedRecheckKeepsQueueExpiry: path (a) for a caller
// with an entry in the expiries but no member in the queue (written from
// outside, or lost): refused naming OOM, as 03ea85e says, with nothing
// changed, the queue's expiry included. 03ea85e lengthened it: its opening
// write, a PEXPIRE of the queue, ran before the ZADD NX told the member
// was not there; the opening write is now one that changes nothing.
func TestAdversary54_RefusedRecheckKeepsQueueExpiry(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, rdb)
	for _, v := range adv53Variants {
		t.Run(v.name, func(t *testing.T) {
			k := uniqueKey(t)
			keys := acquireKeys(k)
			ch := "{" + k + "}:ch"
			if _, err := adv54Run(rdb, v.src, keys, ch, "holder", false, 0, 1); err != nil {
				t.Fatal(err)
			}
			if n, err := adv54Run(rdb, v.src, keys, ch, "w9", false, 1000, 1); n >= -3 || err != nil {
				t.Fatalf("w9 joins: %d, %v", n, err)
			}
			rdb.HSet(ctx, keys[3], "w1|10000|0|100|inbox", strconv.FormatInt(adv53ServerMs(t, rdb)+5000, 10)+":1")
			oom(true)
			_, err := adv54Run(rdb, v.src, keys, ch, "w1", false, 20000, 2)
			oom(false)
			if err == nil || !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("w1 without a member at maxmemory: %v; want OOM", err)
			}
			if d := rdb.PTTL(ctx, keys[2]).Val(); d > 1500*time.Millisecond {
				t.Errorf("queue expires in %v after w1's refused re-check (was ~1s): lengthened by a refused caller", d)
			}
			if m := rdb.ZRange(ctx, keys[2], 0, -1).Val(); len(m) != 1 {
				t.Errorf("queue %v, want w9 alone", m)
			}
		})
	}
}

// adv54Entry records one entry into fn.
type adv54Entry struct {
	who string
	tok lease.Token
}

// TestAdversary54_TwoWaitersRaceFreedKeyAtMaxmemory: a ghost holder's lease
// runs out at maxmemory with two fenced waiters (two Clients, re-checking
// every 50ms) queued before it. Many rounds: each round both must enter
// (one by the freed-key grant, the other by its release's handover), never
// together, with tokens increasing across every round.
func TestAdversary54_TwoWaitersRaceFreedKeyAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	ca, _ := newClient(t, srv.Client(t), lease.WithRecheck(50*time.Millisecond))
	cb, _ := newClient(t, srv.Client(t), lease.WithRecheck(50*time.Millisecond))
	key := uniqueKey(t)
	var (
		inside, maxInside atomic.Int32
		mu                sync.Mutex
		entries           []adv54Entry
	)
	body := func(who string) func(context.Context) error {
		return func(ctx context.Context) error {
			if n := inside.Add(1); n > maxInside.Load() {
				maxInside.Store(n)
			}
			tok, _ := lease.TokenFrom(ctx)
			mu.Lock()
			entries = append(entries, adv54Entry{who, tok})
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			inside.Add(-1)
			return nil
		}
	}
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 8 * time.Second, Wait: 5 * time.Second, Fence: true}
	const rounds = 8
	for r := 0; r < rounds; r++ {
		if err := admin.Set(ctx, lockKey(key), "ghost:1", 300*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		go func() { errs <- ca.Do(ctx, key, s, body(fmt.Sprint("a", r))) }()
		go func() { errs <- cb.Do(ctx, key, s, body(fmt.Sprint("b", r))) }()
		adv53WaitQueued(t, admin, key, 2)
		oom(true)
		for i := 0; i < 2; i++ {
			if err := <-errs; err != nil {
				t.Errorf("round %d: waiter: %v", r, err)
			}
		}
		oom(false)
		if t.Failed() {
			break
		}
	}
	if m := maxInside.Load(); m > 1 {
		t.Errorf("%d bodies ran at once", m)
	}
	if len(entries) != 2*rounds && !t.Failed() {
		t.Errorf("%d entries, want %d", len(entries), 2*rounds)
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].tok <= entries[i-1].tok {
			t.Errorf("tokens not increasing: %v", entries)
			break
		}
	}
	t.Logf("entries %v", entries)
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary54_HoldMinChurnToggledMaxmemory: twelve fenced, waiting
// callers on three Clients loop for 3s, each call ending with a 30ms
// hold-min (a key freed without a handover, taken by path (b) at
// maxmemory), while maxmemory is switched on and off. Only OOM refusals
// are expected; no two bodies overlap; tokens only increase; nothing is
// left without expiry.
func TestAdversary54_HoldMinChurnToggledMaxmemory(t *testing.T) {
	t.Parallel()
	admin, _ := adv53Toggle{callers: 12, recheck: 40 * time.Millisecond, step: 60 * time.Millisecond,
		spec: lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 4 * time.Second, Fence: true, HoldMin: 30 * time.Millisecond},
		hold: 5 * time.Millisecond, toggle: 80 * time.Millisecond, span: 120 * time.Millisecond}.run(t)
	time.Sleep(200 * time.Millisecond)
	adv52NoKeyWithoutExpiry(t, admin)
}

// adv54Hook runs before on every command a client processes.
type adv54Hook struct{ before func(args []any) }

func (h adv54Hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv54Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.before(cmd.Args())
		return next(ctx, cmd)
	}
}
func (h adv54Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAdversary54_FreedKeyGrantReplyCutAtMaxmemory: the reply of the
// freed-key grant (path (b)) is cut (the script ran, the connection
// closes): go-redis re-sends the acquire, which must answer the same grant
// at maxmemory (the key holds the waiter's identity). The waiter enters
// once, with the token the key holds, and no unknown acquire is reported.
func TestAdversary54_FreedKeyGrantReplyCutAtMaxmemory(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprint("fence=", fence), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			ctx := context.Background()
			oom := maxmemoryFull(t, admin)
			p := leasetest.StartProxy(t, srv.Addr())
			key := uniqueKey(t)
			var armed atomic.Bool
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			rdb.AddHook(adv54Hook{before: func(args []any) {
				if len(args) == 0 || !armed.Load() {
					return
				}
				if c := strings.ToLower(fmt.Sprint(args[0])); c != "evalsha" && c != "eval" {
					return
				}
				// The ghost's lease ends now (a DEL, allowed at maxmemory;
				// waiting for its expiry here stalled the waiter past its
				// place's life): this acquire is the freed-key grant, and
				// its reply is cut.
				if armed.CompareAndSwap(true, false) {
					admin.Del(context.Background(), lockKey(key))
					p.Set(leasetest.CutNextReply)
				}
			}})
			wc, rec := newClient(t, rdb, lease.WithRecheck(100*time.Millisecond))
			if err := admin.Set(ctx, lockKey(key), "ghost:1", 5*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			var entered atomic.Int32
			var inTok lease.Token
			var inVal string
			wdone := make(chan error, 1)
			go func() {
				wdone <- wc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second, Fence: fence},
					func(ctx context.Context) error {
						entered.Add(1)
						inTok, _ = lease.TokenFrom(ctx)
						inVal = admin.Get(context.Background(), lockKey(key)).Val()
						return nil
					})
			}()
			adv53WaitQueued(t, admin, key, 1)
			oom(true)
			armed.Store(true)
			var err error
			select {
			case err = <-wdone:
			case <-time.After(8 * time.Second):
				t.Fatal("waiter still waiting 8s on")
			}
			oom(false)
			t.Logf("Do = %v; cut %d; entered %d, token %d, lock value then %q; unknown %d refused %d",
				err, p.Cut(), entered.Load(), inTok, inVal, rec.Count(lease.EventAcquireUnknown), rec.Count(lease.EventRefused))
			if p.Cut() != 1 {
				t.Fatalf("%d replies cut, want 1 (the grant's)", p.Cut())
			}
			if err != nil || entered.Load() != 1 {
				t.Errorf("waiter whose freed-key grant reply was cut at maxmemory: %v, entered %d; want entered once", err, entered.Load())
			}
			if entered.Load() == 1 {
				id := strings.SplitN(inVal, ":", 2)
				if len(id) != 2 || id[1] != strconv.FormatUint(uint64(inTok), 10) {
					t.Errorf("entered with token %d, lock held %q", inTok, inVal)
				}
			}
			if n := rec.Count(lease.EventAcquireUnknown); n != 0 {
				t.Errorf("%d unknown acquires", n)
			}
			adv52NoKeyWithoutExpiry(t, admin)
		})
	}
}

// TestAdversary54_DeadWaiterAheadAtMaxmemory: two waiters queued before
// maxmemory; the first (w1, behind a proxy) loses its connection to Redis
// (its giving up never arrives) while the server is at maxmemory. The
// holder's release hands the key to w1 (its entry still live) for the
// short claim only (its inbox has no subscriber); when the claim runs out
// the key is free, and w2, queued before maxmemory, must get it there
// (path (b)) and enter well before its wait ends.
func TestAdversary54_DeadWaiterAheadAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	p := leasetest.StartProxy(t, srv.Addr())
	r1 := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { r1.Close() })
	c1, _ := newClient(t, r1, lease.WithRecheck(time.Second)) // entry life 2.1s, claim 1.1s
	c2, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	hc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	release := make(chan struct{})
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 12 * time.Second}
	hdone := hold(t, hc, key, s, release)
	ws := s
	ws.Wait = 8 * time.Second
	w1ctx, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	w1 := make(chan error, 1)
	go func() {
		w1 <- c1.Do(w1ctx, key, ws, func(context.Context) error { return errors.New("w1 entered") })
	}()
	adv53WaitQueued(t, admin, key, 1)
	w2 := make(chan error, 1)
	var w2in time.Time
	go func() {
		w2 <- c2.Do(ctx, key, ws, func(context.Context) error { w2in = time.Now(); return nil })
	}()
	adv53WaitQueued(t, admin, key, 2)
	oom(true)
	defer oom(false)
	// w1's process is cut off: its connections close, new ones are
	// refused, its giving up never arrives.
	_ = p.Refuse()
	p.CloseConns()
	cancel1()
	if err := <-w1; err == nil {
		t.Errorf("w1: nil")
	}
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	t.Logf("queue after w1 was cut off: %v", admin.ZRange(ctx, q, 0, -1).Val())
	released := time.Now()
	close(release)
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	t.Logf("after the release: lock %q pttl %v", admin.Get(ctx, lockKey(key)).Val(), admin.PTTL(ctx, lockKey(key)).Val())
	var err error
	select {
	case err = <-w2:
	case <-time.After(9 * time.Second):
		t.Fatal("w2 still waiting")
	}
	if err != nil {
		t.Errorf("w2, queued before maxmemory behind a dead waiter: %v; want it to get the key when the dead one's claim ends", err)
	} else {
		t.Logf("w2 entered %v after the release", w2in.Sub(released).Round(time.Millisecond))
		if d := w2in.Sub(released); d > 3*time.Second {
			t.Errorf("w2 entered %v after the release; want within the claim (1.1s) and a re-check", d)
		}
	}
	oom(false)
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary54_FreedKeyWithReplicasAtMaxmemory: a Client that waits for
// a replica's acknowledgement (WithReplicas) queued before maxmemory gets a
// key freed without a handover there (path (b), then WAIT): it enters,
// and the replica holds its grant.
func TestAdversary54_FreedKeyWithReplicasAtMaxmemory(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	srv.WaitReplicas(t, rep)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	wc, _ := newClient(t, srv.Client(t), lease.WithReplicas(1, time.Second), lease.WithRecheck(100*time.Millisecond))
	key := uniqueKey(t)
	if err := admin.Set(ctx, lockKey(key), "ghost:0", 800*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	var onReplica string
	wdone := make(chan error, 1)
	go func() {
		wdone <- wc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second, Fence: true},
			func(context.Context) error {
				onReplica = rep.Client(t).Get(context.Background(), lockKey(key)).Val()
				return nil
			})
	}()
	adv53WaitQueued(t, admin, key, 1)
	oom(true)
	var err error
	select {
	case err = <-wdone:
	case <-time.After(7 * time.Second):
		t.Fatal("waiter still waiting")
	}
	oom(false)
	if err != nil {
		t.Errorf("waiter with WithReplicas at maxmemory on a freed key: %v; want it granted", err)
	}
	t.Logf("lock on the replica inside fn: %q", onReplica)
	if err == nil && (onReplica == "" || strings.HasPrefix(onReplica, "ghost")) {
		t.Errorf("replica held %q inside fn, want the waiter's grant", onReplica)
	}
	adv52NoKeyWithoutExpiry(t, admin)
}

// TestAdversary54_PassedOverFencedWaiterAtMaxmemory is
// TestAdversary41_RefusedHandoverEndToEnd at maxmemory: the fencing
// counter is at 2^63 - 1 (set from outside) when the holder releases, with
// a fenced waiter F ahead of an unfenced one U (both queued before
// maxmemory). The release passes F over (no token to give) and hands the
// key to U, which enters at once; F's own acquire must be refused with the
// reason, the counter at 2^63 - 1, as below maxmemory (README), not with
// an OOM that points the operator at memory. Also with F alone (the
// release then frees the key, and F's re-check takes path (b)).
func TestAdversary54_PassedOverFencedWaiterAtMaxmemory(t *testing.T) {
	for _, withU := range []bool{true, false} {
		t.Run(fmt.Sprint("unfenced waiter behind=", withU), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			ctx := context.Background()
			oom := maxmemoryFull(t, admin)
			hc, _ := newClient(t, srv.Client(t))
			fc, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
			uc, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
			key := uniqueKey(t)
			base := strings.TrimSuffix(lockKey(key), ":l")
			rel := make(chan struct{})
			hdone := hold(t, hc, key, lease.Spec{TTL: 4 * time.Second, Deadline: 20 * time.Second}, rel)
			fdone := make(chan error, 1)
			go func() {
				fdone <- fc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Wait: 6 * time.Second, Deadline: 20 * time.Second, Fence: true}, func(context.Context) error { return nil })
			}()
			adv53WaitQueued(t, admin, key, 1)
			udone := make(chan error, 1)
			var uAt time.Duration
			start := time.Now()
			if withU {
				go func() {
					udone <- uc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Wait: 6 * time.Second, Deadline: 20 * time.Second}, func(context.Context) error {
						uAt = time.Since(start)
						return nil
					})
				}()
				adv53WaitQueued(t, admin, key, 2)
			}
			admin.Set(ctx, base+":f", "9223372036854775807", time.Hour)
			oom(true)
			defer oom(false)
			close(rel)
			herr := <-hdone
			relAt := time.Since(start)
			if herr != nil {
				t.Errorf("holder: %v", herr)
			}
			ferr := <-fdone
			t.Logf("fenced waiter's Do = %v", ferr)
			if withU {
				uerr := <-udone
				if uerr != nil || uAt-relAt > time.Second {
					t.Errorf("the unfenced waiter: %v, entered %v after the release", uerr, uAt-relAt)
				}
			}
			if !errors.Is(ferr, lease.ErrRefused) || !strings.Contains(ferr.Error(), "2^63") {
				t.Errorf("the fenced waiter passed over at maxmemory: %v; want ErrRefused naming the counter at 2^63 - 1 (as below maxmemory)", ferr)
			}
			oom(false)
			adv52NoKeyWithoutExpiry(t, admin)
		})
	}
}

// TestAdversary54_ClusterFreedKeyAtMaxmemory: on a 3-master Cluster, the
// key's master at maxmemory: a waiter queued before it gets the key freed
// by its holder's lease running out (path (b)), and a second waiter behind
// it gets it by the first's release; fenced tokens increase; nothing is
// left without expiry on that master.
func TestAdversary54_ClusterFreedKeyAtMaxmemory(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := cl.Client(t)
	if err := rdb.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	key := "adv54-cluster"
	m, err := cl.MasterForKey(ctx, lockKey(key))
	if err != nil {
		t.Fatal(err)
	}
	admin := m.Client(t)
	oom := maxmemoryFull(t, admin)
	c1, _ := newClient(t, rdb, lease.WithRecheck(100*time.Millisecond))
	c2, _ := newClient(t, cl.Client(t), lease.WithRecheck(100*time.Millisecond))
	if err := admin.Set(ctx, lockKey(key), "ghost:1", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		toks []lease.Token
	)
	body := func(ctx context.Context) error {
		tok, _ := lease.TokenFrom(ctx)
		mu.Lock()
		toks = append(toks, tok)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Wait: 6 * time.Second, Fence: true}
	errs := make(chan error, 2)
	go func() { errs <- c1.Do(ctx, key, s, body) }()
	adv53WaitQueued(t, admin, key, 1)
	go func() { errs <- c2.Do(ctx, key, s, body) }()
	adv53WaitQueued(t, admin, key, 2)
	oom(true)
	admin.Del(ctx, lockKey(key)) // the holder's lease ran out
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
		case <-time.After(8 * time.Second):
			t.Fatal("waiter still waiting")
		}
	}
	oom(false)
	t.Logf("tokens %v", toks)
	if len(toks) == 2 && toks[1] <= toks[0] {
		t.Errorf("tokens %v not increasing", toks)
	}
	adv52NoKeyWithoutExpiry(t, admin)
}

// adv54DropHook fails, without sending, every request for which drop
// reports true (a give-up that never reaches Redis).
type adv54DropHook struct{ drop func(args []any) bool }

func (h adv54DropHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv54DropHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.drop(cmd.Args()) {
			err := errors.New("adv54: dropped before sending")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h adv54DropHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAdversary54_LostGiveUpLiveClientAtMaxmemory: w1 (queued first,
// before maxmemory) gives up (its context ends) at maxmemory, but its
// release never reaches Redis; its Client stays up, subscribed. The
// holder's release at maxmemory hands the key to w1's identity for the
// full TTL (its inbox has a subscriber); w1's Client must release that
// orphan grant on w1's behalf, so that w2 (queued before maxmemory) gets
// the key at once, not after w1's TTL.
func TestAdversary54_LostGiveUpLiveClientAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	var dropping atomic.Bool
	r1 := srv.Client(t)
	r1.AddHook(adv54DropHook{drop: func(args []any) bool {
		// The release script has 6 keys, the acquire 4.
		// Only the give-up (the first release after arming).
		return len(args) > 2 && fmt.Sprint(args[2]) == "6" && dropping.CompareAndSwap(true, false)
	}})
	c1, _ := newClient(t, r1, lease.WithRecheck(200*time.Millisecond))
	c2, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	hc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	release := make(chan struct{})
	s := lease.Spec{TTL: 8 * time.Second, Deadline: 20 * time.Second}
	hdone := hold(t, hc, key, s, release)
	ws := s
	ws.Wait = 10 * time.Second
	w1ctx, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	w1 := make(chan error, 1)
	go func() { w1 <- c1.Do(w1ctx, key, ws, func(context.Context) error { return errors.New("w1 entered") }) }()
	adv53WaitQueued(t, admin, key, 1)
	w2 := make(chan error, 1)
	var w2in time.Time
	go func() { w2 <- c2.Do(ctx, key, ws, func(context.Context) error { w2in = time.Now(); return nil }) }()
	adv53WaitQueued(t, admin, key, 2)
	oom(true)
	defer oom(false)
	dropping.Store(true)
	cancel1()
	if err := <-w1; !errors.Is(err, context.Canceled) {
		t.Errorf("w1: %v", err)
	}
	released := time.Now()
	close(release)
	if err := <-hdone; err != nil {
		t.Errorf("holder: %v", err)
	}
	t.Logf("after the release: lock %q pttl %v", admin.Get(ctx, lockKey(key)).Val(), admin.PTTL(ctx, lockKey(key)).Val())
	if dropping.Load() {
		t.Error("w1's give-up was not sent")
	}
	var err error
	select {
	case err = <-w2:
	case <-time.After(12 * time.Second):
		t.Fatal("w2 still waiting")
	}
	if err != nil {
		t.Errorf("w2: %v", err)
	} else {
		d := w2in.Sub(released)
		t.Logf("w2 entered %v after the release", d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("w2 entered %v after the release: the orphan grant to w1 (gone) held the key", d.Round(time.Millisecond))
		}
	}
	oom(false)
	adv52NoKeyWithoutExpiry(t, admin)
}
