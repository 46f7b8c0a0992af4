package lease_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 40: 904ecd2 writes the release's tombstone after its first write
// that frees memory (so that a release goes through at maxmemory) and takes
// the caller's own queue entry out only where the queue was read non-empty.

// adv40Dump lists every key with its type and value (no TTLs).
func adv40Dump(t *testing.T, r *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	ks, err := r.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ks)
	var out []string
	for _, k := range ks {
		typ := r.Type(ctx, k).Val()
		var v any
		switch typ {
		case "string":
			v = r.Get(ctx, k).Val()
		case "zset":
			v = r.ZRange(ctx, k, 0, -1).Val()
		case "hash":
			h := r.HGetAll(ctx, k).Val()
			fs := slices.Sorted(maps.Keys(h))
			for i, f := range fs {
				fs[i] = f + "=" + h[f]
			}
			v = fs
		}
		out = append(out, fmt.Sprintf("%s %s %v", k, typ, v))
	}
	return out
}

// TestAdversary40_ScriptReplayEveryPath runs the current release script on
// the caller's held lease over the matrix's queue states (nobody queued,
// the caller's own entry, dead entries, live waiters fenced and not, with
// and without a subscriber), hold-min 0 and 3000, tombstone values 1/l/x,
// with and without the caller's member, with the counter ahead of the
// clock and behind it, and then runs it again with the same arguments (a
// go-redis replay after a lost reply): the replay must answer as the first
// run did (less the +10 of a refused message) and write nothing. Each
// state is run on a server below maxmemory and at maxmemory (noeviction):
// the first run's answer and the keys it leaves must be the same there.
func TestAdversary40_ScriptReplayEveryPath(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	live := srv.Client(t).Subscribe(ctx, inboxL37)
	if _, err := live.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	_, cur := releaseScripts37(t)
	if err := cur.Load(ctx, admin).Err(); err != nil {
		t.Fatal(err)
	}
	oom := maxmemoryFull(t, admin)
	run := func(argv []any) string {
		res, err := cur.EvalSha(ctx, admin, keys37, argv...).Result()
		if err != nil {
			return "error: " + err.Error()
		}
		if n, ok := res.(int64); ok && n >= 10 {
			res = n - 10
		}
		return fmt.Sprint(res)
	}
	// Tokens vary with the clock: the lock's value after a fenced
	// handover is compared by identity only.
	norm := func(ks []string) []string {
		out := slices.Clone(ks)
		for i, k := range out {
			if strings.HasPrefix(k, keys37[3]+" ") {
				out[i] = keys37[3] + " (counter)"
			}
			if strings.HasPrefix(k, keys37[0]+" string ") {
				if j := strings.LastIndex(k, ":"); j > len(keys37[0]) {
					out[i] = k[:j]
				}
			}
		}
		return out
	}
	now := func() int64 {
		tm, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	qs := queues37(now())
	bad, n := 0, 0
	for _, q := range slices.Sorted(maps.Keys(qs)) {
		for _, hold := range []string{"0", "3000"} {
			for _, a7 := range []string{"1", "l", "x"} {
				if a7 == "x" && hold != "0" {
					continue // ForceRelease sends no hold
				}
				for _, mem := range []string{"", mine37} {
					if mem == "" && strings.HasPrefix(q, "mine") {
						// The caller's own entry queued and not named: the
						// handover goes to the caller's identity
						// (TestAdversary40_ForceReleaseHandsBackToHolder).
						continue
					}
					for _, ctr := range []string{fence37, "5"} {
						var first [2]string
						var left [2][]string
						for i, atMax := range []bool{false, true} {
							oom(false)
							admin.FlushAll(ctx)
							p := admin.Pipeline()
							p.Do(ctx, "SET", keys37[0], me37+":5", "PX", "10000")
							p.Do(ctx, "SET", keys37[3], ctr, "PX", "600000")
							for j, en := range qs[q] {
								p.ZAdd(ctx, keys37[4], redis.Z{Score: float64(j + 1), Member: en.m})
								if en.exp != "" {
									p.HSet(ctx, keys37[5], en.m, en.exp)
								}
							}
							if _, err := p.Exec(ctx); err != nil {
								t.Fatal(err)
							}
							oom(atMax)
							argv := relArgv37(hold, mem, a7)
							a1 := run(argv)
							after := adv40Dump(t, admin)
							a2 := run(argv)
							again := adv40Dump(t, admin)
							oom(false)
							n++
							name := fmt.Sprintf("q=%s/hold=%s/a7=%s/member=%v/counter=%s/maxmemory=%v", q, hold, a7, mem != "", ctr, atMax)
							first[i], left[i] = a1, norm(after)
							if a1 != a2 || !slices.Equal(after, again) {
								bad++
								if bad < 10 {
									t.Errorf("%s: first run %s, replay %s\n  after first %q\n  after replay %q", name, a1, a2, after, again)
								}
							}
						}
						if first[0] != first[1] || !slices.Equal(left[0], left[1]) {
							bad++
							if bad < 10 {
								t.Errorf("q=%s/hold=%s/a7=%s/member=%v/counter=%s: below maxmemory %s leaving %q; at maxmemory %s leaving %q",
									q, hold, a7, mem != "", ctr, first[0], left[0], first[1], left[1])
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d runs, %d bad", n, bad)
}

// adv40CutRelease arms a proxy to cut the reply of the first release
// script (6 keys) on key sent through it: the server runs it, go-redis
// sees EOF and sends it again on a new connection (a replay).
type adv40CutRelease struct {
	p   *leasetest.Proxy
	key string

	mu    sync.Mutex
	armed bool
	oom   func() // run just before the release is sent (nil: none)
	off   func() // run once it was answered (nil: none)
}

func (h *adv40CutRelease) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}
func (h *adv40CutRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *adv40CutRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) >= 4 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && fmt.Sprint(args[2]) == "6" && fmt.Sprint(args[3]) == lockKey(h.key) {
			h.mu.Lock()
			first := !h.armed
			h.armed = true
			h.mu.Unlock()
			if first {
				if h.oom != nil {
					h.oom()
				}
				h.p.Set(leasetest.CutNextReply)
				err := next(ctx, cmd) // the first send and go-redis's replay
				if h.off != nil {
					h.off()
				}
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func adv40CutClient(t *testing.T, srv *leasetest.Server, key string, oom func(), off ...func()) (*redis.Client, *leasetest.Proxy) {
	t.Helper()
	p := leasetest.StartProxy(t, srv.Addr())
	r := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { r.Close() })
	h := &adv40CutRelease{p: p, key: key, oom: oom}
	if len(off) > 0 {
		h.off = off[0]
	}
	r.AddHook(h)
	return r, p
}

// TestAdversary40_CutReplyHandover: the holder's release hands the key to
// a waiter of another Client (plain, fenced, a leader-less hold-min) and
// its reply is cut; go-redis's replay must answer as the first run
// ("released", or "hold set"), below maxmemory and at maxmemory (the
// server set full just before the release is sent): the holder's Do
// returns nil with no unconfirmed release, and the waiter enters at once.
func TestAdversary40_CutReplyHandover(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	oom := maxmemoryFull(t, admin)
	ctx := context.Background()
	for _, atMax := range []bool{false, true} {
		for _, kind := range []string{"plain", "fenced", "waiting", "holdmin"} {
			name := fmt.Sprintf("%s/maxmemory=%v", kind, atMax)
			if kind == "holdmin" && atMax {
				// The waiter, told of the hold, looks again while the key
				// is held: at maxmemory its queue refresh is refused and
				// its Do fails (TestAdversary40_WaiterAtMaxmemory).
				continue
			}
			key := uniqueKey(t) + kind + fmt.Sprint(atMax)
			var set func()
			if atMax {
				set = func() { oom(true) }
			}
			// Below maxmemory again once the release and its replay were
			// answered: a waiter's re-check at maxmemory fails its Do
			// (TestAdversary40_WaiterAtMaxmemory).
			r, p := adv40CutClient(t, srv, key, set, func() { oom(false) })
			hc, hrec := newClient(t, r)
			wc, _ := newClient(t, srv.Client(t))
			s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}
			switch kind {
			case "fenced":
				s.Fence = true
			case "waiting":
				s.Wait = 2 * time.Second
				s.Fence = true
			case "holdmin":
				s.HoldMin = 300 * time.Millisecond
			}
			ws := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second, Fence: true}
			hdone := make(chan error, 1)
			queued := make(chan struct{})
			var released time.Time
			go func() {
				err := hc.Do(ctx, key, s, func(context.Context) error {
					close(queued)
					adv39WaitQueued(t, srv, key, 1)
					// The waiter's follow-up acquire done (a waiter's
					// acquire at maxmemory fails its Do, see
					// TestAdversary40_WaiterAtMaxmemory).
					time.Sleep(150 * time.Millisecond)
					released = time.Now()
					return nil
				})
				if kind == "holdmin" {
					// The hold runs out to a free key: an acquire of a
					// free key is refused at maxmemory (as intended).
					oom(false)
				}
				hdone <- err
			}()
			<-queued
			entered := make(chan time.Time, 1)
			werr := wc.Do(ctx, key, ws, func(context.Context) error {
				entered <- time.Now()
				oom(false)
				return nil
			})
			herr := <-hdone
			oom(false)
			if herr != nil || werr != nil {
				t.Errorf("%s: holder's Do = %v, waiter's = %v", name, herr, werr)
				continue
			}
			if p.Cut() != 1 {
				t.Errorf("%s: %d replies cut, want 1", name, p.Cut())
			}
			lag := (<-entered).Sub(released)
			limit := time.Second
			if kind == "holdmin" {
				limit = 1500 * time.Millisecond
			}
			if lag > limit {
				t.Errorf("%s: the waiter entered %v after the release", name, lag)
			}
			noUnconfirmedReleases(t, name, hrec)
		}
	}
}

// TestAdversary40_CutReplyForceRelease: ForceRelease (tombstone "x") of a
// lease with a waiter queued (a handover) and with nobody queued, its
// release's reply cut, below maxmemory and at maxmemory: it answers
// ForceReleased, the waiter (if any) enters, and the holder's Do returns
// ErrLost.
func TestAdversary40_CutReplyForceRelease(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	oom := maxmemoryFull(t, admin)
	ctx := context.Background()
	for _, atMax := range []bool{false, true} {
		for _, waiter := range []bool{false, true} {
			name := fmt.Sprintf("waiter=%v/maxmemory=%v", waiter, atMax)
			key := uniqueKey(t) + fmt.Sprint(waiter, atMax)
			var set func()
			if atMax {
				set = func() { oom(true) }
			}
			r, p := adv40CutClient(t, srv, key, set)
			fc, _ := newClient(t, r)
			hc, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
			wc, _ := newClient(t, srv.Client(t))
			s := lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Fence: true}
			owner := make(chan string, 1)
			hdone := make(chan error, 1)
			go func() {
				hdone <- hc.Do(ctx, key, s, func(fctx context.Context) error {
					l, _ := lease.FromContext(fctx)
					owner <- l.Owner()
					<-fctx.Done()
					return nil
				})
			}()
			id := <-owner
			wdone := make(chan error, 1)
			entered := make(chan time.Time, 1)
			if waiter {
				go func() {
					wdone <- wc.Do(ctx, key, lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second, Fence: true}, func(context.Context) error {
						entered <- time.Now()
						oom(false)
						return nil
					})
				}()
				adv39WaitQueued(t, srv, key, 1)
			}
			at := time.Now()
			res, err := fc.ForceRelease(ctx, key, id)
			if !waiter {
				oom(false)
			}
			if err != nil || res != lease.ForceReleased {
				t.Errorf("%s: ForceRelease = %v, %v; want released", name, res, err)
			}
			if p.Cut() != 1 {
				t.Errorf("%s: %d replies cut, want 1", name, p.Cut())
			}
			if waiter {
				select {
				case e := <-entered:
					if d := e.Sub(at); d > time.Second {
						t.Errorf("%s: the waiter entered %v after ForceRelease", name, d)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("%s: the waiter did not enter", name)
				}
				if err := <-wdone; err != nil {
					t.Errorf("%s: waiter's Do = %v", name, err)
				}
			}
			oom(false)
			select {
			case herr := <-hdone:
				if !errors.Is(herr, lease.ErrLost) {
					t.Errorf("%s: holder's Do = %v, want ErrLost", name, herr)
				} else {
					t.Logf("%s: holder: %v", name, herr)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("%s: the holder's Do did not return", name)
			}
		}
	}
}

// TestAdversary40_WaiterAtMaxmemory: at maxmemory (noeviction) a call
// that waits (Spec.Wait) on a held key needs a write, its queue entry,
// and the server refuses it (the acquire's SET NX, refused, wrote
// nothing, so the entry's ZADD is the script's first write that may grow
// memory). Round 40 read acquire.lua's comment ("a held key is still
// busy") as a promise that it would wait; it is refused at once, with
// ErrRefused naming OOM, as a grant of a free key is (README, Runtime
// semantics), leaving no queue entry, and the holder is not disturbed
// (its release goes through at maxmemory).
func TestAdversary40_WaiterAtMaxmemory(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	oom := maxmemoryFull(t, admin)
	ctx := context.Background()
	hc, _ := newClient(t, srv.Client(t))
	wc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	release := make(chan struct{})
	hdone := hold(t, hc, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}, release)
	oom(true)
	start := time.Now()
	werr := wc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second}, func(context.Context) error {
		t.Error("the waiter entered at maxmemory")
		return nil
	})
	took := time.Since(start)
	close(release)
	herr := <-hdone
	oom(false)
	if herr != nil {
		t.Errorf("holder: %v", herr)
	}
	if !errors.Is(werr, lease.ErrRefused) || !strings.Contains(werr.Error(), "OOM") || took > time.Second {
		t.Errorf("a waiting call on a held key at maxmemory: Do = %v after %v; want ErrRefused naming OOM at once", werr, took.Round(time.Millisecond))
	}
	base := strings.TrimSuffix(lockKey(key), ":l")
	if n := admin.Exists(ctx, base+":q", base+":x", lockKey(key)).Val(); n != 0 {
		t.Errorf("after the refused waiter and the holder's release at maxmemory, %d of the queue, its expiries and the lock are left", n)
	}
}

// TestAdversary40_ForceReleaseHandsBackToHolder: ForceRelease runs the
// release script as the holder's identity with no queue member (""). When
// the queue holds a live entry of that same identity (set from outside in
// this test; in production a state such as a restore from a snapshot can
// bring one back, see TestAdversary23_StaleRestartLeavesGrantedEntry),
// the handover gives the key back to the identity being forced out: the
// call answers ForceReleased, yet the holder keeps the key (a new token
// under its identity), renews it, and is never told of a loss. The old
// script (7fe3f82) did the same: the handover skipped the caller's entry
// only by the member it was given (ARGV[6]), never by identity. Fixed:
// the handover passes over entries of the releasing identity.
func TestAdversary40_ForceReleaseHandsBackToHolder(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	hc, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	fc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	owner := make(chan string, 1)
	stop := make(chan struct{})
	hdone := make(chan error, 1)
	var lostAt time.Time
	go func() {
		hdone <- hc.Do(ctx, key, lease.Spec{TTL: 900 * time.Millisecond, Deadline: 10 * time.Second}, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			owner <- l.Owner()
			select {
			case <-stop:
			case <-fctx.Done():
				lostAt = time.Now()
			}
			return nil
		})
	}()
	id := <-owner
	q := strings.TrimSuffix(lockKey(key), ":l")
	m := id + "|900|0|900"
	now := time.Now().UnixMilli()
	admin.ZAdd(ctx, q+":q", redis.Z{Score: 1, Member: m})
	admin.HSet(ctx, q+":x", m, fmt.Sprintf("%d:1", now+60000))
	res, err := fc.ForceRelease(ctx, key, id)
	v := admin.Get(ctx, lockKey(key)).Val()
	t.Logf("ForceRelease = %v, %v; the key after it %q", res, err, v)
	time.Sleep(2 * time.Second)
	close(stop)
	herr := <-hdone
	if strings.HasPrefix(v, id+":") {
		t.Errorf("ForceRelease answered %v but handed the key back to the identity it forced out (%q); the holder's Do = %v (lost at %v)", res, v, herr, lostAt)
	}
	if !errors.Is(herr, lease.ErrLost) || lostAt.IsZero() {
		t.Errorf("the forced-out holder's Do = %v (its context ended at %v), want ErrLost", herr, lostAt)
	}
}

// TestAdversary40_LeaderStepDownAtMaxmemoryCutReply: a leader term steps
// down (tombstone "l", "r" on the key's channel) on a server set at
// maxmemory just before its release is sent, and the release's reply is
// cut: the replay answers "released", no unconfirmed release, the key is
// gone, the tombstone says "l", and a watch (re-check 30s) hears the
// step-down at once.
func TestAdversary40_LeaderStepDownAtMaxmemoryCutReply(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	oom := maxmemoryFull(t, admin)
	ctx := context.Background()
	key := uniqueKey(t)
	r, p := adv40CutClient(t, srv, key, func() { oom(true) }, func() { oom(false) })
	c, rec := newClient(t, r)
	obs, _ := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L40"})
	l := term.waitEntered(t)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := obs.WatchLeader(wctx, key)
	for got := false; !got; {
		select {
		case w := <-ch:
			got = w.Err == nil && w.Holder != ""
		case <-time.After(5 * time.Second):
			t.Fatalf("the watch never saw the leader")
		}
	}
	time.Sleep(50 * time.Millisecond)
	term.stop(t)
	for heard := false; !heard; {
		select {
		case w := <-ch:
			heard = w.Err == nil && w.Holder == ""
		case <-time.After(3 * time.Second):
			t.Fatalf("the watch did not hear the step-down within 3s")
		}
	}
	tomb, _ := admin.Get(ctx, "lease:{"+key+"}:r:"+l.Owner()).Result()
	n, _ := admin.Exists(ctx, lockKey(key)).Result()
	if tomb != "l" || n != 0 || p.Cut() != 1 || rec.Count(lease.EventReleaseUnconfirmed) != 0 {
		t.Errorf("tombstone %q, key exists %d, cut %d, unconfirmed %d (want l, 0, 1, 0)", tomb, n, p.Cut(), rec.Count(lease.EventReleaseUnconfirmed))
	}
}

// TestAdversary40_CounterNotANumberToken: tokens are max(counter + 1,
// time µs). A counter written from outside as a number Lua reads but
// cannot format as an integer ("1e300", "inf", "nan") makes takeTok's
// string.format('%d', c + 1) overflow: the fenced grant and the fenced
// handover minted a token far below the one before (the same in
// 7fe3f82's nextTok). Each fenced grant must get a token above the
// previous one: a counter that is not decimal digits is now read as none
// (the time floor), and one at 2^63 - 1 or past it refuses the grant.
func TestAdversary40_CounterNotANumberToken(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	c, _ := newClient(t, srv.Client(t))
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}
	for _, ctr := range []string{"1e300", "inf", "nan", "-inf", "99999999999999999999999", "9223372036854775807", "9223372036854775806", "009223372036854775806"} {
		key := uniqueKey(t)
		var prev, tok lease.Token
		if err := c.Do(ctx, key, s, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			prev = l.Token()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		fk := strings.TrimSuffix(lockKey(key), ":l") + ":f"
		admin.Set(ctx, fk, ctr, time.Minute)
		err := c.Do(ctx, key, s, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			tok = l.Token()
			return nil
		})
		after := admin.Get(ctx, fk).Val()
		lv, lp := admin.Get(ctx, lockKey(key)).Val(), admin.PTTL(ctx, lockKey(key)).Val()
		t.Logf("counter %q: token before %v, after %v (Do %v), counter now %q, lock after Do %q for %v", ctr, prev, tok, err, after, lv, lp)
		if exhausted := ctr == "99999999999999999999999" || ctr == "9223372036854775807"; exhausted {
			// No greater token (the client reads them as int64):
			// refused, nothing left held, the counter as it was.
			if !errors.Is(err, lease.ErrRefused) || !strings.Contains(err.Error(), "2^63") || lv != "" || after != ctr {
				t.Errorf("counter %q set from outside: Do = %v, lock %q, counter %q; want ErrRefused naming 2^63, no lock, the counter unchanged", ctr, err, lv, after)
			}
		} else if err != nil {
			t.Errorf("counter %q set from outside: the fenced Do failed (%v) and left the key held %q for %v by nobody", ctr, err, lv, lp)
		} else if ctr == "9223372036854775806" || ctr == "009223372036854775806" {
			if tok != lease.Token(9223372036854775807) {
				t.Errorf("counter %q: token %v, want 2^63 - 1", ctr, tok)
			}
		} else if tok <= prev {
			t.Errorf("counter %q set from outside: the next fenced grant's token %v is not above the previous %v", ctr, tok, prev)
		}
	}
}

// TestAdversary40_CounterNotANumberHandover: as
// TestAdversary40_CounterNotANumberToken, for the fenced handover
// (release.lua's takeTok): the counter set from outside to "1e300" while a
// fenced waiter is queued; the holder's release hands the key over with
// token string.format('%d', 1e300 + 1) (-9223372036854775808 on x86-64).
// The waiter must enter with a token above the holder's.
func TestAdversary40_CounterNotANumberHandover(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	hc, _ := newClient(t, srv.Client(t))
	wc, wrec := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Fence: true}
	var htok lease.Token
	hdone := make(chan error, 1)
	go func() {
		hdone <- hc.Do(ctx, key, s, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			htok = l.Token()
			adv39WaitQueued(t, srv, key, 1)
			time.Sleep(150 * time.Millisecond)
			admin.Set(ctx, strings.TrimSuffix(lockKey(key), ":l")+":f", "1e300", time.Minute)
			return nil
		})
	}()
	time.Sleep(100 * time.Millisecond)
	ws := s
	ws.Wait = 8 * time.Second
	var wtok lease.Token
	start := time.Now()
	mid := make(chan string, 1)
	go func() {
		time.Sleep(5 * time.Second) // past the handover's 3s TTL
		mid <- admin.Get(ctx, lockKey(key)).Val()
	}()
	werr := wc.Do(ctx, key, ws, func(fctx context.Context) error {
		l, _ := lease.FromContext(fctx)
		wtok = l.Token()
		return nil
	})
	herr := <-hdone
	took := time.Since(start)
	t.Logf("holder %v (token %v); waiter %v (token %v) after %v; key 5s in %q, now %q", herr, htok, werr, wtok, took.Round(time.Millisecond), <-mid, admin.Get(ctx, lockKey(key)).Val())
	for _, e := range wrec.Events() {
		if e.Err != nil {
			t.Logf("waiter event %v: %v", e.Kind, e.Err)
		}
	}
	if werr != nil || wtok <= htok {
		t.Errorf("counter 1e300 at the handover: waiter's Do = %v with token %v, holder's token %v; want the waiter to enter with a greater token", werr, wtok, htok)
	}
}
