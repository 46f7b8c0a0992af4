package lease_test

// Round 74b: kept leases (Spec.Keep) under a paused holder connection,
// lost replies, fencing and Close with a queued waiter.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// adv74bSpan is one stay inside fn: from entry to the earlier of return
// and the cancellation of its context with ErrLost (the work was told).
type adv74bSpan struct {
	who     string
	tok     lease.Token
	in, out time.Time
}

type adv74bSpans struct {
	mu sync.Mutex
	s  []adv74bSpan
}

func (r *adv74bSpans) add(s adv74bSpan) {
	r.mu.Lock()
	r.s = append(r.s, s)
	r.mu.Unlock()
}

// drop forgets the span of who with token tok entered at in.
func (r *adv74bSpans) drop(who string, tok lease.Token, in time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s = slices.DeleteFunc(r.s, func(s adv74bSpan) bool { return s.who == who && s.tok == tok && s.in.Equal(in) })
}

// check fails t for two spans of different Clients that overlap.
func (r *adv74bSpans) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.s {
		for _, b := range r.s[i+1:] {
			if a.who == b.who {
				continue
			}
			if a.in.Before(b.out) && b.in.Before(a.out) {
				t.Errorf("two holders inside fn at once: %s tok %d [%v..%v] and %s tok %d [%v..%v]",
					a.who, a.tok, a.in.Format("15:04:05.000"), a.out.Format("15:04:05.000"),
					b.who, b.tok, b.in.Format("15:04:05.000"), b.out.Format("15:04:05.000"))
			}
		}
	}
}

// adv74bRun returns fn for Do that records its span in r: it stays for
// hold, or until its context ends (then out is that moment).
func adv74bRun(r *adv74bSpans, who string, hold time.Duration, tok *lease.Token, entered chan<- time.Time) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		in := time.Now()
		tk, _ := lease.TokenFrom(ctx)
		if tok != nil {
			*tok = tk
		}
		if entered != nil {
			select {
			case entered <- in:
			default:
			}
		}
		var out time.Time
		select {
		case <-time.After(hold):
			out = time.Now()
		case <-ctx.Done():
			out = time.Now()
		}
		r.add(adv74bSpan{who: who, tok: tk, in: in, out: out})
		return nil
	}
}

func adv74bProxied(t *testing.T, p *leasetest.Proxy, opts ...lease.Option) (*lease.Client, *leasetest.Recorder) {
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return newClient(t, rdb, opts...)
}

// The holder's connection is blackholed (a hung network, or the holder's
// host paused) while its lease is kept: another Client waiting for the key
// must get it once the kept lease's validity ends (TTL after the last
// renewal that could have been confirmed, plus slack), and the holder,
// when its network comes back, must not reuse the kept lease: its next
// call is busy while the other holds, and a later one acquires afresh with
// a larger token.
func TestAdversary74b_BlackholedKeeperLosesKeptLease(t *testing.T) {
	t.Parallel()
	st := watchStalls(t, 20*time.Millisecond)
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	cA, recA := adv74bProxied(t, p, lease.WithRecheck(200*time.Millisecond))
	cB, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	ctx := context.Background()
	key := "adv74b-bh"
	ttl := time.Second
	var spans adv74bSpans
	specA := lease.Spec{TTL: ttl, Deadline: 2 * time.Second, Keep: 30 * time.Second, Fence: true, MinValidity: 300 * time.Millisecond}
	var tokA1 lease.Token
	if err := cA.Do(ctx, key, specA, adv74bRun(&spans, "A", 0, &tokA1, nil)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the keep's subscription is live
	holedAt := time.Now()
	p.Set(leasetest.Blackhole)

	var tokB lease.Token
	bEntered := make(chan time.Time, 1)
	bDone := make(chan error, 1)
	go func() {
		bDone <- cB.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 5 * time.Second, Fence: true, MinValidity: 300 * time.Millisecond},
			adv74bRun(&spans, "B", 1500*time.Millisecond, &tokB, bEntered))
	}()
	var bIn time.Time
	select {
	case bIn = <-bEntered:
	case err := <-bDone:
		t.Fatalf("B: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("B never entered")
	}
	bound := ttl + 600*time.Millisecond + st.lost(holedAt, bIn)
	if late := bIn.Sub(holedAt); late > bound {
		t.Errorf("B entered %v after the keeper went silent, want ≤ %v (TTL after the last renewal + slack)", late, bound)
	}
	if tokB <= tokA1 {
		t.Errorf("B's token %d not above the kept token %d", tokB, tokA1)
	}
	// The keeper's network comes back while B is inside.
	p.Set(leasetest.Pass)
	p.CloseConns()
	aErr := cA.Do(ctx, key, specA, adv74bRun(&spans, "A", 0, nil, nil))
	if aErr == nil {
		t.Errorf("the keeper's call after its network came back entered while B holds the key")
	} else if !errors.Is(aErr, lease.ErrBusy) && !errors.Is(aErr, lease.ErrLost) && !errors.Is(aErr, lease.ErrUnknown) {
		t.Errorf("the keeper's call while B holds: %v, want busy or lost", aErr)
	}
	if err := <-bDone; err != nil {
		t.Errorf("B: %v", err)
	}
	var tokA2 lease.Token
	if err := cA.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: 3 * time.Second, Wait: 2 * time.Second, Keep: 30 * time.Second, Fence: true},
		adv74bRun(&spans, "A", 0, &tokA2, nil)); err != nil {
		t.Errorf("the keeper's call after B: %v", err)
	} else if tokA2 <= tokB {
		t.Errorf("the keeper re-entered with token %d, not above B's %d (reused the lost kept lease %d?)", tokA2, tokB, tokA1)
	}
	spans.check(t)
	for _, e := range recA.Events() {
		t.Logf("A %v %v", e.Kind, e.Err)
	}
}

// While A keeps its lease idle, the next reply on A's connections is cut
// (a renewal's, a probe's, a check's: whichever comes), repeatedly. Every
// time A's next kept call enters, Redis must hold A's lease with the
// token A's function sees: a kept lease is never entered when the key no
// longer holds it.
func TestAdversary74b_CutRepliesWhileKeptNeverEnterUnheld(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	cA, recA := adv74bProxied(t, p, lease.WithRecheck(200*time.Millisecond))
	cI, _ := newClient(t, srv.Client(t))
	ctx := context.Background()
	key := "adv74b-cut"
	s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 2 * time.Second, Wait: time.Second, Keep: 20 * time.Second, Fence: true, MinValidity: 100 * time.Millisecond}
	check := func(ctx context.Context) error {
		tok, _ := lease.TokenFrom(ctx)
		info, err := cI.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if info.Holder == "" || info.Token != tok {
			t.Errorf("A inside fn with token %d while Redis holds %q token %d", tok, info.Holder, info.Token)
		}
		return nil
	}
	if err := cA.Do(ctx, key, s, check); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	cuts := 0
	for round := 0; time.Now().Before(deadline) && round < 8; round++ {
		want := p.Cut() + 1
		p.Set(leasetest.CutNextReply)
		for time.Now().Before(deadline) && p.Cut() < want {
			time.Sleep(5 * time.Millisecond)
		}
		cuts = p.Cut()
		err := cA.Do(ctx, key, s, check)
		if err != nil && !adv56InClass(err) {
			t.Errorf("round %d: error outside the classes: %v", round, err)
		}
		if err != nil {
			t.Logf("round %d: %v", round, err)
		}
	}
	p.Set(leasetest.Pass)
	t.Logf("%d replies cut; renew failures %d, lost %d", cuts, recA.Count(lease.EventRenewFailed), recA.Count(lease.EventLost))
}

// A waiter in another Client is queued while A's kept call runs; the
// release that gives the lease up to it when the call returns has its
// reply cut. The release ran: the waiter gets the key within about a
// notification round trip; A's outcome is reported honestly (nil with the
// release confirmed, or an unconfirmed release reported); A never enters
// again while the waiter holds.
func TestAdversary74b_CutReplyOfReleaseToWaiter(t *testing.T) {
	t.Parallel()
	adv74bLostReleaseReply(t, leasetest.CutNextReply)
}

// The same with the release's reply never coming (Blackhole on the
// command connection): the release runs on the server, so the waiter gets
// the key by notification; A reports the release unconfirmed (ErrUnknown)
// and does not enter again while the waiter holds.
func TestAdversary74b_BlackholedReplyOfReleaseToWaiter(t *testing.T) {
	t.Parallel()
	adv74bLostReleaseReply(t, leasetest.Blackhole)
}

func adv74bLostReleaseReply(t *testing.T, fault leasetest.Fault) {
	st := watchStalls(t, 20*time.Millisecond)
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	cA, recA := adv74bProxied(t, p, lease.WithRecheck(5*time.Second))
	cB, _ := newClient(t, srv.Client(t), lease.WithRecheck(5*time.Second))
	ctx := context.Background()
	key := "adv74b-cutrel"
	var spans adv74bSpans
	// A's command connection opens first and follows Set; every
	// connection opened after (the subscription) passes whatever Set says,
	// so that the cut falls on a command's reply, not on a notice.
	// (A release first loads the release script: an EVALSHA whose NOSCRIPT
	// reply is blackholed would never be sent again as EVAL.)
	if err := cA.Do(ctx, "adv74b-warm", lease.Spec{TTL: time.Second, Deadline: time.Second, Fence: true}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.SetNew(leasetest.Pass)
	s := lease.Spec{TTL: 6 * time.Second, Deadline: 4 * time.Second, Keep: 20 * time.Second, Fence: true}
	var tokA lease.Token
	if err := cA.Do(ctx, key, s, adv74bRun(&spans, "A", 0, &tokA, nil)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	// A's second (kept) call; B queues during it.
	release := make(chan struct{})
	aDone := make(chan error, 1)
	var aOut time.Time
	go func() {
		aDone <- cA.Do(ctx, key, s, func(ctx context.Context) error {
			in := time.Now()
			tk, _ := lease.TokenFrom(ctx)
			if tk != tokA {
				t.Errorf("kept call token %d, first call's %d", tk, tokA)
			}
			<-release
			p.Set(fault) // the next reply: the release's
			aOut = time.Now()
			spans.add(adv74bSpan{who: "A", tok: tk, in: in, out: aOut})
			return nil
		})
	}()
	var tokB lease.Token
	bEntered := make(chan time.Time, 1)
	bDone := make(chan error, 1)
	go func() {
		bDone <- cB.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 5 * time.Second, Fence: true},
			adv74bRun(&spans, "B", time.Second, &tokB, bEntered))
	}()
	adv33WaitQueued(t, cB, key, 3*time.Second)
	close(release)
	aErr := <-aDone
	aRet := time.Now()
	t.Logf("A's kept call returned %v, %v after its fn", aErr, aRet.Sub(aOut).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			for _, e := range recA.Events() {
				t.Logf("A %s %v took %v err %v", e.At.Format("15:04:05.000"), e.Kind, e.Took, e.Err)
			}
		}
	}()
	var bIn time.Time
	select {
	case bIn = <-bEntered:
	case err := <-bDone:
		t.Fatalf("B: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("B never entered")
	}
	t.Logf("A: %v; cut %d; B entered %v after A's fn returned", aErr, p.Cut(), bIn.Sub(aOut).Round(time.Millisecond))
	if bound := 700*time.Millisecond + st.lost(aOut, bIn); bIn.Sub(aOut) > bound {
		t.Errorf("B entered %v after A's kept call ended, want ≤ %v (the release ran; its reply was cut)", bIn.Sub(aOut), bound)
	}
	if aErr != nil && !adv56InClass(aErr) {
		t.Errorf("A's error outside the classes: %v", aErr)
	}
	// The handoff's release may be a kept lease's, on a goroutine of its
	// own: wait for its report (the warm-up's release is the first).
	waitFor(2*time.Second, func() bool {
		return recA.Count(lease.EventReleaseUnconfirmed)+recA.Count(lease.EventReleased) >= 2
	})
	unconf := recA.Count(lease.EventReleaseUnconfirmed)
	rel := recA.Count(lease.EventReleased)
	t.Logf("A events: released %d, unconfirmed %d", rel, unconf)
	if p.Cut() > 0 && aErr == nil && rel == 0 && unconf == 0 {
		t.Errorf("a reply was cut, A returned nil, and no release was reported either way")
	}
	if fault == leasetest.Blackhole {
		if aErr == nil && unconf == 0 {
			t.Errorf("the release's reply never came, yet A returned nil and reported no unconfirmed release")
		}
		for _, e := range recA.Events() {
			if e.Kind == lease.EventReleaseUnconfirmed && !errors.Is(e.Err, lease.ErrUnknown) {
				t.Errorf("unconfirmed release with no reply reported as %v, want ErrUnknown", e.Err)
			}
		}
		p.Set(leasetest.Pass)
	}
	// A must not enter again while B holds.
	if err := cA.Do(ctx, key, lease.Spec{TTL: 6 * time.Second, Deadline: time.Second, Keep: 20 * time.Second, Fence: true}, adv74bRun(&spans, "A", 0, nil, nil)); err == nil {
		t.Errorf("A entered again while B holds the key")
	}
	_ = aRet
	if err := <-bDone; err != nil {
		t.Errorf("B: %v", err)
	}
	if tokB <= tokA {
		t.Errorf("B's token %d not above A's kept token %d", tokB, tokA)
	}
	spans.check(t)
	for _, e := range recA.Events() {
		t.Logf("A %v %v", e.Kind, e.Err)
	}
}

// Keep with fencing: the kept calls share one token and write under it;
// after the lease is handed to a waiter in another Client, the old
// holder's late write with the kept token is refused (ErrStale), by the
// memory store and by the Redis store; the holder's next call has a
// larger token than the new holder's.
func TestAdversary74b_KeptTokenLateWriteIsStale(t *testing.T) {
	t.Parallel()
	cA, _ := sharedClient(t, lease.WithRecheck(200*time.Millisecond))
	cB, _ := sharedClient(t, lease.WithRecheck(200*time.Millisecond))
	rstore := fence.NewRedis(shared.Client(t))
	mem := fence.NewMemory[int]()
	ctx := context.Background()
	key := "adv74b-fence"
	rkey := "adv74b-fence-data"
	s := lease.Spec{TTL: 2 * time.Second, Deadline: 2 * time.Second, Keep: 20 * time.Second, Fence: true}
	var stamps []fence.Stamp
	for i := 0; i < 3; i++ {
		if err := cA.Do(ctx, key, s, func(ctx context.Context) error {
			st, err := fence.From(ctx)
			if err != nil {
				return err
			}
			stamps = append(stamps, st)
			if err := mem.Set(st, key, i); err != nil {
				return err
			}
			return rstore.Set(ctx, st, rkey, "A")
		}); err != nil {
			t.Fatalf("kept call %d: %v", i, err)
		}
	}
	for i, st := range stamps[1:] {
		if st.Token != stamps[0].Token {
			t.Errorf("kept call %d token %d, first %d", i+1, st.Token, stamps[0].Token)
		}
	}
	old := stamps[len(stamps)-1]
	var bStamp fence.Stamp
	if err := cB.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second, Fence: true}, func(ctx context.Context) error {
		var err error
		if bStamp, err = fence.From(ctx); err != nil {
			return err
		}
		if err := mem.Set(bStamp, key, 100); err != nil {
			return err
		}
		return rstore.Set(ctx, bStamp, rkey, "B")
	}); err != nil {
		t.Fatalf("B: %v", err)
	}
	if bStamp.Token <= old.Token {
		t.Errorf("B's token %d not above the kept token %d", bStamp.Token, old.Token)
	}
	if err := mem.Set(old, key, 7); !errors.Is(err, fence.ErrStale) {
		t.Errorf("late memory write with the kept token: %v, want ErrStale", err)
	}
	if err := rstore.Set(ctx, old, rkey, "late"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("late Redis write with the kept token: %v, want ErrStale", err)
	}
	if v, _, _ := mem.Get(key); v != 100 {
		t.Errorf("memory value %d, want B's 100", v)
	}
	var next fence.Stamp
	if err := cA.Do(ctx, key, s, func(ctx context.Context) error {
		var err error
		next, err = fence.From(ctx)
		if err != nil {
			return err
		}
		return mem.Set(next, key, 8)
	}); err != nil {
		t.Errorf("A after B: %v", err)
	}
	if next.Token <= bStamp.Token {
		t.Errorf("A's next token %d not above B's %d", next.Token, bStamp.Token)
	}
}

// Close while A's kept call is in its function and B (another Client)
// waits for the key: Close returns within the release timeout; when the
// call returns its lease goes to B at once; nothing is left held after B.
// Then the same with the lease kept idle when Close comes.
func TestAdversary74b_CloseWithKeptCallAndQueuedWaiter(t *testing.T) {
	t.Parallel()
	st := watchStalls(t, 20*time.Millisecond)
	const relTimeout = 300 * time.Millisecond
	for _, inCall := range []bool{true, false} {
		name := "idle"
		if inCall {
			name = "in-call"
		}
		t.Run(name, func(t *testing.T) {
			rdbA := shared.Client(t)
			cA, err := lease.New(rdbA, lease.WithReleaseTimeout(relTimeout), lease.WithRecheck(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer cA.Close()
			cB, _ := sharedClient(t, lease.WithRecheck(5*time.Second))
			cI, _ := sharedClient(t)
			ctx := context.Background()
			key := "adv74b-close-" + name
			var spans adv74bSpans
			s := lease.Spec{TTL: 6 * time.Second, Deadline: 5 * time.Second, Keep: 30 * time.Second, Fence: true}
			if err := cA.Do(ctx, key, s, adv74bRun(&spans, "A", 0, nil, nil)); err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			aDone := make(chan error, 1)
			aIn := make(chan struct{})
			var aOut time.Time
			if inCall {
				go func() {
					aDone <- cA.Do(ctx, key, s, func(ctx context.Context) error {
						in := time.Now()
						close(aIn)
						<-release
						aOut = time.Now()
						spans.add(adv74bSpan{who: "A", in: in, out: aOut})
						return nil
					})
				}()
				<-aIn
			}
			bEntered := make(chan time.Time, 1)
			bDone := make(chan error, 1)
			go func() {
				bDone <- cB.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 5 * time.Second, Fence: true},
					adv74bRun(&spans, "B", 100*time.Millisecond, nil, bEntered))
			}()
			if inCall {
				adv33WaitQueued(t, cI, key, 3*time.Second)
			} else {
				// B's announcement may take the idle lease before Close
				// does: Close must still be bounded and leave nothing.
				time.Sleep(2 * time.Millisecond)
			}
			closeStart := time.Now()
			closed := make(chan error, 1)
			go func() { closed <- cA.Close() }()
			var closeEnd time.Time
			select {
			case err := <-closed:
				closeEnd = time.Now()
				if err != nil {
					t.Errorf("Close: %v", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("Close did not return in 3s")
			}
			if took, bound := closeEnd.Sub(closeStart), relTimeout+150*time.Millisecond+st.lost(closeStart, closeEnd); took > bound {
				t.Errorf("Close took %v, want ≤ %v", took, bound)
			}
			from := closeEnd
			if inCall {
				select {
				case <-bEntered:
					t.Errorf("B entered while A's kept call still runs")
				case <-time.After(200 * time.Millisecond):
				}
				close(release)
				if err := <-aDone; err != nil && !adv56InClass(err) {
					t.Errorf("A's call across Close: %v", err)
				}
				from = time.Now()
			}
			var bIn time.Time
			select {
			case bIn = <-bEntered:
			case err := <-bDone:
				t.Fatalf("B: %v", err)
			case <-time.After(4 * time.Second):
				t.Fatal("B never entered")
			}
			if d, bound := bIn.Sub(from), 500*time.Millisecond+st.lost(from, bIn); d > bound {
				t.Errorf("B entered %v after A let go, want ≤ %v", d, bound)
			}
			if err := <-bDone; err != nil {
				t.Errorf("B: %v", err)
			}
			info, err := cI.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if info.Holder != "" || info.Queued != 0 {
				t.Errorf("after Close and B: holder %q queued %d, want free", info.Holder, info.Queued)
			}
			if err := cA.Do(ctx, key, s, func(context.Context) error { return nil }); !errors.Is(err, lease.ErrClosed) {
				t.Errorf("Do after Close: %v, want ErrClosed", err)
			}
			spans.check(t)
		})
	}
}

// Nothing kept outlives Keep: a lease kept after its last call is
// released when the keep ends (the key free within slack of it); when the
// keeper's connection goes silent just before that end, its renewals stop
// at the keep's end all the same, so the key is free by the keep's end
// plus TTL (plus slack), never renewed past it.
func TestAdversary74b_KeepEndBoundsKeyLife(t *testing.T) {
	t.Parallel()
	for _, silent := range []bool{false, true} {
		name := "released"
		if silent {
			name = "silent"
		}
		t.Run(name, func(t *testing.T) {
			st := watchStalls(t, 20*time.Millisecond)
			srv := leasetest.StartRedis(t)
			p := leasetest.StartProxy(t, srv.Addr())
			cA, recA := adv74bProxied(t, p)
			cI, _ := newClient(t, srv.Client(t))
			ctx := context.Background()
			key := "adv74b-keepend"
			ttl := 900 * time.Millisecond
			keep := 1200 * time.Millisecond
			if err := cA.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: time.Second, Keep: keep, Fence: true}, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			keepEnd := time.Now().Add(keep)
			if silent {
				time.Sleep(keep - 150*time.Millisecond)
				p.Set(leasetest.Blackhole)
			}
			bound := 300 * time.Millisecond
			if silent {
				bound += ttl
			}
			var info lease.Info
			var freeAt time.Time
			for time.Now().Before(keepEnd.Add(bound + 2*time.Second)) {
				var err error
				info, err = cI.Inspect(ctx, key)
				if err == nil && info.Holder == "" {
					freeAt = time.Now()
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if freeAt.IsZero() {
				t.Fatalf("the key is still held %v after the keep ended: %+v", time.Since(keepEnd), info)
			}
			if late := freeAt.Sub(keepEnd); late > bound+st.lost(keepEnd, freeAt) {
				t.Errorf("the key was freed %v after the keep ended, want ≤ %v", late, bound)
			}
			t.Logf("freed %v after the keep's end; released %d unconfirmed %d", freeAt.Sub(keepEnd).Round(time.Millisecond),
				recA.Count(lease.EventReleased), recA.Count(lease.EventReleaseUnconfirmed))
			p.Set(leasetest.Pass)
		})
	}
}
