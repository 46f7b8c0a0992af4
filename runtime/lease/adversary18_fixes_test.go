package lease_test

// Adversarial tests, round 18 (adv18): attacks on the three fixes of
// f29e841 and 1934bee (entry re-check of MinValidity in run, a Lead's
// release reserve after a ctx deadline, pcall publishes in release.lua and
// endhold.lua), against real redis-server processes and fault proxies.
// Run: go test ./runtime/lease -run 'TestAdversary18' -race -count=1 -v

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv18Obs records every event and runs pause (if set) on each event on
// the calling goroutine: a pause between the grant's check and fn's entry
// when it blocks on EventAcquired.
type adv18Obs struct {
	leasetest.Recorder
	pause atomic.Pointer[func(lease.Event)]
}

func (o *adv18Obs) Observe(e lease.Event) {
	o.Recorder.Observe(e)
	if f := o.pause.Load(); f != nil {
		(*f)(e)
	}
}

func (o *adv18Obs) set(f func(lease.Event)) { o.pause.Store(&f) }

// pauseOnce blocks the first EventAcquired (matching kept) for d.
func (o *adv18Obs) pauseOnce(d time.Duration, kept bool) {
	var armed atomic.Bool
	armed.Store(true)
	o.set(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Kept == kept && armed.CompareAndSwap(true, false) {
			time.Sleep(d)
		}
	})
}

func (o *adv18Obs) kinds(key string) []string {
	var ks []string
	for _, e := range o.Events() {
		if e.Key == key {
			ks = append(ks, e.Kind.String())
		}
	}
	return ks
}

func adv18Client(t *testing.T, rdb redis.UniversalClient, opts ...lease.Option) (*lease.Client, *adv18Obs) {
	t.Helper()
	obs := &adv18Obs{}
	c, err := lease.New(rdb, append([]lease.Option{lease.WithObserver(obs)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, obs
}

// lockState returns the lock's value and PTTL ("" when free).
func adv18Lock(rdb *redis.Client, key string) (string, time.Duration) {
	ctx := context.Background()
	v, err := rdb.Get(ctx, lockKey(key)).Result()
	if err != nil {
		return "", 0
	}
	return v, rdb.PTTL(ctx, lockKey(key)).Val()
}

// adv18Refusal runs try (one Do on the key it is given, after a pause
// meant to leave it short of MinValidity; it reports whether fn was
// entered) until a try was not pre-empted, and returns that try's key.
// After a pause longer than TTL/3 the lease's first renewal is due at
// once: on a loaded machine it may confirm the lease before the paused
// call looks, and the call then rightly enters. Such a try tests
// nothing: the next one does.
func adv18Refusal(t *testing.T, obs *adv18Obs, try func(key string) (entered bool)) string {
	t.Helper()
	for n := 0; n < 5; n++ {
		key := uniqueKey(t) + fmt.Sprint("-", n)
		if !try(key) || !slices.Contains(obs.kinds(key), "renewed") {
			return key
		}
		t.Logf("try %d: a renewal confirmed the lease before the entry check, and the call entered", n)
	}
	t.Fatal("every call entered: a renewal confirmed the lease before each entry check")
	return ""
}

// ---------------------------------------------------------------------
// Fix 1: fn is entered only with MinValidity left at entry.
// ---------------------------------------------------------------------

// A pause after the grant was read leaves part of the validity (less than
// MinValidity): fn is not entered, Do's error wraps ErrLowValidity (not
// ErrLost), EventLowValidity then EventDone are observed, and the key is
// free as soon as Do returns (released, not left for its TTL).
func TestAdversary18_RefusedEntryReleasesAtOnce(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	direct := shared.Client(t)
	c, obs := adv18Client(t, shared.Client(t))
	for _, tc := range []struct {
		name  string
		pause time.Duration
	}{{"partly-valid", 400 * time.Millisecond}, {"expired", 700 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			// After a 400ms pause the first renewal (at 200ms) is due at
			// once: see adv18Refusal.
			var (
				err      error
				entered  bool
				returned time.Time
			)
			key := adv18Refusal(t, obs, func(key string) bool {
				obs.pauseOnce(tc.pause, false)
				entered = false
				err = c.Do(context.Background(), key, lease.Spec{TTL: ttl, Deadline: 5 * time.Second, Fence: true}, func(context.Context) error {
					entered = true
					return nil
				})
				returned = time.Now()
				return entered
			})
			v, pttl := adv18Lock(direct, key)
			kinds := obs.kinds(key)
			t.Logf("Do = %v; events %v; lock after return %q (pttl %v)", err, kinds, v, pttl)
			if entered {
				t.Errorf("fn was entered after a %v pause with TTL %v, MinValidity %v", tc.pause, ttl, ttl/2)
			}
			mustIs(t, err, lease.ErrLowValidity)
			mustNotIs(t, err, lease.ErrLost)
			if v != "" {
				t.Errorf("the key still holds %q (PTTL %v) %v after Do returned ErrLowValidity: not released", v, pttl, time.Since(returned))
			}
			if n := len(kinds); n == 0 || kinds[n-1] != "done" {
				t.Errorf("events %v: want EventDone last", kinds)
			}
			low, lost := -1, -1
			for i, k := range kinds {
				switch k {
				case "low_validity":
					low = i
				case "lost":
					lost = i
				}
			}
			if low < 0 {
				t.Errorf("events %v: no EventLowValidity", kinds)
			}
			if lost >= 0 {
				// EventLost is documented as "lease ended while the
				// function ran"; fn never ran. Reported, not failed:
				// an observer-visible oddity only.
				t.Logf("NOTE: EventLost observed for a call whose fn was never entered: %v", kinds)
			}
		})
	}
}

// The same pause with another Client taking the key meanwhile: the paused
// call's release must not touch the new holder's lease, and its error is
// still ErrLowValidity.
func TestAdversary18_RefusedEntryAfterTakeoverLeavesNewHolder(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond
	direct := shared.Client(t)
	a, obsA := adv18Client(t, shared.Client(t))
	b, _ := adv18Client(t, shared.Client(t))
	key := uniqueKey(t)
	obsA.pauseOnce(ttl+400*time.Millisecond, false)
	errA := make(chan error, 1)
	go func() {
		errA <- a.Do(context.Background(), key, lease.Spec{TTL: ttl, Deadline: 5 * time.Second}, func(context.Context) error {
			t.Error("A's fn entered after its lease ran out")
			return nil
		})
	}()
	// A's grant made, then expired on the server (looked at, not slept
	// for from the goroutine's start, which a loaded machine delays): B
	// takes the key in the 400ms before A's paused call looks again.
	ctx := context.Background()
	if !waitFor(5*time.Second, func() bool { return direct.Exists(ctx, lockKey(key)).Val() == 1 }) {
		t.Fatal("A's grant not seen in 5s")
	}
	if !waitFor(5*time.Second, func() bool { return direct.Exists(ctx, lockKey(key)).Val() == 0 }) {
		t.Fatal("A's grant did not expire in 5s")
	}
	release := make(chan struct{})
	doneB := hold(t, b, key, lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second}, release)
	heldByB, _ := adv18Lock(direct, key)
	err := <-errA
	after, _ := adv18Lock(direct, key)
	close(release)
	if e := <-doneB; e != nil {
		t.Errorf("B's Do = %v", e)
	}
	mustIs(t, err, lease.ErrLowValidity)
	mustNotIs(t, err, lease.ErrLost)
	if after != heldByB {
		t.Errorf("B held %q; after A's refused call returned the key holds %q", heldByB, after)
	}
	t.Logf("A: %v; A's events %v", err, obsA.kinds(key))
}

// HoldMin and the not-entered path. A call refused at entry did no work;
// the acquire-time refusal (a late reply: releaseUnused, hold 0) frees the
// key at once. The entry-time refusal releases with the call's hold
// (run.go: l.holdTo before the check), so the key stays held by nobody's
// work for up to HoldMin, far longer than the TTL "partly left".
//
// Defect found by round 18: FAILS on 5521777 (the fixes under review):
// the key is left "~"-held for about HoldMin after an entry-time refusal
// (observed: PTTL 3.59s of HoldMin 4s, TTL 600ms), while the same grant
// refused at acquire time is freed at once. Passes since 7b4cbc6 (run.go:
// a call not entered releases with only an earlier call's hold).
func TestAdversary18_RefusedEntryHoldMinHoldsKey(t *testing.T) {
	const ttl = 600 * time.Millisecond
	const holdMin = 4 * time.Second
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	s := lease.Spec{TTL: ttl, Deadline: 10 * time.Second, HoldMin: holdMin}

	// (1) Entry-time refusal: a pause after the grant was read. The
	// lease's renewals start before the entry check: on a loaded machine
	// one may confirm the lease (600ms more) before the paused call
	// looks, and the call then rightly enters. Such a try tests nothing
	// here: the next one does.
	c, obs := adv18Client(t, srv.Client(t))
	var key1 string
	var err1 error
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("every call entered: a renewal confirmed the lease before each entry check")
		}
		key1 = fmt.Sprint("adv18-hold-entry-", try)
		obs.pauseOnce(400*time.Millisecond, false)
		entered := false
		err1 = c.Do(context.Background(), key1, s, func(context.Context) error { entered = true; return nil })
		if !entered {
			break
		}
		t.Logf("try %d: a renewal confirmed the lease before the entry check, and the call entered", try)
	}
	v1, p1 := adv18Lock(direct, key1)

	// (2) Acquire-time refusal: the grant's reply is read late (the same
	// lost validity, seen when the reply is read).
	p := leasetest.StartProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MinIdleConns: 3})
	t.Cleanup(func() { prdb.Close() })
	c2, _ := adv18Client(t, prdb)
	key2 := "adv18-hold-acquire"
	_ = c2.Do(context.Background(), "adv18-warm", lease.Spec{TTL: ttl, Deadline: time.Second}, func(context.Context) error { return nil })
	p.SetDelay(400 * time.Millisecond)
	p.Set(leasetest.Delay)
	err2 := c2.Do(context.Background(), key2, s, func(context.Context) error { t.Error("entered"); return nil })
	p.Set(leasetest.Pass)
	time.Sleep(50 * time.Millisecond) // the release's request reached the server
	v2, p2 := adv18Lock(direct, key2)

	t.Logf("entry-time refusal: %v; lock %q PTTL %v", err1, v1, p1)
	t.Logf("acquire-time refusal: %v; lock %q PTTL %v", err2, v2, p2)
	mustIs(t, err1, lease.ErrLowValidity)
	mustIs(t, err2, lease.ErrLowValidity)
	if v1 != "" {
		// Failed on 5521777: see the comment above.
		t.Errorf("DEFECT: a call refused at entry (fn never ran) left the key held %q for %v more (HoldMin %v, TTL %v); the same refusal at acquire time leaves it %q",
			v1, p1, holdMin, ttl, v2)
	}
}

// A kept lease (Spec.Keep) whose renewals stop answering while the next
// call is paused between taking it and entering: fn is not entered, the
// error wraps ErrLowValidity, the lease is released (not kept again), and
// the next call acquires afresh (a new token).
func TestAdversary18_RefusedEntryKeptLease(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	p := leasetest.StartProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { prdb.Close() })
	c, obs := adv18Client(t, prdb)
	key := "adv18-kept"
	s := lease.Spec{TTL: ttl, Deadline: 10 * time.Second, Keep: 10 * time.Second, Fence: true}
	var l *lease.Lease
	var tok1 lease.Token
	if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		l, _ = lease.FromContext(ctx)
		tok1, _ = lease.TokenFrom(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the keep settles
	var armed atomic.Bool
	armed.Store(true)
	obs.set(func(e lease.Event) {
		if e.Kind != lease.EventAcquired || !e.Kept || !armed.CompareAndSwap(true, false) {
			return
		}
		p.Set(leasetest.Blackhole) // renewals get no answer
		for l.Remaining() > ttl/2-150*time.Millisecond {
			time.Sleep(5 * time.Millisecond)
		}
		p.Set(leasetest.Pass)
	})
	entered := false
	err := c.Do(context.Background(), key, s, func(context.Context) error { entered = true; return nil })
	obs.set(func(lease.Event) {})
	v, pttl := adv18Lock(direct, key)
	t.Logf("kept reuse: Do = %v; lock after %q (PTTL %v); events %v", err, v, pttl, obs.kinds(key))
	if entered {
		t.Error("fn entered on a kept lease with less than MinValidity left")
	}
	mustIs(t, err, lease.ErrLowValidity)
	mustNotIs(t, err, lease.ErrLost)
	if v != "" {
		t.Errorf("kept lease refused at entry: key still holds %q (PTTL %v)", v, pttl)
	}
	var tok2 lease.Token
	var kept bool
	n := len(obs.Events())
	if err := c.Do(context.Background(), key, lease.Spec{TTL: ttl, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		tok2, _ = lease.TokenFrom(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, e := range obs.Events()[n:] {
		if e.Kind == lease.EventAcquired && e.Kept {
			kept = true
		}
	}
	if kept || tok2 == tok1 {
		t.Errorf("next call reused the refused kept lease (kept %v, token %d then %d)", kept, tok1, tok2)
	}
}

// Lead: a campaign whose grant is refused at entry re-campaigns; the term
// that runs has MinValidity left at entry; the refused grant was released
// (EventReleased between the refusal and the term).
func TestAdversary18_LeadRecampaignsAfterRefusal(t *testing.T) {
	const ttl = 500 * time.Millisecond
	c, obs := adv18Client(t, shared.Client(t))
	type entry struct {
		left time.Duration
		err  error
	}
	// After the 300ms pause the grant's first renewal is due at once: on
	// a loaded machine it may confirm the lease before the paused
	// campaign looks, and the term then rightly starts on that grant.
	// Such a try tests nothing: the next one (a new key) does.
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("every term started on its first grant: a renewal confirmed it before each entry check")
		}
		key := uniqueKey(t) + fmt.Sprint("-", try)
		obs.pauseOnce(300*time.Millisecond, false)
		in := make(chan entry, 4)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: "A", Backoff: 20 * time.Millisecond}, func(ctx context.Context) error {
				l, _ := lease.FromContext(ctx)
				in <- entry{l.Remaining(), ctx.Err()}
				<-ctx.Done()
				return nil
			})
		}()
		var e entry
		select {
		case e = <-in:
		case <-time.After(3 * time.Second):
			t.Fatal("no term after the refusal")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Lead = %v", err)
		}
		kinds := obs.kinds(key)
		t.Logf("term entered with %v left (ctx %v); events %v", e.left, e.err, kinds)
		if e.left < ttl/2-10*time.Millisecond || e.err != nil {
			t.Errorf("term entered with %v left (MinValidity %v), ctx %v", e.left, ttl/2, e.err)
		}
		s := strings.Join(kinds, ",")
		if !strings.Contains(s, "low_validity") && strings.HasPrefix(s, "acquired,renewed") {
			t.Logf("try %d: a renewal confirmed the first grant before the entry check", try)
			continue
		}
		if !strings.Contains(s, "low_validity,released,done,acquired") {
			t.Errorf("events %v: want the refused grant released and done before the next term", kinds)
		}
		return
	}
}

// An Observer that panics on EventLowValidity (the refusal's own event):
// the panic reaches the caller, and the grant is still released.
func TestAdversary18_RefusedEntryObserverPanics(t *testing.T) {
	const ttl = 500 * time.Millisecond
	direct := shared.Client(t)
	c, obs := adv18Client(t, shared.Client(t))
	// After the 300ms pause the first renewal (at 167ms) is due at once:
	// see adv18Refusal.
	var r any
	key := adv18Refusal(t, obs, func(key string) bool {
		var armed atomic.Bool
		armed.Store(true)
		obs.set(func(e lease.Event) {
			switch {
			case e.Kind == lease.EventAcquired && armed.Load():
				time.Sleep(300 * time.Millisecond)
			case e.Kind == lease.EventLowValidity && armed.CompareAndSwap(true, false):
				panic("adv18 observer")
			}
		})
		entered := false
		r = nil
		func() {
			defer func() { r = recover() }()
			_ = c.Do(context.Background(), key, lease.Spec{TTL: ttl, Deadline: 5 * time.Second}, func(context.Context) error { entered = true; return nil })
		}()
		return entered
	})
	v, pttl := adv18Lock(direct, key)
	t.Logf("recovered %v; lock %q; events %v", r, v, obs.kinds(key))
	if r != "adv18 observer" {
		t.Errorf("recovered %v, want the observer's panic", r)
	}
	if v != "" {
		t.Errorf("after the observer panicked on the refusal, the key holds %q (PTTL %v)", v, pttl)
	}
}

// Many calls on a few keys with random pauses between the grant and
// entry (including grants on a release's notice) and GC pressure: no fn
// is entered with less than MinValidity left (beyond a scheduling
// tolerance), no two fns of a key overlap, every not-entered call returns
// ErrLowValidity (or ErrBusy), nothing is left on the keys or leaked.
func TestAdversary18_EntryCheckStress(t *testing.T) {
	const ttl = 300 * time.Millisecond
	const minV = 150 * time.Millisecond
	direct := shared.Client(t)
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	obs := &adv18Obs{}
	c, err := lease.New(rdb, lease.WithObserver(obs), lease.WithRecheck(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	obs.set(func(e lease.Event) {
		if e.Kind != lease.EventAcquired {
			return
		}
		mu.Lock()
		d := time.Duration(rng.Int63n(int64(ttl)))
		skip := rng.Intn(3) == 0
		mu.Unlock()
		if !skip {
			time.Sleep(d)
		}
	})
	stopGC := make(chan struct{})
	go func() {
		junk := make([][]byte, 0, 64)
		for {
			select {
			case <-stopGC:
				return
			default:
			}
			junk = append(junk, make([]byte, 1<<20))
			if len(junk) == 64 {
				junk = junk[:0]
			}
			time.Sleep(time.Millisecond)
		}
	}()
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	inFn := make([]atomic.Int32, len(keys))
	var entered, refused, busy, other atomic.Int32
	var lowest atomic.Int64
	lowest.Store(int64(time.Hour))
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % len(keys)
			err := c.Do(context.Background(), keys[k], lease.Spec{TTL: ttl, MinValidity: minV, Deadline: 4 * time.Second, Wait: 3 * time.Second, Fence: true}, func(ctx context.Context) error {
				l, _ := lease.FromContext(ctx)
				left := l.Remaining()
				for {
					old := lowest.Load()
					if int64(left) >= old || lowest.CompareAndSwap(old, int64(left)) {
						break
					}
				}
				if n := inFn[k].Add(1); n > 1 {
					t.Errorf("key %d: %d fns at once", k, n)
				}
				entered.Add(1)
				time.Sleep(10 * time.Millisecond)
				inFn[k].Add(-1)
				return nil
			})
			switch {
			case err == nil:
			case errors.Is(err, lease.ErrLowValidity) && !errors.Is(err, lease.ErrLost):
				refused.Add(1)
			case errors.Is(err, lease.ErrBusy):
				busy.Add(1)
			default:
				other.Add(1)
				t.Errorf("Do = %v", err)
			}
		}()
	}
	wg.Wait()
	close(stopGC)
	t.Logf("entered %d, refused %d, busy %d, other %d; lowest validity at entry %v (MinValidity %v)",
		entered.Load(), refused.Load(), busy.Load(), other.Load(), time.Duration(lowest.Load()), minV)
	if low := time.Duration(lowest.Load()); entered.Load() > 0 && low < minV-20*time.Millisecond {
		t.Errorf("a fn was entered with %v left, MinValidity %v", low, minV)
	}
	for _, k := range keys {
		if v, pttl := adv18Lock(direct, k); v != "" {
			t.Errorf("key %s still holds %q (PTTL %v) after every call returned", k, v, pttl)
		}
	}
	c.Close()
	rdb.Close()
	time.Sleep(50 * time.Millisecond)
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left: %v", err)
	}
}

// Nested calls are unaffected: a nested Do reuses the outer lease (same
// token) with enough validity, and is refused with ErrLowValidity (outer
// lease intact) when the nested MinValidity exceeds what is left.
func TestAdversary18_NestedUnaffected(t *testing.T) {
	c, obs := adv18Client(t, shared.Client(t))
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		outer, _ := lease.TokenFrom(ctx)
		time.Sleep(100 * time.Millisecond)
		var inner lease.Token
		if err := c.Do(ctx, key, lease.Spec{TTL: 3 * time.Second, Deadline: time.Second, MinValidity: 100 * time.Millisecond, Fence: true}, func(ctx context.Context) error {
			inner, _ = lease.TokenFrom(ctx)
			return nil
		}); err != nil || inner != outer {
			return fmt.Errorf("nested: %v, token %d vs %d", err, inner, outer)
		}
		err := c.Do(ctx, key, lease.Spec{TTL: 3 * time.Second, Deadline: 3 * time.Second, MinValidity: 2900 * time.Millisecond, Fence: true}, func(context.Context) error {
			return errors.New("entered")
		})
		if !errors.Is(err, lease.ErrLowValidity) {
			return fmt.Errorf("nested with MinValidity above what is left: %v", err)
		}
		return ctx.Err()
	})
	if err != nil {
		t.Errorf("Do = %v; events %v", err, obs.kinds(key))
	}
}

// ---------------------------------------------------------------------
// Fix 2: a Lead ended by a ctx deadline releases with the release timeout.
// ---------------------------------------------------------------------

// adv18Proxied is a lease Client whose connections go through a fault
// proxy, with connections and scripts warmed up, so that a fault set later
// hits the commands, not the dial.
func adv18Proxied(t *testing.T, srv *leasetest.Server, opts ...lease.Option) (*lease.Client, *adv18Obs, *leasetest.Proxy, *redis.Client) {
	t.Helper()
	p := leasetest.StartProxy(t, srv.Addr())
	// Protocol 2 without CLIENT SETINFO: a new connection sends nothing
	// before its first command, so a delay on replies does not stall it.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { rdb.Close() })
	c, obs := adv18Client(t, rdb, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_ = c.Lead(ctx, "adv18-warm", lease.LeadSpec{TTL: time.Second, Owner: "warm"}, func(ctx context.Context) error { <-ctx.Done(); return nil })
	cancel()
	_ = c.Do(context.Background(), "adv18-warm", lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil })
	time.Sleep(50 * time.Millisecond)
	return c, obs, p, rdb
}

// The grant's reply is delayed past ctx's deadline: the request ran, the
// grant is on the server, the reply is cut by the deadline. The grant must
// be released within the release timeout of the deadline (the release's
// request goes through at once, its reply is late), and Lead must return
// within about the release timeout after the deadline. Neither bound counts
// the time the process did not run after the deadline (on two busy cores
// under -race, Lead was seen returning 484ms after it).
func TestAdversary18_LeadDeadlineCutsGrantReply(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	c, obs, p, _ := adv18Proxied(t, srv)
	const relTimeout = lease.DefaultReleaseTimeout
	p.SetDelay(120 * time.Millisecond)
	defer p.Set(leasetest.Pass)
	var worst, worstReturn, stalled time.Duration
	granted := 0
	for i := range 6 {
		// Let the pool replace the connections the cut replies closed
		// (a new connection's handshake is delayed too).
		p.Set(leasetest.Pass)
		time.Sleep(300 * time.Millisecond)
		p.Set(leasetest.Delay)
		key := fmt.Sprintf("adv18-cut-%d", i)
		dl := time.Duration(30+10*i) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), dl)
		deadline, _ := ctx.Deadline()
		// Sample the key on a direct connection until it is gone.
		sampled := make(chan [2]time.Time, 1)
		leadDone := make(chan struct{})
		go func() {
			var seen, gone time.Time
			var end time.Time
			for ; end.IsZero() || time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				select {
				case <-leadDone:
					if end.IsZero() {
						end = time.Now().Add(600 * time.Millisecond)
					}
				default:
				}
				v, _ := adv18Lock(direct, key)
				if v != "" && seen.IsZero() {
					seen = time.Now()
				}
				if v == "" && !seen.IsZero() {
					gone = time.Now()
					break
				}
			}
			sampled <- [2]time.Time{seen, gone}
		}()
		err := c.Lead(ctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: "A"}, func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		})
		returned := time.Now()
		close(leadDone)
		cancel()
		if err != nil {
			t.Errorf("Lead = %v", err)
		}
		s := <-sampled
		for _, e := range obs.Events() {
			if e.Key == key && e.Err != nil {
				t.Logf("%s: %s %v", key, e.Kind, e.Err)
			}
		}
		lost := st.lost(deadline, returned)
		stalled = max(stalled, lost)
		if d := returned.Sub(deadline) - lost; d > worstReturn {
			worstReturn = d
		}
		if s[0].IsZero() {
			continue
		}
		granted++
		if s[1].IsZero() {
			v, pttl := adv18Lock(direct, key)
			t.Errorf("key %s: the grant stayed on the server (%q, PTTL %v) 600ms after Lead returned", key, v, pttl)
			continue
		}
		if d := s[1].Sub(deadline) - st.lost(deadline, s[1]); d > worst {
			worst = d
		}
	}
	t.Logf("%d of 6 grants reached the server; latest release %v after the deadline; latest Lead return %v after it (not counting the time the process was stalled, at most %v); acquire_unknown %d, release_unconfirmed %d",
		granted, worst, worstReturn, stalled, obs.Count(lease.EventAcquireUnknown), obs.Count(lease.EventReleaseUnconfirmed))
	if granted == 0 {
		t.Log("no grant reached the server: the attack did not bite")
	}
	if worst > relTimeout+50*time.Millisecond {
		t.Errorf("a cut grant was released %v after ctx's deadline, not counting stalls of the process (release timeout %v)", worst, relTimeout)
	}
	if worstReturn > relTimeout+150*time.Millisecond {
		t.Errorf("Lead returned %v after ctx's deadline, not counting stalls of the process (release timeout %v)", worstReturn, relTimeout)
	}
}

// A leader whose replies stop coming (blackhole) when ctx's deadline ends
// its term: Lead returns within the release timeout (+ slack) of the
// deadline, with the default and a longer release timeout; the release's
// request reached the server (the key is free); no goroutine is left.
func TestAdversary18_LeadDeadlineBlackholeBounded(t *testing.T) {
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	for _, rt := range []time.Duration{lease.DefaultReleaseTimeout, 700 * time.Millisecond} {
		t.Run(rt.String(), func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			p := leasetest.StartProxy(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			c, err := lease.New(rdb, lease.WithReleaseTimeout(rt))
			if err != nil {
				t.Fatal(err)
			}
			key := "adv18-bh-" + rt.String()
			// Load the scripts (a release's EVALSHA answered NOSCRIPT
			// under a blackhole never gets to its EVAL: an artefact).
			if err := c.Do(context.Background(), "adv18-warm", lease.Spec{TTL: time.Second, Deadline: time.Second, Fence: true}, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			deadline, _ := ctx.Deadline()
			in := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() {
				done <- c.Lead(ctx, key, lease.LeadSpec{TTL: 3 * time.Second, Owner: "A"}, func(ctx context.Context) error {
					in <- struct{}{}
					<-ctx.Done()
					return nil
				})
			}()
			select {
			case <-in:
			case <-time.After(2 * time.Second):
				t.Fatal("no term")
			}
			p.Set(leasetest.Blackhole)
			var ret time.Duration
			select {
			case err := <-done:
				ret = time.Since(deadline)
				if err != nil {
					t.Errorf("Lead = %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Lead did not return 5s after ctx's deadline")
			}
			time.Sleep(20 * time.Millisecond)
			v, pttl := adv18Lock(direct, key)
			t.Logf("release timeout %v: Lead returned %v after the deadline; lock %q (PTTL %v)", rt, ret, v, pttl)
			if ret > rt+150*time.Millisecond {
				t.Errorf("Lead returned %v after ctx's deadline, release timeout %v", ret, rt)
			}
			if v != "" {
				t.Errorf("the term's lease was left on the server: %q PTTL %v", v, pttl)
			}
			p.Set(leasetest.Pass)
			c.Close()
			rdb.Close()
			p.Close()
			time.Sleep(50 * time.Millisecond)
			if err := goleak.Find(ignore); err != nil {
				t.Errorf("goroutines left: %v", err)
			}
		})
	}
}

// A term ended by ctx's deadline hands over at once to a waiting
// candidate (not after the TTL), and a campaign waiting behind a holder
// ends when its ctx's deadline comes (its queue entry removed).
func TestAdversary18_LeadDeadlineHandoverAndWait(t *testing.T) {
	const ttl = 5 * time.Second
	a, _ := adv18Client(t, shared.Client(t), lease.WithRecheck(2*time.Second))
	b, _ := adv18Client(t, shared.Client(t), lease.WithRecheck(2*time.Second))
	key := uniqueKey(t)
	ctxA, cancelA := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelA()
	deadline, _ := ctxA.Deadline()
	inA := make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		doneA <- a.Lead(ctxA, key, lease.LeadSpec{TTL: ttl, Owner: "A"}, func(ctx context.Context) error {
			close(inA)
			<-ctx.Done()
			return nil
		})
	}()
	<-inA
	st := watchStalls(t, 5*time.Millisecond)
	ctxB, cancelB := context.WithCancel(context.Background())
	inB := make(chan time.Time, 1)
	doneB := make(chan error, 1)
	go func() {
		doneB <- b.Lead(ctxB, key, lease.LeadSpec{TTL: ttl, Owner: "B"}, func(ctx context.Context) error {
			inB <- time.Now()
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case at := <-inB:
		if d, lost := at.Sub(deadline), st.lost(deadline, at); d-lost > 150*time.Millisecond {
			t.Errorf("B led %v after A's deadline ended its term (the process stalled for %v of it; want a handover at once)", d, lost)
		}
		t.Logf("B led %v after A's deadline", at.Sub(deadline).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("B never led")
	}
	if err := <-doneA; err != nil {
		t.Errorf("A's Lead = %v", err)
	}
	// Now a campaign (C) waits behind B with a deadline.
	cc, _ := adv18Client(t, shared.Client(t), lease.WithRecheck(2*time.Second))
	ctxC, cancelC := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancelC()
	dlC, _ := ctxC.Deadline()
	go func() {
		time.Sleep(100 * time.Millisecond)
		info, _ := cc.Inspect(context.Background(), key)
		t.Logf("while C waits: %d waiters", len(info.Waiters))
	}()
	err := cc.Lead(ctxC, key, lease.LeadSpec{TTL: ttl, Owner: "C"}, func(ctx context.Context) error {
		t.Error("C led while B leads")
		return nil
	})
	ret := time.Since(dlC)
	info, _ := cc.Inspect(context.Background(), key)
	t.Logf("C's Lead = %v, returned %v after its deadline; waiters after: %d", err, ret.Round(time.Millisecond), len(info.Waiters))
	if err != nil || ret > lease.DefaultReleaseTimeout+100*time.Millisecond {
		t.Errorf("C's Lead = %v, returned %v after its deadline", err, ret)
	}
	if len(info.Waiters) != 0 {
		t.Errorf("C's queue entry left behind: %+v", info.Waiters)
	}
	cancelB()
	<-doneB
}

// ---------------------------------------------------------------------
// Fix 3: pcall publishes (release.lua, endhold.lua).
// ---------------------------------------------------------------------

// A holder whose user may not publish on any channel releases itself:
// with a waiter (handover, the note refused), with a hold-min (the "h"
// refused), and an operator of the same kind ends the hold (endhold's "x"
// refused): every call reports what happened (nil, EventReleased, no
// EventReleaseUnconfirmed), and the waiter gets the lease at its next
// re-check.
func TestAdversary18_NoChannelACLHolderRelease(t *testing.T) {
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	nochan := srv.ACLUser(t, "nochan", "pw", "~*", "+@all") // reset: no channels at all
	h, obsH := adv18Client(t, nochan)
	w, _ := adv18Client(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	key := "adv18-acl"
	release := make(chan struct{})
	doneH := hold(t, h, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Fence: true}, release)
	inW := make(chan time.Time, 1)
	doneW := make(chan error, 1)
	go func() {
		doneW <- w.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Wait: 10 * time.Second, Fence: true}, func(context.Context) error {
			inW <- time.Now()
			return nil
		})
	}()
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, _ := w.Inspect(context.Background(), key)
		if len(info.Waiters) > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("waiter never queued")
		}
	}
	at := time.Now()
	close(release)
	if err := <-doneH; err != nil {
		t.Errorf("holder (no channels) Do = %v, want nil: the handover happened", err)
	}
	select {
	case in := <-inW:
		t.Logf("waiter entered %v after the holder's release", in.Sub(at).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Error("waiter never entered after the holder's release")
	}
	<-doneW
	// Hold-min release by the same holder.
	key2 := "adv18-acl-hold"
	if err := h.Do(context.Background(), key2, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, HoldMin: 20 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("holder (no channels) Do with HoldMin = %v, want nil", err)
	}
	v, pttl := adv18Lock(direct, key2)
	if !strings.HasPrefix(v, "~") {
		t.Errorf("hold-min not set: %q", v)
	}
	// An operator without channels ends the hold.
	op, _ := adv18Client(t, nochan)
	info, err := op.Inspect(context.Background(), key2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := op.ForceRelease(context.Background(), key2, info.Holder)
	v2, _ := adv18Lock(direct, key2)
	t.Logf("hold %q (PTTL %v); ForceRelease by no-channel operator = %v, %v; lock after %q", v, pttl, res, err, v2)
	if err != nil || res != lease.ForceHoldEnded || v2 != "" {
		t.Errorf("ForceRelease of a hold by a no-channel operator = %v, %v (lock after %q), want ForceHoldEnded", res, err, v2)
	}
	if n := obsH.Count(lease.EventReleaseUnconfirmed); n > 0 {
		t.Errorf("holder reported %d unconfirmed releases: %v", n, obsH.kinds(key))
	}
}

// With ordinary ACLs nothing changed: a handover's note reaches the key's
// channel and the waiter enters at once (not at its re-check); a hold's
// "h" and endhold's "x" are published on the key's channel.
func TestAdversary18_NormalACLPublishesUnchanged(t *testing.T) {
	srv := leasetest.StartRedis(t)
	h, _ := adv18Client(t, srv.Client(t))
	w, _ := adv18Client(t, srv.Client(t), lease.WithRecheck(5*time.Second))
	key := "adv18-pub"
	sub := srv.Client(t).Subscribe(context.Background(), "lease:{"+key+"}:c")
	defer sub.Close()
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	msgs := sub.Channel()
	release := make(chan struct{})
	doneH := hold(t, h, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Fence: true}, release)
	inW := make(chan time.Time, 1)
	doneW := make(chan error, 1)
	go func() {
		doneW <- w.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Wait: 10 * time.Second, Fence: true}, func(context.Context) error {
			inW <- time.Now()
			return nil
		})
	}()
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, _ := w.Inspect(context.Background(), key)
		if len(info.Waiters) > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("waiter never queued")
		}
	}
	st := watchStalls(t, 5*time.Millisecond)
	at := time.Now()
	close(release)
	<-doneH
	select {
	case in := <-inW:
		if d, lost := in.Sub(at), st.lost(at, in); d-lost > 200*time.Millisecond {
			t.Errorf("waiter entered %v after the release (the process stalled for %v of it; re-check 5s): not told at once", d, lost)
		}
	case <-time.After(3 * time.Second):
		t.Error("waiter never entered")
	}
	<-doneW
	got := func(want func(string) bool, what string) {
		t.Helper()
		for end := time.After(time.Second); ; {
			select {
			case m := <-msgs:
				if want(m.Payload) {
					return
				}
			case <-end:
				t.Errorf("no %s on the key's channel", what)
				return
			}
		}
	}
	got(func(p string) bool { return strings.Count(p, "|") == 3 }, "handover note (id|seq|tok|px)")
	if err := h.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, HoldMin: 20 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got(func(p string) bool { return p == "h" }, `hold "h"`)
	info, _ := h.Inspect(context.Background(), key)
	if res, err := h.ForceRelease(context.Background(), key, info.Holder); err != nil || res != lease.ForceHoldEnded {
		t.Errorf("ForceRelease = %v, %v", res, err)
	}
	got(func(p string) bool { return p == "x" }, `endhold "x"`)
}
