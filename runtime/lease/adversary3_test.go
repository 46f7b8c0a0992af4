package lease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
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

// adv3Proxied returns a lease Client whose Redis traffic goes through a
// fault proxy to a private server, and the server.
func adv3Proxied(t *testing.T, opts ...lease.Option) (*leasetest.Server, *leasetest.Proxy, *lease.Client, *leasetest.Recorder) {
	t.Helper()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, PoolSize: 8})
	t.Cleanup(func() { rdb.Close() })
	c, rec := newClient(t, rdb, opts...)
	return srv, p, c, rec
}

// adv3KillPubSub kills every subscribed connection on srv (by id: with
// RESP3 a subscribed client is not of TYPE pubsub) and lets the reader
// notice. It reports how many it killed.
func adv3KillPubSub(t *testing.T, srv *leasetest.Server, after func()) int {
	t.Helper()
	admin := srv.Client(t)
	ctx := context.Background()
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		var id, sub string
		for _, f := range strings.Fields(line) {
			switch {
			case strings.HasPrefix(f, "id="):
				id = f[3:]
			case strings.HasPrefix(f, "sub="):
				sub = f[4:]
			}
		}
		if id != "" && sub != "" && sub != "0" {
			if err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err == nil {
				n++
			}
		}
	}
	if after != nil {
		after()
	}
	// The reader notices a dead subscription within about readSlice.
	time.Sleep(600 * time.Millisecond)
	return n
}

// adv3WaitSubscribed waits until some connection on srv subscribes key's
// channel.
func adv3WaitSubscribed(t *testing.T, srv *leasetest.Server, key string) {
	t.Helper()
	admin := srv.Client(t)
	ch := "lease:{" + key + "}:c"
	for i := 0; i < 300; i++ {
		m, err := admin.PubSubNumSub(context.Background(), ch).Result()
		if err == nil && m[ch] > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	list, _ := admin.ClientList(context.Background()).Result()
	t.Fatalf("channel %s never subscribed; clients:\n%s", ch, list)
}

// A kept lease reused while the Client's subscription is not live is
// verified with one round trip (takeKept → verifyKept), but its
// MinValidity was checked before that round trip and not after: a slow
// verification lets fn in with less than MinValidity left.
func TestAdversary3_KeptReuseAfterSlowVerifyEntersBelowMinValidity(t *testing.T) {
	t.Parallel()
	srv, p, c, rec := adv3Proxied(t, lease.WithReleaseTimeout(2500*time.Millisecond))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 3 * time.Second, MinValidity: 1500 * time.Millisecond, Deadline: 6 * time.Second, Keep: 10 * time.Second}
	ctx := context.Background()
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("first call: %v", err)
	}
	adv3WaitSubscribed(t, srv, key)
	// Slow replies, and a subscription that must be confirmed again.
	if n := adv3KillPubSub(t, srv, func() { p.SetDelay(1600 * time.Millisecond) }); n == 0 {
		t.Fatal("no subscription killed")
	}
	t.Logf("failed events after kill: %d", rec.Count(lease.EventSubscriptionFailed))
	var left time.Duration
	entered := false
	err := c.Do(ctx, key, s, func(ctx context.Context) error {
		entered = true
		l, _ := lease.FromContext(ctx)
		left = l.Remaining()
		return nil
	})
	p.Set(leasetest.Pass)
	t.Logf("second call: entered=%v remaining at entry=%v (MinValidity %v) err=%v", entered, left, s.MinValidity, err)
	for _, e := range rec.Events() {
		t.Logf("event %v kept=%v err=%v at=%v", e.Kind, e.Kept, e.Err, e.At.Format("05.000"))
	}
	if entered && left < s.MinValidity {
		t.Fatalf("fn entered with %v left, less than MinValidity %v", left, s.MinValidity)
	}
}

// The extreme of the above: the lease's validity runs out during the
// verification round trip; the watcher marks it lost, yet takeKept still
// hands it to the call (verifyKept saw the key's value as ours), and fn is
// entered on a lost lease (with an already-cancelled context).
func TestAdversary3_KeptReuseEntersLeaseLostDuringVerify(t *testing.T) {
	t.Parallel()
	srv, p, c, _ := adv3Proxied(t, lease.WithReleaseTimeout(5*time.Second))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 1500 * time.Millisecond, MinValidity: 500 * time.Millisecond, Deadline: 6 * time.Second, Keep: 10 * time.Second}
	ctx := context.Background()
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("first call: %v", err)
	}
	adv3WaitSubscribed(t, srv, key)
	if n := adv3KillPubSub(t, srv, func() { p.SetDelay(2 * time.Second) }); n == 0 {
		t.Fatal("no subscription killed")
	}
	var entered atomic.Bool
	var ctxErrAtEntry error
	err := c.Do(ctx, key, s, func(ctx context.Context) error {
		entered.Store(true)
		ctxErrAtEntry = context.Cause(ctx)
		return nil
	})
	p.Set(leasetest.Pass)
	t.Logf("second call: entered=%v ctx cause at entry=%v err=%v", entered.Load(), ctxErrAtEntry, err)
	if entered.Load() {
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("entered a lost lease and Do returned %v", err)
		}
		t.Fatalf("fn was entered on a lease already lost (cause at entry: %v); Do: %v", ctxErrAtEntry, err)
	}
}

// Invariant 1 across Clients: A keeps its lease between calls (Keep), B
// waits for the key, and an operator force-releases whoever holds it. A
// call that returned nil must never have overlapped another call that
// returned nil. fn takes 15ms, longer than a notification's latency here,
// so the documented window (a kept call that ends before the notice
// arrives) cannot explain an overlap.
func TestAdversary3_KeptVsWaiterUnderForceReleaseSoak(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	mk := func() (*lease.Client, *leasetest.Recorder) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		return newClient(t, rdb)
	}
	a, _ := mk()
	b, _ := mk()
	op, _ := mk()
	key := uniqueKey(t)
	type span struct {
		who        string
		start, end time.Time
		err        error
	}
	var mu sync.Mutex
	var spans []span
	var inside atomic.Int32
	var overlapSeen atomic.Int32
	work := func(ctx context.Context) error {
		if inside.Add(1) > 1 {
			overlapSeen.Add(1)
		}
		defer inside.Add(-1)
		select {
		case <-time.After(15 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	run := func(who string, c *lease.Client, s lease.Spec, stop <-chan struct{}, wg *sync.WaitGroup) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var st, en time.Time
			err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
				st = time.Now()
				err := work(ctx)
				en = time.Now()
				return err
			})
			if !st.IsZero() {
				mu.Lock()
				spans = append(spans, span{who, st, en, err})
				mu.Unlock()
			}
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go run("A", a, lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Keep: time.Second}, stop, &wg)
	go run("B", b, lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Wait: time.Second}, stop, &wg)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.IntN(40)) * time.Millisecond):
			}
			info, err := op.Inspect(context.Background(), key)
			if err != nil || info.Holder == "" {
				continue
			}
			_, _ = op.ForceRelease(context.Background(), key, info.Holder)
		}
	}()
	time.Sleep(*soak) // -soak: 3s by default
	close(stop)
	wg.Wait()
	bad := 0
	counts := map[string]int{}
	for i, x := range spans {
		if x.err == nil {
			counts[x.who]++
		}
		for _, y := range spans[i+1:] {
			if x.who == y.who || x.err != nil || y.err != nil {
				continue
			}
			if x.start.Before(y.end) && y.start.Before(x.end) {
				bad++
				if bad <= 5 {
					t.Errorf("overlap, both nil: %s [%v..%v] and %s [%v..%v]", x.who, x.start.Format("05.000"), x.end.Format("05.000"), y.who, y.start.Format("05.000"), y.end.Format("05.000"))
				}
			}
		}
	}
	t.Logf("calls entered: %d, nil results %v, overlaps seen in fn: %d, overlaps with both nil: %d", len(spans), counts, overlapSeen.Load(), bad)
}

// A context that outlived its call must not present a kept lease as its
// own: after the call returns and the Client keeps the lease, the escaped
// context's Lease still reports Remaining > 0 and Err() == nil.
func TestAdversary3_EscapedContextSeesKeptLeaseAsValid(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, Keep: 5 * time.Second}
	var escaped context.Context
	if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		escaped = ctx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l, ok := lease.FromContext(escaped)
	if !ok {
		t.Fatal("no lease in escaped ctx")
	}
	t.Logf("escaped ctx: Err()=%v Remaining()=%v ctx.Err=%v", l.Err(), l.Remaining(), escaped.Err())
	if l.Remaining() > 0 || l.Err() == nil {
		t.Errorf("a context that outlived its call reports its (kept) lease as valid: Remaining %v, Err %v", l.Remaining(), l.Err())
	}
}

// Invariant 2 after a restart: A keeps a lease; Redis restarts empty and B
// takes the key at once. A's subscription comes back (the channel is
// "live" again) and checkKept asks Redis about the kept lease — but
// takeKept trusts "live" from the moment the subscription is confirmed,
// before that check has answered. A call in between reuses the lost lease
// with no round trip and returns nil while B holds the key. The replies to
// A are delayed (400ms) to widen the window, which is otherwise one round
// trip.
func TestAdversary3_RestartKeptReusedBeforeResubscribeCheck(t *testing.T) {
	t.Parallel()
	srv, p, a, rec := adv3Proxied(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 15 * time.Second, Deadline: 10 * time.Second, Keep: 20 * time.Second}
	ctx := context.Background()
	if err := a.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("first call: %v", err)
	}
	adv3WaitSubscribed(t, srv, key)
	const d = 100 * time.Millisecond
	if os.Getenv("ADV3_NODELAY") == "" {
		p.SetDelay(d)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	bdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { bdb.Close() })
	b, _ := newClient(t, bdb)
	bIn := make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		for i := 0; i < 200; i++ {
			err := b.Do(ctx, key, lease.Spec{TTL: 15 * time.Second, Deadline: 10 * time.Second}, func(ctx context.Context) error {
				close(bIn)
				select {
				case <-time.After(3 * time.Second):
				case <-ctx.Done():
				}
				return nil
			})
			if err == nil || !errors.Is(err, lease.ErrBusy) {
				bDone <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		bDone <- errors.New("B never got the key")
	}()
	select {
	case <-bIn:
	case err := <-bDone:
		t.Fatalf("B: %v", err)
	}
	adv3WaitSubscribed(t, srv, key) // A's SUBSCRIBE reached the new server
	time.Sleep(d + 50*time.Millisecond)
	entered := false
	err := a.Do(ctx, key, s, func(context.Context) error {
		entered = true
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	p.Set(leasetest.Pass)
	bErr := <-bDone
	t.Logf("A: entered=%v err=%v; B: %v", entered, err, bErr)
	for _, e := range rec.Events() {
		t.Logf("A event %v kept=%v err=%v", e.Kind, e.Kept, e.Err)
	}
	if entered && err == nil && bErr == nil {
		t.Fatalf("A reused its kept lease while B held the key after a restart, and both returned nil")
	}
}

// After a restart, with replies ~250ms slow, the Client's subscription
// cannot come back (a reconnect must fit in one bounded receive, see
// readSlice): a known limit. What must hold meanwhile: a kept lease whose
// key was lost in the restart and taken by another owner is not reused
// (its reuse asks Redis), and the call reports busy, not nil.
func TestAdversary3_SlowRepliesAfterRestartKeptLeaseVerified(t *testing.T) {
	t.Parallel()
	srv, p, a, _ := adv3Proxied(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 30 * time.Second, Deadline: 10 * time.Second, Keep: 60 * time.Second}
	if err := a.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	adv3WaitSubscribed(t, srv, key)
	p.SetDelay(250 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	if err := admin.Set(context.Background(), lockKey(key), "other-owner:0", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // the reader finds its connection gone
	entered := false
	err := a.Do(context.Background(), key, s, func(context.Context) error {
		entered = true
		return nil
	})
	p.Set(leasetest.Pass)
	if entered || !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("after a restart the key is another owner's: entered=%v, Do = %v, want ErrBusy", entered, err)
	}
}

// Invariant 6 on the kept path: a kept lease whose verification gets no
// reply (subscription down, replies blackholed) must end in ErrUnknown (or
// a deadline), never busy, never nil, and fn must not run.
func TestAdversary3_KeptVerifyBlackholedIsUnknown(t *testing.T) {
	t.Parallel()
	srv, p, c, _ := adv3Proxied(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 6 * time.Second, Deadline: 2 * time.Second, Keep: 20 * time.Second}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	adv3WaitSubscribed(t, srv, key)
	if n := adv3KillPubSub(t, srv, func() { p.Set(leasetest.Blackhole) }); n == 0 {
		t.Fatal("no subscription killed")
	}
	entered := false
	start := time.Now()
	err := c.Do(context.Background(), key, s, func(context.Context) error { entered = true; return nil })
	took := time.Since(start)
	p.Set(leasetest.Pass)
	t.Logf("err=%v entered=%v took=%v", err, entered, took)
	if entered || err == nil || errors.Is(err, lease.ErrBusy) {
		t.Fatalf("blackholed kept verify: entered=%v err=%v", entered, err)
	}
	if took > s.Deadline+200*time.Millisecond {
		t.Fatalf("Do took %v, budget %v", took, s.Deadline)
	}
}

// Invariant 3 on the kept path: a reused kept lease whose renewals get no
// reply, with fn ignoring its context past the validity, under GOMAXPROCS=1
// with a busy loop: Do must not return nil.
func TestAdversary3_KeptReuseOverrunIsLoss(t *testing.T) {
	_, p, c, _ := adv3Proxied(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 3 * time.Second, Keep: 5 * time.Second}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // reuse while live
		if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("reuse %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var err error
	entered := false
	err = c.Do(context.Background(), key, s, func(context.Context) error {
		entered = true
		p.Set(leasetest.Blackhole)
		end := time.Now().Add(500 * time.Millisecond)
		x := 0
		for time.Now().Before(end) {
			x++
		}
		_ = x
		return nil
	})
	p.Set(leasetest.Pass)
	t.Logf("entered=%v err=%v", entered, err)
	if entered && err == nil {
		t.Fatal("fn ran 500ms past a 300ms lease without renewals, and Do returned nil")
	}
}

// Invariant 5: Close with kept leases while replies are blackholed returns
// within about the release timeout and leaves no goroutine behind once the
// network heals; with the network healthy, keys are gone after Close.
func TestAdversary3_CloseKeptBoundedNoLeak(t *testing.T) {
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	admin := srv.Client(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, blackhole := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		c, err := lease.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for i := 0; i < 5; i++ {
			k := uniqueKey(t)
			keys = append(keys, k)
			if err := c.Do(context.Background(), k, lease.Spec{TTL: 2 * time.Second, Deadline: time.Second, Keep: 10 * time.Second}, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		if blackhole {
			p.Set(leasetest.Blackhole)
		}
		start := time.Now()
		_ = c.Close()
		took := time.Since(start)
		p.Set(leasetest.Pass)
		t.Logf("blackhole=%v Close took %v", blackhole, took)
		if took > lease.DefaultReleaseTimeout+200*time.Millisecond {
			t.Errorf("blackhole=%v: Close took %v", blackhole, took)
		}
		if !blackhole {
			for _, k := range keys {
				if n, _ := admin.Exists(context.Background(), lockKey(k)).Result(); n != 0 {
					t.Errorf("key %s still held after Close", k)
				}
			}
		}
		rdb.Close()
	}
	p.CloseConns()
	time.Sleep(500 * time.Millisecond)
}

// A call that reuses a kept lease and panics leaves the Client's kept
// entry marked in use (run's defer skips keep/unkeep when fn panicked):
// the key is released, but the Client never keeps a lease on that key
// again, and the entry (and its channel subscription) stays until Close.
func TestAdversary3_PanicInKeptReuseWedgesKeep(t *testing.T) {
	t.Parallel()
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Keep: 10 * time.Second}
	ctx := context.Background()
	nopFn := func(context.Context) error { return nil }
	if err := c.Do(ctx, key, s, nopFn); err != nil {
		t.Fatal(err)
	}
	// Let the kept lease's subscription be confirmed and its checks run:
	// the steady state of a kept key.
	time.Sleep(time.Second)
	func() {
		defer func() { _ = recover() }()
		_ = c.Do(ctx, key, s, func(context.Context) error { panic("boom") })
	}()
	for i := 0; i < 3; i++ {
		if err := c.Do(ctx, key, s, nopFn); err != nil {
			t.Fatalf("call %d after the panic: %v", i, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	kept := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventAcquired && e.Kept {
			kept++
		}
	}
	for _, e := range rec.Events() {
		t.Logf("%v kept=%v err=%v", e.Kind, e.Kept, e.Err)
	}
	t.Logf("acquisitions from a kept lease: %d (1 before the panic)", kept)
	if kept < 3 {
		t.Fatalf("after a panic in a kept call, the key is never kept again (%d kept acquisitions, want 3)", kept)
	}
}

// Invariant 1: three Clients (own connections) all keep their leases and
// wait for the key; subscriptions are killed now and then. No outside
// release happens, so no documented window applies: two calls that both
// returned nil must never overlap.
func TestAdversary3_AllKeepersHandoffSoak(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	var clients []*lease.Client
	for i := 0; i < 3; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		c, _ := newClient(t, rdb, lease.WithRecheck(200*time.Millisecond))
		clients = append(clients, c)
	}
	key := uniqueKey(t)
	type span struct {
		who        int
		start, end time.Time
		err        error
	}
	var mu sync.Mutex
	var spans []span
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := lease.Spec{TTL: 2 * time.Second, Deadline: 1500 * time.Millisecond, Wait: time.Second, Keep: time.Duration(50+50*i) * time.Millisecond}
			for {
				select {
				case <-stop:
					return
				default:
				}
				var st, en time.Time
				err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
					st = time.Now()
					select {
					case <-time.After(time.Duration(2+rand.IntN(6)) * time.Millisecond):
					case <-ctx.Done():
					}
					en = time.Now()
					return nil
				})
				if !st.IsZero() {
					mu.Lock()
					spans = append(spans, span{i, st, en, err})
					mu.Unlock()
				}
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			}
		}()
	}
	if os.Getenv("ADV3_BUSY") != "" {
		// A CPU hog on a single P: timers and the renewer run late.
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := 0
				for {
					select {
					case <-stop:
						return
					default:
					}
					for k := 0; k < 1e6; k++ {
						x += k
					}
				}
			}()
		}
	}
	deadline := time.Now().Add(*soak) // -soak: 3s by default
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond)
		adv3KillPubSubQuiet(srv)
	}
	close(stop)
	wg.Wait()
	bad, nils := 0, map[int]int{}
	for i, x := range spans {
		if x.err == nil {
			nils[x.who]++
		}
		for _, y := range spans[i+1:] {
			if x.who == y.who || x.err != nil || y.err != nil {
				continue
			}
			if x.start.Before(y.end) && y.start.Before(x.end) {
				bad++
				if bad <= 5 {
					t.Errorf("overlap, both nil: %d [%v..%v] and %d [%v..%v]", x.who, x.start.Format("05.000000"), x.end.Format("05.000000"), y.who, y.start.Format("05.000000"), y.end.Format("05.000000"))
				}
			}
		}
	}
	errs := map[string]int{}
	for _, x := range spans {
		if x.err != nil {
			errs[x.err.Error()[:min(60, len(x.err.Error()))]]++
		}
	}
	t.Logf("entered %d, nil per client %v, errors after entry %v, overlaps both nil %d", len(spans), nils, errs, bad)
}

func adv3KillPubSubQuiet(srv *leasetest.Server) {
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := context.Background()
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return
	}
	for _, line := range strings.Split(list, "\n") {
		var id, sub string
		for _, f := range strings.Fields(line) {
			switch {
			case strings.HasPrefix(f, "id="):
				id = f[3:]
			case strings.HasPrefix(f, "sub="):
				sub = f[4:]
			}
		}
		if id != "" && sub != "" && sub != "0" {
			_ = admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err()
		}
	}
}

// Invariant 4, nested: the context of a nested (reentered) call outlives
// that call (detached with WithoutCancel). It carries the outer call's
// lease: while the outer call is in its function, a Do on it re-enters, as
// a Do on any context of the outer function would (the outer call's lease
// is valid and held for that function); once the outer call has returned,
// it never does.
func TestAdversary3_EscapedNestedContextReentersOnlyWhileOuterRuns(t *testing.T) {
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	s := spec(3*time.Second, 5*time.Second)
	var inner context.Context
	var whileOuter error
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		if err := c.Do(ctx, key, s, func(ctx2 context.Context) error {
			inner = context.WithoutCancel(ctx2)
			return nil
		}); err != nil {
			return err
		}
		// The nested call has returned; its context lives on.
		whileOuter = c.Do(inner, key, s, func(context.Context) error { return nil })
		return nil
	})
	if err != nil || whileOuter != nil {
		t.Fatalf("outer: %v; call on the escaped context while the outer runs: %v", err, whileOuter)
	}
	reentered := func() (n int) {
		for _, e := range rec.Events() {
			if e.Kind == lease.EventDone && e.Reentered {
				n++
			}
		}
		return n
	}
	if n := reentered(); n != 2 {
		t.Fatalf("%d reentered calls while the outer call ran, want 2 (the nested call and the one on its escaped context)", n)
	}
	if l, _ := lease.FromContext(inner); l.Remaining() != 0 || l.Err() == nil {
		t.Fatalf("after the outer call: the escaped context's lease has %v left, Err %v", l.Remaining(), l.Err())
	}
	if err := c.Do(inner, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after the outer call returned: %v", err)
	}
	if n := reentered(); n != 2 {
		t.Fatalf("a call on the escaped context after the outer call returned was re-entered (%d reentered calls)", n)
	}
}

// Invariant 2, documented window: a kept key deleted from outside (no
// notice) and taken by B is reused by A with no round trip only until the
// next renewal (TTL/3).
func TestAdversary3_DeletedKeptKeyReuseBoundedByRenewal(t *testing.T) {
	c, _ := sharedClient(t)
	b, _ := sharedClient(t)
	admin := shared.Client(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Keep: 10 * time.Second}
	ctx := context.Background()
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := admin.Del(ctx, lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	del := time.Now()
	release := make(chan struct{})
	held := hold(t, b, key, spec(5*time.Second, 6*time.Second), release)
	var lastNil time.Duration
	for time.Since(del) < 2500*time.Millisecond {
		if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err == nil {
			lastNil = time.Since(del)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	<-held
	t.Logf("A's kept calls returned nil up to %v after the delete (TTL/3 = %v)", lastNil, s.TTL/3)
	if lastNil > s.TTL/3+200*time.Millisecond {
		t.Fatalf("kept lease reused %v after its key was deleted and taken (beyond TTL/3)", lastNil)
	}
}
