package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 36: an adversary on 4658e87 (a call with Spec.Keep is made without
// its grantPart, which it allocates if it acquires after all; one clock
// read shared by the entry check and a.entered, and by a keep's end and
// its renewals' end).

// probe36 is what a function sees of its lease, and what Redis says.
type probe36 struct {
	has, ok   bool // CallHasGrantPart
	token     lease.Token
	owner     string
	remaining time.Duration
	value     string // the lock key's value, read in fn
	holds     bool   // the lock key holds exactly this grant (owner:token)
}

func (p probe36) String() string {
	return fmt.Sprintf("{part %v ok %v token %d remaining %v holds %v value %q owner %q}", p.has, p.ok, p.token, p.remaining.Round(time.Millisecond), p.holds, p.value, p.owner)
}

func probe36At(ctx context.Context, rdb redis.UniversalClient, key string) probe36 {
	var p probe36
	p.has, p.ok = lease.CallHasGrantPart(ctx)
	l, _ := lease.FromContext(ctx)
	if l == nil {
		return p
	}
	p.token, p.owner, p.remaining = l.Token(), l.Owner(), l.Remaining()
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.value, _ = rdb.Get(rctx, lockKey(key)).Result()
	p.holds = p.remaining > 0 && p.value == fmt.Sprintf("%s:%d", p.owner, p.token)
	return p
}

// do36 runs one call and returns what its function saw.
func do36(t *testing.T, c *lease.Client, rdb redis.UniversalClient, ctx context.Context, key string, s lease.Spec, inner func(ctx context.Context) error) (probe36, error) {
	t.Helper()
	var p probe36
	err := c.Do(ctx, key, s, func(ctx context.Context) error {
		p = probe36At(ctx, rdb, key)
		if inner != nil {
			return inner(ctx)
		}
		return nil
	})
	return p, err
}

func want36(t *testing.T, what string, p probe36, err error, part bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !p.ok || !p.holds {
		t.Fatalf("%s: the function ran without a lease the key holds: %v", what, p)
	}
	if p.has != part {
		t.Fatalf("%s: grant part %v, want %v (%v)", what, p.has, part, p)
	}
}

func waitGone36(t *testing.T, rdb redis.UniversalClient, key string, within time.Duration) {
	t.Helper()
	until := time.Now().Add(within)
	for {
		n, err := rdb.Exists(context.Background(), lockKey(key)).Result()
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(until) {
			v, _ := rdb.Get(context.Background(), lockKey(key)).Result()
			t.Fatalf("key %q still held after %v (%q)", key, within, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every way a Keep call can end up acquiring: the first call of an
// episode, a kept lease that does not suit the call (another TTL, no
// fencing, too little validity left), one released from outside
// (ForceRelease: found by the notice's check or by verifyKept), one deleted
// from outside silently (found by a renewal), a call on another key. Each
// such call allocates its grant part and holds a real lease (the lock key
// holds its owner and token); each call that takes the kept lease has no
// grant part, the same token, and holds the key too.
func TestAdversary36_LightCallAcquiresOnEveryPath(t *testing.T) {
	rdb := shared.Client(t)
	c, rec := newClient(t, rdb)
	ctx := context.Background()
	key := uniqueKey(t)
	s := keptSpec(3 * time.Second) // TTL 1s, fenced
	defer func() {
		// A kept call's EventAcquired.Wait (a.sent − a.start): never
		// negative, never more than a call took.
		keptEvents := 0
		for _, e := range rec.Events() {
			if e.Kind == lease.EventAcquired && e.Kept {
				keptEvents++
				if e.Wait < 0 || e.Wait > 500*time.Millisecond || e.Wait > e.At.Sub(e.Start) {
					t.Errorf("kept EventAcquired with Wait %v (start %v, at %v)", e.Wait, e.Start, e.At)
				}
			}
		}
		if keptEvents == 0 {
			t.Error("no kept EventAcquired")
		}
	}()

	p1, err := do36(t, c, rdb, ctx, key, s, nil)
	want36(t, "first call", p1, err, true)
	time.Sleep(50 * time.Millisecond)
	for i := range 3 {
		p, err := do36(t, c, rdb, ctx, key, s, nil)
		want36(t, fmt.Sprintf("kept call %d", i), p, err, false)
		if p.token != p1.token || p.owner != p1.owner {
			t.Fatalf("kept call %d: %v, want the first call's lease %v", i, p, p1)
		}
	}

	// Another TTL: the kept lease is released, the call acquires afresh.
	s2 := s
	s2.TTL = 1200 * time.Millisecond
	p2, err := do36(t, c, rdb, ctx, key, s2, nil)
	want36(t, "a call with another TTL", p2, err, true)
	if p2.token <= p1.token {
		t.Fatalf("the fresh grant's token %d is not above the kept one's %d", p2.token, p1.token)
	}
	p, err := do36(t, c, rdb, ctx, key, s2, nil)
	want36(t, "kept after the TTL change", p, err, false)
	if p.token != p2.token {
		t.Fatalf("token %d, want %d", p.token, p2.token)
	}

	// Kept unfenced, then a fenced call: acquires afresh.
	su := s2
	su.Fence = false
	key2 := key + ":unfenced"
	pu, err := do36(t, c, rdb, ctx, key2, su, nil)
	want36(t, "unfenced first call", pu, err, true)
	pf, err := do36(t, c, rdb, ctx, key2, s2, nil)
	want36(t, "a fenced call on an unfenced kept lease", pf, err, true)
	if pf.owner == pu.owner || pf.token == 0 {
		t.Fatalf("the fenced call took the unfenced lease: %v after %v", pf, pu)
	}

	// Too little validity left for the call's MinValidity: acquires afresh.
	sm := s2
	sm.MinValidity = 1150 * time.Millisecond
	time.Sleep(150 * time.Millisecond) // the kept lease's remaining falls below 1150ms
	pm, err := do36(t, c, rdb, ctx, key, sm, nil)
	if errors.Is(err, lease.ErrLowValidity) {
		t.Logf("fresh grant too late for MinValidity 1150ms of 1200ms (a slow reply): %v", err)
	} else {
		want36(t, "a call needing more validity than the kept lease has", pm, err, true)
		if pm.remaining < 1100*time.Millisecond {
			t.Fatalf("entered with %v left, MinValidity 1150ms", pm.remaining)
		}
	}

	// ForceRelease from outside while kept: the next call acquires afresh.
	p3, err := do36(t, c, rdb, ctx, key, s2, nil)
	if err != nil {
		t.Fatal(err)
	}
	p3b, err := do36(t, c, rdb, ctx, key, s2, nil)
	want36(t, "kept before ForceRelease", p3b, err, false)
	if p3b.owner != p3.owner {
		t.Fatalf("%v, want the kept %v", p3b, p3)
	}
	op, _ := newClient(t, rdb)
	if _, err := op.ForceRelease(ctx, key, p3b.owner); err != nil {
		t.Fatal(err)
	}
	p4, err := do36(t, c, rdb, ctx, key, s2, nil)
	if err != nil && !errors.Is(err, lease.ErrLost) {
		t.Fatalf("right after ForceRelease: %v", err)
	}
	if err != nil || p4.owner == p3b.owner {
		// Allowed by Spec.Keep's documentation (the notice may be on its
		// way): try again.
		t.Logf("the call right after ForceRelease ran on the released lease: %v, %v", p4, err)
		time.Sleep(100 * time.Millisecond)
		p4, err = do36(t, c, rdb, ctx, key, s2, nil)
	}
	want36(t, "after ForceRelease", p4, err, true)
	if p4.owner == p3b.owner {
		t.Fatalf("the released lease was taken again: %v", p4)
	}

	// Deleted from outside silently: the renewal finds it (TTL/3 = 400ms).
	if err := rdb.Del(ctx, lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	p5, err := do36(t, c, rdb, ctx, key, s2, nil)
	want36(t, "after a silent delete and a renewal", p5, err, true)
	if p5.owner == p4.owner {
		t.Fatalf("the deleted lease was taken again: %v", p5)
	}

	// Another key while one is kept.
	p6, err := do36(t, c, rdb, ctx, key+":other", s2, nil)
	want36(t, "a call on another key", p6, err, true)
	p7, err := do36(t, c, rdb, ctx, key, s2, nil)
	want36(t, "the first key's kept lease", p7, err, false)
	if p7.owner != p5.owner {
		t.Fatalf("%v, want the kept %v", p7, p5)
	}
}

// blockErrCtx wraps a context; once armed, its first Err call blocks until
// release is closed (a goroutine descheduled at that point of Do: after
// Do found the enclosing lease reusable, before reenter looks again).
type blockErrCtx struct {
	context.Context
	armed   atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

func (c *blockErrCtx) Err() error {
	if c.armed.CompareAndSwap(true, false) {
		close(c.blocked)
		<-c.release
	}
	return c.Context.Err()
}

// A nested Keep call on the same key that found the outer lease reusable,
// but whose enclosing call returned (and kept its lease) before reenter
// looked again: reenter answers errNotReusable, and the call goes on as a
// call of its own. With the outer spec it takes the kept lease (no grant
// part, the same lease); with another TTL the kept lease is released and
// it acquires (grant part allocated, a real lease). On fn's own context
// the nested call may instead find the context ended (the outer call
// returned) and not be attempted; on a context made with
// context.WithoutCancel from fn's (detached: the case reenter's comment
// names) it is always attempted, and the episode goes on after it.
func TestAdversary36_NestedNotReusableThenAcquires(t *testing.T) {
	for _, detached := range []bool{false, true} {
		for _, otherTTL := range []bool{false, true} {
			t.Run(fmt.Sprintf("detached=%v/otherTTL=%v", detached, otherTTL), func(t *testing.T) {
				adv36NestedNotReusable(t, detached, otherTTL)
			})
		}
	}
}

func adv36NestedNotReusable(t *testing.T, detached, otherTTL bool) {
	rdb := shared.Client(t)
	c, rec := newClient(t, rdb)
	key := uniqueKey(t)
	s := keptSpec(3 * time.Second)
	ns := s
	if otherTTL {
		ns.TTL = 1500 * time.Millisecond
	}
	var outer, nested probe36
	nestedErr := make(chan error, 1)
	var bctx *blockErrCtx
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		outer = probe36At(ctx, rdb, key)
		base := ctx
		if detached {
			base = context.WithoutCancel(ctx)
		}
		bctx = &blockErrCtx{Context: base, blocked: make(chan struct{}), release: make(chan struct{})}
		bctx.armed.Store(true)
		go func() {
			nestedErr <- c.Do(bctx, key, ns, func(ctx context.Context) error {
				nested = probe36At(ctx, rdb, key)
				return nil
			})
		}()
		select {
		case <-bctx.blocked:
		case <-time.After(5 * time.Second):
			return errors.New("the nested call did not reach its Err check")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	close(bctx.release)
	if err := <-nestedErr; err != nil {
		// On fn's own context, cancelled when the outer call returned, a
		// call that is not attempted is the correct outcome too.
		if !detached && strings.Contains(err.Error(), "not attempted") {
			t.Logf("nested call on the ended context: %v", err)
			return
		}
		t.Fatalf("nested call: %v", err)
	}
	for _, e := range rec.Events() {
		if e.Kind == lease.EventDone && e.Reentered {
			t.Fatalf("a call reported Reentered: %+v", e)
		}
	}
	if !nested.ok || !nested.holds {
		t.Fatalf("nested call ran without a lease the key holds: %v (outer %v)", nested, outer)
	}
	if otherTTL {
		if !nested.has || nested.owner == outer.owner || nested.token <= outer.token {
			t.Fatalf("nested call with another TTL: %v, want a fresh grant (outer %v)", nested, outer)
		}
	} else if nested.has || nested.owner != outer.owner {
		t.Fatalf("nested call: %v, want the kept lease (outer %v)", nested, outer)
	}
	if detached {
		// And the episode goes on: kept, renewed, released at its end.
		p, err := do36(t, c, rdb, context.Background(), key, ns, nil)
		want36(t, "the call after", p, err, false)
		if p.owner != nested.owner {
			t.Fatalf("%v, want the nested call's kept lease %v", p, nested)
		}
	}
}

// cmdLog36 records the names of the commands a go-redis client sends.
type cmdLog36 struct {
	mu    sync.Mutex
	names []string
}

func (*cmdLog36) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cmdLog36) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *cmdLog36) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			h.names = append(h.names, c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}
func (h *cmdLog36) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names
	h.names = nil
	return n
}

// A Keep call that waits on a key another Client holds, is queued, and is
// granted by the holder's release message (enterOnNotice: no second
// acquire): its grant part is allocated at its first acquire, and the
// lease granted on the notice is real, kept, renewed across several TTLs
// between calls, and released when the keep ends.
func TestAdversary36_QueuedLightCallGrantedByNotice(t *testing.T) {
	rdbA := shared.Client(t)
	rdbB := shared.Client(t)
	log := &cmdLog36{}
	rdbB.AddHook(log)
	a, _ := newClient(t, rdbA)
	b, recB := newClient(t, rdbB, lease.WithRecheck(5*time.Second))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Wait: 4 * time.Second, Keep: 2 * time.Second, Fence: true}
	// Warm-up: B's Client waits once (on another key), so its inbox is
	// subscribed and a release hands it the key for its full TTL.
	{
		wk := key + ":warm"
		rel := make(chan struct{})
		held := hold(t, a, wk, spec(time.Second, 5*time.Second), rel)
		wdone := make(chan error, 1)
		go func() {
			wdone <- b.Do(context.Background(), wk, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second}, func(context.Context) error { return nil })
		}()
		time.Sleep(200 * time.Millisecond)
		close(rel)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		if err := <-wdone; err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var pa probe36
	aDone := make(chan error, 1)
	aIn := make(chan struct{})
	go func() {
		aDone <- a.Do(context.Background(), key, s, func(ctx context.Context) error {
			pa = probe36At(ctx, rdbA, key)
			close(aIn)
			<-release
			return nil
		})
	}()
	<-aIn
	time.Sleep(100 * time.Millisecond) // B's Client subscribes (its inbox) first
	log.take()
	bDone := make(chan struct{})
	var pb probe36
	var errB error
	var sentBefore []string
	go func() {
		defer close(bDone)
		errB = b.Do(context.Background(), key, s, func(ctx context.Context) error {
			sentBefore = log.take()
			pb = probe36At(ctx, rdbB, key)
			return nil
		})
	}()
	waitFor36(t, 3*time.Second, func() bool { return recB.Count(lease.EventWaiting) > 0 })
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-aDone; err != nil {
		t.Fatalf("A: %v", err)
	}
	<-bDone
	want36(t, "B granted on the release's notice", pb, errB, true)
	acquires := 0
	for _, n := range sentBefore {
		if n == "evalsha" || n == "eval" {
			acquires++
		}
	}
	t.Logf("B sent before fn: %v", sentBefore)
	if acquires != 1 {
		t.Errorf("B sent %d acquires: granted by a re-check, not on the notice", acquires)
	}
	if pb.token <= pa.token || pb.owner == pa.owner {
		t.Fatalf("B %v after A %v", pb, pa)
	}
	// Kept by B across three TTLs, renewed between calls.
	for i := range 4 {
		time.Sleep(450 * time.Millisecond)
		p, err := do36(t, b, rdbB, context.Background(), key, s, nil)
		want36(t, fmt.Sprintf("B's kept call %d", i), p, err, false)
		if p.owner != pb.owner || p.token != pb.token {
			t.Fatalf("B's kept call %d: %v, want %v", i, p, pb)
		}
		if p.remaining < 300*time.Millisecond {
			t.Fatalf("B's kept call %d entered with %v left (renewals every 200ms)", i, p.remaining)
		}
	}
	waitGone36(t, rdbA, key, 3*time.Second)
}

func waitFor36(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	until := time.Now().Add(within)
	for !cond() {
		if time.Now().After(until) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Keep call that waits for a key whose holder's lease runs out without a
// release (a foreign SET), or whose release message does not suit it (the
// holder's TTL differs: px != the call's TTL): it acquires again (a new
// argument array) and holds a real lease.
func TestAdversary36_QueuedLightCallGrantedByRecheck(t *testing.T) {
	t.Parallel()
	t.Run("expired", func(t *testing.T) {
		rdb := shared.Client(t)
		c, _ := newClient(t, rdb, lease.WithRecheck(150*time.Millisecond))
		key := uniqueKey(t)
		if err := rdb.Set(context.Background(), lockKey(key), "foreign:0", 400*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Wait: 3 * time.Second, Keep: time.Second, Fence: true}
		p, err := do36(t, c, rdb, context.Background(), key, s, nil)
		want36(t, "after a foreign holder expired", p, err, true)
		p2, err := do36(t, c, rdb, context.Background(), key, s, nil)
		want36(t, "kept", p2, err, false)
		if p2.owner != p.owner {
			t.Fatalf("%v, want %v", p2, p)
		}
	})
	t.Run("other TTL", func(t *testing.T) {
		rdb := shared.Client(t)
		a, _ := newClient(t, rdb)
		b, _ := newClient(t, rdb)
		key := uniqueKey(t)
		sa := lease.Spec{TTL: 900 * time.Millisecond, Deadline: 5 * time.Second, Fence: true}
		s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Wait: 3 * time.Second, Keep: time.Second, Fence: true}
		release := make(chan struct{})
		done := hold(t, a, key, sa, release)
		var p probe36
		var err error
		bDone := make(chan struct{})
		go func() {
			defer close(bDone)
			p, err = do36(t, b, rdb, context.Background(), key, s, nil)
		}()
		time.Sleep(150 * time.Millisecond)
		close(release)
		if e := <-done; e != nil {
			t.Fatal(e)
		}
		<-bDone
		want36(t, "after a release whose TTL differs", p, err, true)
	})
}

// Lost replies: the acquire's reply is cut and go-redis sends it again.
// A Keep call (light) whose first acquire's reply is cut, on the SET NX
// path (unfenced, no wait) and the script path (fenced), and a waiting one
// whose later acquire's reply is cut: each either holds a real lease or
// reports ErrUnknown/ErrRefused and leaves the key free (its release).
func TestAdversary36_LightCallLostReplyRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fence bool
		wait  bool
	}{{"setnx", false, false}, {"script", true, false}, {"waiting", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := leasetest.StartProxy(t, shared.Addr())
			rdbP := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { rdbP.Close() })
			rdb := shared.Client(t)
			c, _ := newClient(t, rdbP, lease.WithRecheck(150*time.Millisecond))
			key := uniqueKey(t)
			// Warm up (the Client's subscription, pooled connections), so
			// that the cut falls on the acquire.
			if err := c.Do(context.Background(), key+":warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			s := lease.Spec{TTL: time.Second, Deadline: 4 * time.Second, Keep: time.Second, Fence: tc.fence}
			if tc.wait {
				s.Wait = 3 * time.Second
				if err := rdb.Set(context.Background(), lockKey(key), "foreign:0", 300*time.Millisecond).Err(); err != nil {
					t.Fatal(err)
				}
				// The first acquire is answered busy; cut the one after.
				go func() {
					time.Sleep(100 * time.Millisecond)
					p.Set(leasetest.CutNextReply)
				}()
			} else {
				p.Set(leasetest.CutNextReply)
			}
			pr, err := do36(t, c, rdb, context.Background(), key, s, nil)
			t.Logf("cut %d: %v, %v", p.Cut(), pr, err)
			switch {
			case err == nil:
				want36(t, "after a cut reply", pr, err, true)
				p2, err := do36(t, c, rdb, context.Background(), key, s, nil)
				want36(t, "kept after the cut", p2, err, false)
				if p2.owner != pr.owner {
					t.Fatalf("%v, want %v", p2, pr)
				}
			case errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrRefused):
				waitGone36(t, rdb, key, 1500*time.Millisecond)
			default:
				t.Fatalf("unexpected: %v", err)
			}
		})
	}
}

// A kept lease's watcher is the acquiring call's; later (light) calls take
// the lease. A loss while a much later kept call is in fn (replies
// blackholed: renewals fail) cancels that fn with ErrLost by valid-until,
// and Do reports ErrLost; a loss while kept between calls is found, and
// the next call acquires afresh (grant part, real lease).
func TestAdversary36_KeptWatcherFiresForLaterLightCall(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, shared.Addr())
	rdbP := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdbP.Close() })
	rdb := shared.Client(t)
	c, rec := newClient(t, rdbP, lease.WithReleaseTimeout(200*time.Millisecond))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Keep: 5 * time.Second, Fence: true}
	first, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "first", first, err, true)
	for i := range 5 {
		time.Sleep(30 * time.Millisecond)
		pr, err := do36(t, c, rdb, context.Background(), key, s, nil)
		want36(t, fmt.Sprintf("kept %d", i), pr, err, false)
	}
	// In fn: blackhole.
	var valid, done time.Time
	var cause error
	err = c.Do(context.Background(), key, s, func(ctx context.Context) error {
		if has, _ := lease.CallHasGrantPart(ctx); has {
			t.Errorf("the kept call has a grant part")
		}
		l, _ := lease.FromContext(ctx)
		p.Set(leasetest.Blackhole)
		time.Sleep(30 * time.Millisecond) // a renewal answered before is applied
		valid = time.Now().Add(l.Remaining())
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
		done = time.Now()
		cause = context.Cause(ctx)
		return nil
	})
	mustIs(t, err, lease.ErrLost)
	mustIs(t, cause, lease.ErrLost)
	if !strings.Contains(cause.Error(), key) {
		t.Fatalf("cause %v does not name the key", cause)
	}
	if late := done.Sub(valid); late > 500*time.Millisecond {
		t.Fatalf("fn's context ended %v after the lease's validity", late)
	}
	if early := valid.Sub(done); early > 0 {
		t.Fatalf("fn's context ended %v before the lease's validity (cause %v)", early, cause)
	}
	lost := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventLost {
			lost++
			if e.Key != key {
				t.Fatalf("EventLost for key %q", e.Key)
			}
		}
	}
	if lost != 1 {
		t.Fatalf("%d EventLost, want 1", lost)
	}
	p.Set(leasetest.Pass)
	waitGone36(t, rdb, key, 2*time.Second)
	pr, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "after the loss in fn", pr, err, true)
	if pr.owner == first.owner {
		t.Fatal("the lost lease was taken again")
	}

	// Lost while kept (no call in fn): blackholed until validity ends.
	for i := range 3 {
		time.Sleep(20 * time.Millisecond)
		px, err := do36(t, c, rdb, context.Background(), key, s, nil)
		want36(t, fmt.Sprintf("kept %d (second episode)", i), px, err, false)
	}
	p.Set(leasetest.Blackhole)
	time.Sleep(900 * time.Millisecond)
	p.Set(leasetest.Pass)
	waitGone36(t, rdb, key, 2*time.Second)
	pn, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "after a loss while kept", pn, err, true)
	if pn.owner == pr.owner {
		t.Fatal("the lease lost while kept was taken again")
	}
}

// A kept call whose fn overruns its lease's validity (past the call's
// deadline, where renewals stop) reports ErrLost; the next call acquires
// afresh.
func TestAdversary36_KeptOverrunIsLost(t *testing.T) {
	rdb := shared.Client(t)
	c, _ := newClient(t, rdb)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 700 * time.Millisecond, Keep: 5 * time.Second, Fence: true}
	first, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "first", first, err, true)
	_, err = do36(t, c, rdb, context.Background(), key, s, func(ctx context.Context) error {
		time.Sleep(1300 * time.Millisecond) // ignores ctx
		return nil
	})
	mustIs(t, err, lease.ErrLost)
	pr, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "after the overrun", pr, err, true)
	if pr.owner == first.owner {
		t.Fatal("the overrun lease was kept")
	}
}

// blockObs blocks the calling goroutine in Observe for d, on the n-th
// EventAcquired that is Kept (a pause between the take of a kept lease
// and the entry check).
type blockObs struct {
	mu    sync.Mutex
	block map[int]time.Duration // by the index of the kept EventAcquired
	n     int
	rec   leasetest.Recorder
}

func (o *blockObs) Observe(e lease.Event) {
	o.rec.Observe(e)
	if e.Kind != lease.EventAcquired || !e.Kept {
		return
	}
	o.mu.Lock()
	d := o.block[o.n]
	o.n++
	o.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
}

// The entry check after a pause (a slow Observer on the kept
// EventAcquired): a kept lease whose keep ended (renewals stopped at the
// keep's end, the same instant the clock ends it) and whose validity ran
// out while the taking call was paused is not entered (ErrLowValidity),
// and the next call acquires afresh. With many shorter pauses, every fn
// entered has at least MinValidity left at entry (less a little).
func TestAdversary36_EntryCheckAfterPause(t *testing.T) {
	t.Run("validity ran out", func(t *testing.T) {
		rdb := shared.Client(t)
		o := &blockObs{block: map[int]time.Duration{0: 1200 * time.Millisecond}}
		c, err := lease.New(rdb, lease.WithObserver(o))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		key := uniqueKey(t)
		s := lease.Spec{TTL: 400 * time.Millisecond, Deadline: 5 * time.Second, Keep: 300 * time.Millisecond, MinValidity: 100 * time.Millisecond, Fence: true}
		first, err := do36(t, c, rdb, context.Background(), key, s, nil)
		want36(t, "first", first, err, true)
		time.Sleep(20 * time.Millisecond)
		entered := false
		err = c.Do(context.Background(), key, s, func(ctx context.Context) error {
			entered = true
			return nil
		})
		if entered {
			t.Fatalf("fn entered after its kept lease's validity ran out (err %v)", err)
		}
		mustIs(t, err, lease.ErrLowValidity)
		pr, err := do36(t, c, rdb, context.Background(), key, s, nil)
		want36(t, "after", pr, err, true)
		if pr.owner == first.owner {
			t.Fatal("the expired lease was taken again")
		}
	})
	t.Run("many pauses", func(t *testing.T) {
		rdb := shared.Client(t)
		block := map[int]time.Duration{}
		r := rand.New(rand.NewSource(time.Now().UnixNano()))
		for i := range 40 {
			block[i] = time.Duration(r.Intn(120)) * time.Millisecond
		}
		o := &blockObs{block: block}
		c, err := lease.New(rdb, lease.WithObserver(o))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		key := uniqueKey(t)
		const minV = 330 * time.Millisecond
		s := lease.Spec{TTL: 400 * time.Millisecond, Deadline: 5 * time.Second, Keep: time.Second, MinValidity: minV, Fence: true}
		entered, low := 0, 0
		for range 40 {
			var left time.Duration
			err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
				l, _ := lease.FromContext(ctx)
				left = l.Remaining()
				return nil
			})
			switch {
			case err == nil:
				entered++
				// Read in fn, a moment after the entry check: a margin
				// for a preempted goroutine on a loaded machine (-race).
				if left < minV-30*time.Millisecond {
					t.Errorf("entered with %v left, MinValidity %v", left, minV)
				}
			case errors.Is(err, lease.ErrLowValidity):
				low++
			default:
				t.Fatal(err)
			}
		}
		t.Logf("entered %d, low validity %d", entered, low)
	})
}

// A waiter in another Client gets a kept lease handed over (the keeper
// releases it when told); the waiter's call is light and acquires (grant
// part, real lease, a higher token); Close of the waiter's Client while
// it keeps the lease releases it at once.
func TestAdversary36_HandoverToLightWaiterThenCloseReleases(t *testing.T) {
	rdb := shared.Client(t)
	a, _ := newClient(t, rdb)
	b, _ := newClient(t, rdb)
	key := uniqueKey(t)
	s := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second, Keep: 10 * time.Second, Fence: true}
	pa, err := do36(t, a, rdb, context.Background(), key, s, nil)
	want36(t, "A first", pa, err, true)
	time.Sleep(100 * time.Millisecond) // A hears its key's channel
	start := time.Now()
	pb, err := do36(t, b, rdb, context.Background(), key, s, nil)
	want36(t, "B, handed the kept lease", pb, err, true)
	if took := time.Since(start); took > 1200*time.Millisecond {
		t.Fatalf("the handover took %v (not on the waiter's notice)", took)
	}
	if pb.token <= pa.token {
		t.Fatalf("B %v after A %v", pb, pa)
	}
	pb2, err := do36(t, b, rdb, context.Background(), key, s, nil)
	want36(t, "B kept", pb2, err, false)
	if pb2.owner != pb.owner {
		t.Fatalf("%v want %v", pb2, pb)
	}
	b.Close()
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Fatal("Close returned with the kept lease still held")
	}
	// A again: acquires afresh (its own kept lease was handed over).
	pa2, err := do36(t, a, rdb, context.Background(), key, s, nil)
	want36(t, "A again", pa2, err, true)
	if pa2.token <= pb.token {
		t.Fatalf("A %v after B %v", pa2, pb)
	}
}

// Close while a light call waits in the queue: it returns ErrClosed, and
// the holder's release is not handed to it (the key is free right after
// the holder's call returns). Close while a kept call is in fn: the call
// returns nil and its lease is released, not kept.
func TestAdversary36_CloseWhileLightCallAcquiringOrInFn(t *testing.T) {
	rdb := shared.Client(t)
	a, _ := newClient(t, rdb)
	b, recB := newClient(t, rdb)
	key := uniqueKey(t)
	s := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second, Keep: 3 * time.Second, Fence: true}
	release := make(chan struct{})
	done := hold(t, a, key, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}, release)
	bErr := make(chan error, 1)
	go func() { bErr <- b.Do(context.Background(), key, s, func(context.Context) error { return nil }) }()
	waitFor36(t, 3*time.Second, func() bool { return recB.Count(lease.EventWaiting) > 0 })
	b.Close()
	mustIs(t, <-bErr, lease.ErrClosed)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		v, _ := rdb.Get(context.Background(), lockKey(key)).Result()
		t.Fatalf("the key is held (%q) after its holder returned, its only waiter closed", v)
	}

	c, _ := newClient(t, rdb)
	p1, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "c first", p1, err, true)
	var p2 probe36
	err = c.Do(context.Background(), key, s, func(ctx context.Context) error {
		p2 = probe36At(ctx, rdb, key)
		go c.Close()
		time.Sleep(100 * time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !p2.holds || p2.has || p2.owner != p1.owner {
		t.Fatalf("kept call %v, first %v", p2, p1)
	}
	waitGone36(t, rdb, key, 500*time.Millisecond)
}

// Leader terms (newCall(false)): each term holds a real lease; a term
// lost to an outside delete is followed by a fresh one.
func TestAdversary36_LeadTermsHoldRealLeases(t *testing.T) {
	t.Parallel()
	rdb := shared.Client(t)
	c, _ := newClient(t, rdb)
	key := uniqueKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan probe36, 4)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Lead(ctx, key, lease.LeadSpec{TTL: 600 * time.Millisecond, Owner: "me"}, func(fctx context.Context) error {
			terms <- probe36At(fctx, rdb, key)
			<-fctx.Done()
			return nil
		})
	}()
	var owners []string
	for i := range 3 {
		select {
		case p := <-terms:
			if !p.ok || !p.holds || !p.has {
				t.Fatalf("term %d: %v", i, p)
			}
			owners = append(owners, p.owner)
		case <-time.After(5 * time.Second):
			t.Fatalf("no term %d", i)
		}
		rdb.Del(context.Background(), lockKey(key))
	}
	if owners[0] == owners[1] || owners[1] == owners[2] {
		t.Fatalf("terms share an identity: %v", owners)
	}
	cancel()
	<-errc
}

// Restart and FLUSHALL while kept (own server): the next call does not run
// on the lost lease; it acquires afresh and holds a real lease.
func TestAdversary36_KeptLostInRestartOrFlush(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, rec := newClient(t, rdb)
	key := uniqueKey(t)
	s := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Keep: 10 * time.Second, Fence: true}
	p1, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "first", p1, err, true)
	time.Sleep(50 * time.Millisecond)
	p2, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "kept", p2, err, false)

	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// A renewal (every 333ms) finds it: waited for, not slept for (500ms
	// were not always enough under load).
	waitFor36(t, 5*time.Second, func() bool { return rec.Count(lease.EventLost) > 0 })
	p3, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "after FLUSHALL", p3, err, true)
	if p3.owner == p2.owner {
		t.Fatal("the flushed lease was taken again")
	}
	time.Sleep(50 * time.Millisecond)
	p4, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "kept after FLUSHALL", p4, err, false)

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// At once: the reuse asks Redis once the Client knows the
	// subscription is down; before that a kept call may run on the lost
	// lease (Spec.Keep's documentation), but never holds the key.
	var p5 probe36
	for range 50 {
		p5, err = do36(t, c, rdb, context.Background(), key, s, nil)
		if err == nil && p5.has {
			break
		}
		t.Logf("right after the restart: %v, %v", p5, err)
		if err == nil && p5.holds {
			t.Fatalf("a kept call holds the key after a restart: %v", p5)
		}
		time.Sleep(50 * time.Millisecond)
	}
	want36(t, "after the restart", p5, err, true)
	if p5.owner == p4.owner {
		t.Fatal("the lease lost in the restart was taken again")
	}
	p6, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "kept after the restart", p6, err, false)
}

// Stress under -race: two Clients, many goroutines, a few keys, Keep calls
// with short keeps (kept leases end, are taken, handed over between the
// Clients), nested calls on another key, cancelled callers, then Close of
// both Clients while calls run. Checked: no two functions on a key overlap
// while both calls return nil; a fresh grant's token is above every
// earlier one's on the key; nothing held after Close.
func TestAdversary36_ConcurrentKeepStress(t *testing.T) {
	rdb := shared.Client(t)
	const nkeys = 3
	base := uniqueKey(t)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", base, i)
	}
	type entry struct {
		key        string
		owner      string
		token      lease.Token
		from, to   time.Time
		err        error
		part, kept bool
	}
	var mu sync.Mutex
	var entries []*entry
	notEntered := map[string]int{}
	var clients []*lease.Client
	for range 2 {
		c, _ := newClient(t, shared.Client(t), lease.WithRecheck(200*time.Millisecond))
		clients = append(clients, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for ci, c := range clients {
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(ci*100 + g)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					key := keys[r.Intn(nkeys)]
					if r.Intn(3) == 0 {
						key = fmt.Sprintf("%s-own%d", base, ci) // one Client's only: kept leases taken often
					}
					s := lease.Spec{TTL: 900 * time.Millisecond, Deadline: 3 * time.Second, Wait: 2 * time.Second,
						Keep: time.Duration(10+r.Intn(60)) * time.Millisecond, Fence: true}
					if r.Intn(5) == 0 {
						s.Keep = 0
					}
					ctx, cancel := context.WithCancel(context.Background())
					if r.Intn(10) == 0 {
						d := time.Duration(r.Intn(5)) * time.Millisecond
						go func() { time.Sleep(d); cancel() }()
					}
					e := &entry{key: key}
					entered := false
					err := c.Do(ctx, key, s, func(ctx context.Context) error {
						l, _ := lease.FromContext(ctx)
						e.owner, e.token, e.from = l.Owner(), l.Token(), time.Now()
						e.part, _ = lease.CallHasGrantPart(ctx)
						entered = true
						time.Sleep(time.Duration(r.Intn(3)) * time.Millisecond)
						if r.Intn(8) == 0 {
							other := keys[(indexOf36(keys, key)+1)%nkeys] + ":nested"
							_ = c.Do(ctx, other, s, func(context.Context) error { return nil })
						}
						e.to = time.Now()
						return nil
					})
					cancel()
					calls.Add(1)
					if !entered {
						cls := "nil"
						for _, k := range []error{lease.ErrClosed, lease.ErrBusy, lease.ErrDeadline, lease.ErrLowValidity, lease.ErrUnknown, lease.ErrRefused, context.Canceled} {
							if errors.Is(err, k) {
								cls = k.Error()
								break
							}
						}
						if cls == "nil" && err != nil {
							cls = err.Error()
						}
						mu.Lock()
						notEntered[cls]++
						mu.Unlock()
					}
					if errors.Is(err, lease.ErrClosed) && !entered {
						return
					}
					if entered {
						e.err = err
						mu.Lock()
						entries = append(entries, e)
						mu.Unlock()
					}
				}
			}()
		}
	}
	time.Sleep(4 * time.Second)
	// Close both while calls run.
	var cw sync.WaitGroup
	for _, c := range clients {
		cw.Add(1)
		go func() { defer cw.Done(); c.Close() }()
	}
	cw.Wait()
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d calls, %d entered; not entered: %v", calls.Load(), len(entries), notEntered)
	parts := 0
	for _, e := range entries {
		if e.part {
			parts++
		}
	}
	t.Logf("entered with a grant part (acquired): %d, without (kept): %d", parts, len(entries)-parts)
	byKey := map[string][]*entry{}
	for _, e := range entries {
		byKey[e.key] = append(byKey[e.key], e)
	}
	for key, es := range byKey {
		sort.Slice(es, func(i, j int) bool { return es[i].from.Before(es[j].from) })
		var last *entry // the entry that ended last so far
		for i := 1; i < len(es); i++ {
			prev, cur := es[i-1], es[i]
			if last == nil || prev.to.After(last.to) {
				last = prev
			}
			if cur.from.Before(last.to) && last.err == nil && cur.err == nil {
				t.Errorf("key %s: calls overlap: %+v and %+v", key, last, cur)
			}
			if cur.owner != prev.owner && cur.token <= prev.token && prev.err == nil && cur.err == nil {
				t.Errorf("key %s: a new grant's token %d not above the earlier %d", key, cur.token, prev.token)
			}
			if cur.owner == prev.owner && cur.token != prev.token {
				t.Errorf("key %s: one owner, two tokens", key)
			}
		}
		seen := map[string]bool{}
		for _, e := range es {
			if !e.part && !seen[e.owner] {
				t.Errorf("key %s: a call without a grant part ran on a lease no earlier call had: %+v", key, e)
			}
			seen[e.owner] = true
		}
		for _, e := range es {
			if e.err != nil && !errors.Is(e.err, lease.ErrClosed) && !errors.Is(e.err, lease.ErrDeadline) && !errors.Is(e.err, lease.ErrLost) && !errors.Is(e.err, lease.ErrUnknown) {
				t.Logf("key %s: entered call returned %v", key, e.err)
			}
		}
	}
	for _, key := range append(keys, base+"-own0", base+"-own1") {
		waitGone36(t, rdb, key, 2*time.Second)
		waitGone36(t, rdb, key+":nested", 2*time.Second)
	}
}

func indexOf36(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return 0
}

// gateObs blocks the call's goroutine on an EventAcquired (of the kind
// asked for) while armed: the grant is made, fn not entered yet.
type gateObs struct {
	leasetest.Recorder
	kept    bool
	armed   atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

func (o *gateObs) Observe(e lease.Event) {
	o.Recorder.Observe(e)
	if e.Kind == lease.EventAcquired && e.Kept == o.kept && o.armed.CompareAndSwap(true, false) {
		close(o.blocked)
		<-o.release
	}
}

// Close between a grant and its entry: a Keep call that took the kept
// lease (light, no grant part) and one that acquired (light, grant part
// allocated), each paused on its EventAcquired while Close runs. Neither
// enters fn, each returns ErrClosed, and the key is free when Close
// returns (Close released it: the kept lease through releaseKept, the
// fresh grant by its identity).
func TestAdversary36_CloseBetweenGrantAndEntry(t *testing.T) {
	t.Parallel()
	for _, kept := range []bool{true, false} {
		t.Run(fmt.Sprintf("kept=%v", kept), func(t *testing.T) {
			rdb := shared.Client(t)
			o := &gateObs{kept: kept, blocked: make(chan struct{}), release: make(chan struct{})}
			c, err := lease.New(rdb, lease.WithObserver(o))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			key := uniqueKey(t)
			s := keptSpec(5 * time.Second)
			if kept {
				p, err := do36(t, c, rdb, context.Background(), key, s, nil)
				want36(t, "first", p, err, true)
				time.Sleep(50 * time.Millisecond)
			}
			o.armed.Store(true)
			entered := false
			errc := make(chan error, 1)
			go func() {
				errc <- c.Do(context.Background(), key, s, func(ctx context.Context) error {
					entered = true
					return nil
				})
			}()
			select {
			case <-o.blocked:
			case err := <-errc:
				t.Fatalf("returned before its grant: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("no grant")
			}
			if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 1 {
				t.Fatal("granted, but the key is not held")
			}
			c.Close()
			if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
				v, _ := rdb.Get(context.Background(), lockKey(key)).Result()
				t.Errorf("Close returned with the grant still held (%q)", v)
			}
			close(o.release)
			err = <-errc
			if entered {
				t.Fatalf("fn entered after Close took its grant (err %v)", err)
			}
			mustIs(t, err, lease.ErrClosed)
			time.Sleep(50 * time.Millisecond)
			if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
				t.Fatal("the key is held after the call returned")
			}
		})
	}
}

// A Keep call whose grant is read too late to enter (replies delayed):
// ErrLowValidity, fn not entered, the grant released.
func TestAdversary36_LightCallLateGrantReleased(t *testing.T) {
	p := leasetest.StartProxy(t, shared.Addr())
	rdbP := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdbP.Close() })
	rdb := shared.Client(t)
	c, _ := newClient(t, rdbP)
	key := uniqueKey(t)
	if err := c.Do(context.Background(), key+":warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(300 * time.Millisecond)
	p.Set(leasetest.Delay)
	s := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, MinValidity: 800 * time.Millisecond, Keep: time.Second, Fence: true}
	entered := false
	err := c.Do(context.Background(), key, s, func(context.Context) error { entered = true; return nil })
	if entered {
		t.Fatal("entered a late grant")
	}
	mustIs(t, err, lease.ErrLowValidity)
	p.Set(leasetest.Pass)
	waitGone36(t, rdb, key, 2*time.Second)
	pr, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "after", pr, err, true)
}

// A fresh grant of a Keep call (light, grant part allocated at its
// acquire) paused past its validity before entry: not entered
// (ErrLowValidity), nothing kept, the key free; the next call acquires.
func TestAdversary36_FreshLightGrantPausedPastValidity(t *testing.T) {
	rdb := shared.Client(t)
	o := &gateObs{kept: false, blocked: make(chan struct{}), release: make(chan struct{})}
	c, err := lease.New(rdb, lease.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	key := uniqueKey(t)
	s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second, Keep: 2 * time.Second, Fence: true}
	o.armed.Store(true)
	go func() { <-o.blocked; time.Sleep(500 * time.Millisecond); close(o.release) }()
	entered := false
	err = c.Do(context.Background(), key, s, func(context.Context) error { entered = true; return nil })
	if entered {
		t.Fatal("entered past validity")
	}
	mustIs(t, err, lease.ErrLowValidity)
	p, err := do36(t, c, rdb, context.Background(), key, s, nil)
	want36(t, "next call", p, err, true)
}

// Races under -race: one Client, calls taking a kept lease in a tight
// loop from several goroutines while its keep (1-3ms) ends on the clock,
// renewals run (TTL 150ms), and another Client sometimes waits for the key
// (handovers). Every call entered without a grant part runs on a lease an
// earlier call on this Client acquired; every call entered with one holds
// a grant of its own.
func TestAdversary36_KeepEndRacesTake(t *testing.T) {
	rdb := shared.Client(t)
	c, _ := newClient(t, shared.Client(t))
	other, _ := newClient(t, shared.Client(t))
	key := uniqueKey(t)
	var mu sync.Mutex
	acquired := map[string]bool{}
	var bad []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var n, kept atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := lease.Spec{TTL: 150 * time.Millisecond, Deadline: 2 * time.Second,
					Keep: time.Duration(1+r.Intn(3)) * time.Millisecond, Fence: true}
				if g == 0 {
					s.Wait = time.Second // the others try once (no queue: the lease stays kept)
				} else {
					s.Busy = lease.BusySkip
				}
				_ = c.Do(context.Background(), key, s, func(ctx context.Context) error {
					has, _ := lease.CallHasGrantPart(ctx)
					l, _ := lease.FromContext(ctx)
					n.Add(1)
					mu.Lock()
					if has {
						if acquired[l.Owner()] {
							bad = append(bad, fmt.Sprintf("a call with a grant part on a lease acquired before: %s", l.Owner()))
						}
						acquired[l.Owner()] = true
					} else {
						kept.Add(1)
						if !acquired[l.Owner()] {
							bad = append(bad, fmt.Sprintf("a light call on a lease no call acquired: %s", l.Owner()))
						}
					}
					mu.Unlock()
					time.Sleep(time.Duration(r.Intn(2)) * time.Millisecond)
					return nil
				})
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_ = other.Do(context.Background(), key, lease.Spec{TTL: 150 * time.Millisecond, Deadline: 2 * time.Second, Wait: time.Second, Fence: true},
				func(context.Context) error { return nil })
		}
	}()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d entries, %d on the kept lease, %d acquired", n.Load(), kept.Load(), len(acquired))
	for _, b := range bad {
		t.Error(b)
	}
	c.Close()
	other.Close()
	waitGone36(t, rdb, key, time.Second)
}

// The acquiring (light) call's struct is unreachable except through its
// lease once later calls take the lease: collections between and during
// kept calls change nothing (the watcher and renewals go on, each call
// holds the key, the token stays, the keep's end releases).
func TestAdversary36_KeptLeaseAcrossCollections(t *testing.T) {
	rdb := shared.Client(t)
	c, _ := newClient(t, rdb)
	key := uniqueKey(t)
	// TTL 900ms (renewed every 300ms), MinValidity 100ms: a reuse needs
	// the renewals on time to within about half a second, not the 45ms a
	// 300ms TTL with its default MinValidity (half of it) left, which a
	// loaded machine missed. The 15 calls still span almost 3 TTLs.
	s := lease.Spec{TTL: 900 * time.Millisecond, MinValidity: 100 * time.Millisecond, Deadline: 4 * time.Second, Keep: 500 * time.Millisecond, Fence: true}
	first, err := do36(t, c, rdb, context.Background(), key, s, func(context.Context) error { runtime.GC(); return nil })
	want36(t, "first", first, err, true)
	for i := range 15 {
		runtime.GC()
		debug.FreeOSMemory()
		time.Sleep(120 * time.Millisecond) // renewed between calls, every 300ms (TTL/3)
		p, err := do36(t, c, rdb, context.Background(), key, s, func(context.Context) error {
			runtime.GC()
			time.Sleep(50 * time.Millisecond)
			return nil
		})
		want36(t, fmt.Sprintf("kept %d", i), p, err, false)
		if p.owner != first.owner || p.token != first.token {
			t.Fatalf("kept %d: %v, want %v", i, p, first)
		}
	}
	runtime.GC()
	waitGone36(t, rdb, key, 2*time.Second)
}
