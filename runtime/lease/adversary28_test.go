package lease_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv28Replay runs the next acquire script twice (as go-redis does after a
// lost reply), calling between the runs, and keeps the first run's answer.
type adv28Replay struct {
	armed   atomic.Bool
	first   atomic.Int64
	between func()
}

func (h *adv28Replay) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv28Replay) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" || !h.armed.Load() {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.armed.Store(false)
		switch c := cmd.(type) {
		case *redis.IntCmd:
			h.first.Store(c.Val())
		case *redis.Cmd: // the runtime reads script answers with a Cmd
			if n, err := c.Int64(); err == nil {
				h.first.Store(n)
			}
		}
		h.between()
		return next(ctx, cmd)
	}
}
func (h *adv28Replay) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A server at maxmemory (noeviction) refuses writes, not reads. The
// acquire script used to read the key first, so a contender was told
// "busy" (with the holder's time left) and a replay of a grant (a lost
// reply re-sent) got that grant back, with its token; trying SET NX first
// must not turn either into an OOM error: ErrRefused ("definitely not
// executed", no release) for a grant that was made and is held.
func TestAdversary28_OOMStillAnswersBusyAndReplays(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	full := maxmemoryFull(t, admin)
	shapes := []lease.Spec{
		{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true},
		{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true, Wait: time.Second},
		{TTL: 10 * time.Second, Deadline: 20 * time.Second, Wait: time.Second},
	}

	// Busy: a fenced contender that does not wait (a waiter must queue,
	// a write, refused before too).
	hc, _ := newClient(t, srv.Client(t))
	bc, _ := newClient(t, srv.Client(t))
	warm(t, bc, "warm")
	release := make(chan struct{})
	hdone := hold(t, hc, "busy", shapes[0], release)
	full(true)
	err := bc.Do(ctx, "busy", lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Fence: true}, func(context.Context) error {
		t.Error("entered a held key")
		return nil
	})
	full(false)
	t.Logf("fenced contender at maxmemory: %v", err)
	if !errors.Is(err, lease.ErrBusy) {
		t.Errorf("fenced contender at maxmemory: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}

	// Replay of a grant: the first run granted, the server filled up, the
	// re-sent script must answer the same grant.
	rdb := srv.Client(t)
	h := &adv28Replay{between: func() { full(true) }}
	rdb.AddHook(h)
	c, _ := newClient(t, rdb)
	warm(t, c, "warm")
	for i, s := range shapes {
		key := uniqueKey(t)
		h.armed.Store(true)
		var tok lease.Token
		err := c.Do(ctx, key, s, func(ctx context.Context) error {
			full(false) // the release writes
			tok, _ = lease.TokenFrom(ctx)
			return nil
		})
		full(false)
		t.Logf("shape %d: first run answered %d; Do = %v, token %d", i, h.first.Load(), err, tok)
		if err != nil {
			t.Errorf("shape %d (fence %v, wait %v): replay of a grant at maxmemory: %v", i, s.Fence, s.Wait, err)
		} else if int64(tok) != h.first.Load() {
			t.Errorf("shape %d: token %d, the first run's %d", i, tok, h.first.Load())
		}
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Errorf("shape %d: key still held after Do", i)
		}
	}
}

// Fenced tokens under contention strictly increase in the order the
// grants happen (fn bodies never overlap): grants by SET NX in the
// acquire, handovers minted by releases to queued waiters, replays of
// acquires and releases after cut replies (one Client behind a proxy), a
// counter deleted from outside or expiring (time floor), then a counter
// raised past 2^53 from outside.
func TestAdversary28_FencedTokensIncreaseUnderHandovers(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	p := leasetest.StartProxy(t, srv.Addr())
	const key = "k"
	fenceKey := "lease:{" + key + "}:f"
	var (
		mu      sync.Mutex
		toks    []lease.Token
		entered int
		direct  int // entered by the caller's own SET NX (it did not wait)
	)
	phase := func(name string, tamper func(), opts ...lease.Option) {
		clients := make([]*lease.Client, 4)
		for i := range clients {
			rdb := srv.Client(t)
			if i == 0 {
				rdb = redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { rdb.Close() })
			}
			clients[i], _ = newClient(t, rdb, append([]lease.Option{lease.WithRecheck(100 * time.Millisecond)}, opts...)...)
			warm(t, clients[i], "warm")
		}
		before := serverCalls(t, admin)["pubsub|numsub"]
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range clients {
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := lease.Spec{TTL: 2 * time.Second, Deadline: 3 * time.Second, Fence: true}
					if g == 0 {
						s.Wait = 2 * time.Second
					}
					for {
						select {
						case <-stop:
							return
						default:
						}
						err := c.Do(ctx, key, s, func(ctx context.Context) error {
							tok, _ := lease.TokenFrom(ctx)
							mu.Lock()
							toks = append(toks, tok)
							entered++
							if s.Wait == 0 {
								direct++
							}
							mu.Unlock()
							time.Sleep(time.Duration(i) * 200 * time.Microsecond)
							return nil
						})
						if s.Wait > 0 {
							time.Sleep(2 * time.Millisecond) // the queue empties at times
						} else if errors.Is(err, lease.ErrBusy) {
							time.Sleep(200 * time.Microsecond)
						}
					}
				}()
			}
		}
		deadline := time.Now().Add(700 * time.Millisecond)
		for time.Now().Before(deadline) {
			time.Sleep(40 * time.Millisecond)
			p.Set(leasetest.CutNextReply)
			if tamper != nil {
				tamper()
			}
		}
		close(stop)
		wg.Wait()
		p.Set(leasetest.Pass)
		t.Logf("%s: %d grants entered so far (%d to callers that did not wait), %d handovers to a live waiter", name, entered, direct, serverCalls(t, admin)["pubsub|numsub"]-before)
	}
	phase("counter deleted, short counter TTL", func() { admin.Del(ctx, fenceKey) }, lease.WithCounterTTL(5*time.Millisecond))
	mu.Lock()
	last := toks[len(toks)-1]
	mu.Unlock()
	if err := admin.Set(ctx, fenceKey, "9007199254740993", 0).Err(); err != nil {
		t.Fatal(err)
	}
	phase("counter past 2^53", nil)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(toks); i++ {
		if toks[i] <= toks[i-1] {
			t.Errorf("grant %d: token %d after %d", i, toks[i], toks[i-1])
		}
	}
	if last >= 9007199254740993 || toks[len(toks)-1] <= 9007199254740993 {
		t.Errorf("tokens %d then %d: the phases did not happen as planned", last, toks[len(toks)-1])
	}
}

// The first run of a waiter's acquire found the key busy and queued it;
// its reply was lost and go-redis re-sent it after the key came free (the
// holder's key gone, or handed to this waiter by the holder's release).
// The replay is a grant with the right token (the counter's, the one the
// key carries) and leaves neither a queue entry nor its expiry.
func TestAdversary28_ReplayOfQueuedAcquireGrantedClean(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	hc, _ := newClient(t, srv.Client(t))
	warm(t, hc, "warm")
	for _, handover := range []bool{false, true} {
		key := uniqueKey(t)
		base := strings.TrimSuffix(lockKey(key), ":l")
		s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true, Wait: 5 * time.Second}
		release := make(chan struct{})
		hdone := hold(t, hc, key, s, release)
		rdb := srv.Client(t)
		h := &adv28Replay{}
		h.between = func() {
			if handover {
				close(release)
				if err := <-hdone; err != nil {
					t.Error(err)
				}
				return
			}
			admin.Del(ctx, lockKey(key)) // as if its TTL ran out
		}
		rdb.AddHook(h)
		wc, _ := newClient(t, rdb)
		warm(t, wc, "warm")
		h.armed.Store(true)
		var tok lease.Token
		var stored, counter string
		var queued, qexp int64
		err := wc.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ = lease.TokenFrom(ctx)
			stored = admin.Get(ctx, lockKey(key)).Val()
			counter = admin.Get(ctx, base+":f").Val()
			queued = admin.Exists(ctx, base+":q").Val()
			qexp = admin.Exists(ctx, base+":x").Val()
			return nil
		})
		if !handover {
			close(release)
			<-hdone
		}
		t.Logf("handover %v: first run %d; Do = %v, token %d, key %q, counter %s, queue keys %d %d", handover, h.first.Load(), err, tok, stored, counter, queued, qexp)
		if err != nil {
			t.Fatal(err)
		}
		if h.first.Load() >= 0 {
			t.Fatalf("the first run was not busy (%d): the scenario did not happen", h.first.Load())
		}
		if counter != strconvU(uint64(tok)) || !strings.HasSuffix(stored, ":"+counter) {
			t.Errorf("token %d, key %q, counter %s", tok, stored, counter)
		}
		if queued+qexp != 0 {
			t.Errorf("queue keys left: zset %d, expiries %d: %v %v", queued, qexp,
				admin.ZRange(ctx, base+":q", 0, -1).Val(), admin.HGetAll(ctx, base+":x").Val())
		}
	}
}

// Keys written from outside: a lock value without ":" is another holder
// (busy, with its time left; a waiter that gives up leaves no queue
// entry), a lock of another type is a WRONGTYPE refusal, a counter that is
// not a number gives a token from the time floor, and a counter of
// another type refuses a fenced grant but, as when the acquire read the
// key first, not a busy answer or a replay of a grant.
func TestAdversary28_KeysSetFromOutside(t *testing.T) {
	c, _ := sharedClient(t)
	admin := shared.Client(t)
	ctx := context.Background()
	fenced := lease.Spec{TTL: 2 * time.Second, Deadline: 3 * time.Second, Fence: true}
	waiting := fenced
	waiting.Wait = 150 * time.Millisecond
	refuse := func(context.Context) error { t.Error("entered"); return nil }

	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	admin.Set(ctx, lockKey(key), "garbage", 3*time.Second)
	err := c.Do(ctx, key, fenced, refuse)
	t.Logf("no separator: %v", err)
	if !errors.Is(err, lease.ErrBusy) || !regexp.MustCompile(`for (2\.9[0-9]*s|3s) more`).MatchString(err.Error()) {
		t.Errorf("a value without ':' (3s left): %v, want ErrBusy with ~3s left", err)
	}
	err = c.Do(ctx, key, waiting, refuse)
	mustIs(t, err, lease.ErrBusy)
	if n := admin.Exists(ctx, base+":q", base+":x").Val(); n != 0 {
		t.Errorf("a waiter that gave up left %d queue keys: %v %v", n, admin.ZRange(ctx, base+":q", 0, -1).Val(), admin.HGetAll(ctx, base+":x").Val())
	}

	key = uniqueKey(t)
	admin.RPush(ctx, lockKey(key), "x")
	for _, s := range []lease.Spec{fenced, waiting} {
		err = c.Do(ctx, key, s, refuse)
		mustIs(t, err, lease.ErrRefused)
		if !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("a list at the lock key: %v", err)
		}
	}

	key = uniqueKey(t)
	base = strings.TrimSuffix(lockKey(key), ":l")
	admin.Set(ctx, base+":f", "not a number", 0)
	now := uint64(time.Now().UnixMicro())
	var tok lease.Token
	if err := c.Do(ctx, key, fenced, func(ctx context.Context) error { tok, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	if uint64(tok) < now-1000000 || admin.Get(ctx, base+":f").Val() != strconvU(uint64(tok)) {
		t.Errorf("non-numeric counter: token %d (now %d µs), counter %s", tok, now, admin.Get(ctx, base+":f").Val())
	}

	// A counter of another type: busy still answered.
	key = uniqueKey(t)
	base = strings.TrimSuffix(lockKey(key), ":l")
	release := make(chan struct{})
	hc, _ := sharedClient(t)
	hdone := hold(t, hc, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}, release)
	admin.HSet(ctx, base+":f", "x", "1")
	err = c.Do(ctx, key, fenced, refuse)
	t.Logf("counter of another type, key held: %v", err)
	if !errors.Is(err, lease.ErrBusy) {
		t.Errorf("counter of another type, key held: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}
	err = c.Do(ctx, key, fenced, refuse)
	t.Logf("counter of another type, key free: %v", err)
	mustIs(t, err, lease.ErrRefused)
	if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
		t.Errorf("a refused fenced grant left the key")
	}
}

// A late grant (its reply read after the first renewal was due) arms the
// watcher's timer in the past: it fires at once, while watch may still
// hold the watcher's mutex. The lease is renewed at once and then on time
// (fn runs over twice its TTL), and when renewals stop being answered the
// loss is found at valid-until, not a renewal later. Run with -race.
// (TTL 900ms and replies 350ms late: with 300ms and 130ms, a stall of
// about 150ms of the whole process lost the lease that must be kept.)
func TestAdversary28_LateGrantRenewsAndDetectsLoss(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	c, rec, p, _, _ := proxied(t, nil, lease.WithReleaseTimeout(100*time.Millisecond))
	const ttl = 900 * time.Millisecond
	s := lease.Spec{TTL: ttl, Deadline: 5 * time.Second, MinValidity: 30 * time.Millisecond, Fence: true}
	if err := c.Do(context.Background(), "warm", s, nop); err != nil { // the scripts loaded
		t.Fatal(err)
	}
	for _, lose := range []bool{false, true} {
		key := uniqueKey(t)
		renewed := rec.Count(lease.EventRenewed)
		p.SetDelay(350 * time.Millisecond) // the grant is read after TTL/3
		var entered, done, validAtDone time.Time
		var left time.Duration
		err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			entered = time.Now()
			l, _ := lease.FromContext(ctx)
			left = l.Remaining()
			if lose {
				p.Set(leasetest.Blackhole)
			} else {
				p.Set(leasetest.Pass)
			}
			select {
			case <-ctx.Done():
				done = time.Now()
				validAtDone = entered.Add(left)
			case <-time.After(2*ttl + 100*time.Millisecond):
			}
			return nil
		})
		p.Set(leasetest.Pass)
		n := rec.Count(lease.EventRenewed) - renewed
		t.Logf("lose %v: entered with %v left; Do = %v; %d renewals; ctx done at %v after entry (zero: not done)", lose, left.Round(time.Millisecond), err, n, max(done.Sub(entered), 0).Round(time.Millisecond))
		if left >= ttl-100*time.Millisecond {
			t.Fatalf("the grant was not late (%v left)", left)
		}
		if !lose {
			if err != nil || !done.IsZero() {
				t.Errorf("a late grant renewed on time: Do = %v, ctx done after %v", err, done.Sub(entered))
			}
			if n < 3 {
				t.Errorf("%d renewals in %v of a %v lease", n, 2*ttl, ttl)
			}
			continue
		}
		mustIs(t, err, lease.ErrLost)
		if done.IsZero() {
			t.Fatal("the loss was not found while fn ran")
		}
		if late := done.Sub(validAtDone); late < -5*time.Millisecond || late-st.lost(validAtDone, done) > 150*time.Millisecond {
			t.Errorf("loss found %v after valid-until", late)
		}
	}
}
