package lease_test

// Adversarial tests, round 16 (adv16): leader election (Client.Lead, Elect,
// Leader, WatchLeader) against real redis-server processes, fault proxies
// and candidate subprocesses (the helperCandidate of lead_harness_test.go).
// Run: go test ./runtime/lease -run 'TestAdversary16' -race -count=1 -v

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv16Holder returns the identity part of the lock's value ("" when free).
func adv16Holder(ctx context.Context, rdb *redis.Client, key string) string {
	v, err := rdb.Get(ctx, lockKey(key)).Result()
	if err != nil {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(v, "~"), ":")
	return id
}

// The fn context of a term must end no later than the lease really ends on
// the server. The leader's replies are blackholed (its requests, renewals
// included, still reach Redis), then delayed: the test samples the lock
// key every millisecond on a connection of its own and records when the
// leader's identity stops holding it; fn's context must have been
// cancelled (ErrLost) before that.
func TestAdversary16_FnCtxEndsBeforeServerExpiry(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	for _, fault := range []string{"blackhole", "delay"} {
		t.Run(fault, func(t *testing.T) {
			key := uniqueKey(t)
			cands := newCandidates(t, srv, 1, lease.WithRecheck(100*time.Millisecond))
			cd := cands[0]
			type entered struct {
				l      *lease.Lease
				cancel time.Time
				cause  error
			}
			in := make(chan *entered, 4)
			out := make(chan *entered, 4)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- cd.c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: "victim", Backoff: time.Hour}, func(fctx context.Context) error {
					l, _ := lease.FromContext(fctx)
					e := &entered{l: l}
					in <- e
					<-fctx.Done()
					e.cancel, e.cause = time.Now(), context.Cause(fctx)
					out <- e
					return nil
				})
			}()
			var e *entered
			select {
			case e = <-in:
			case <-time.After(3 * time.Second):
				t.Fatal("no term")
			}
			id := adv16Holder(context.Background(), rdb, key)
			if id == "" {
				t.Fatal("the key is free while a term runs")
			}
			time.Sleep(ttl / 2) // a renewal or two confirmed first
			switch fault {
			case "blackhole":
				cd.proxy.Set(leasetest.Blackhole)
			case "delay":
				cd.proxy.SetDelay(ttl) // every reply arrives after the validity it would confirm
			}
			var gone time.Time
			deadline := time.Now().Add(4 * ttl)
			for time.Now().Before(deadline) {
				if adv16Holder(context.Background(), rdb, key) != id {
					gone = time.Now()
					break
				}
				time.Sleep(time.Millisecond)
			}
			if gone.IsZero() {
				t.Fatalf("the leader's lease still held the key %v after the fault", 4*ttl)
			}
			select {
			case e = <-out:
			case <-time.After(2 * time.Second):
				t.Fatalf("fn's context was not cancelled (the server's key gave up the identity at %v)", gone.Format("15:04:05.000"))
			}
			if !errors.Is(e.cause, lease.ErrLost) {
				t.Errorf("fn's cause %v, want ErrLost", e.cause)
			}
			if !e.cancel.Before(gone) {
				t.Errorf("fn's context was cancelled at %v, after the server dropped the lease at %v (%v late)",
					e.cancel.Format("15:04:05.000"), gone.Format("15:04:05.000"), e.cancel.Sub(gone))
			}
			t.Logf("%s: fn cancelled %v before the server's key let go", fault, gone.Sub(e.cancel).Round(time.Millisecond))
			cd.proxy.Set(leasetest.Pass)
			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Lead = %v, want nil after ctx ended", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Lead did not return")
			}
		})
	}
}

// Tokens strictly increase across terms whatever happens to the data:
// a restart without persistence, FLUSHALL, the counter key deleted, and a
// counter TTL of 1ms (the counter gone before every next grant). Each step
// ends the current term (the leader's renewal finds its key gone) and the
// next term's token must exceed every earlier one.
func TestAdversary16_TokenFloorAcrossDataLoss(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	cands := newCandidates(t, srv, 2, lease.WithRecheck(50*time.Millisecond), lease.WithCounterTTL(time.Millisecond))
	e := newElection(t, key, lease.LeadSpec{TTL: ttl, Backoff: 50 * time.Millisecond}, rdb)
	r0 := e.lead(cands[0])
	r1 := e.lead(cands[1])
	prev := e.next(3 * time.Second)
	ctx := context.Background()
	steps := []struct {
		name string
		do   func() error
	}{
		{"restart", srv.Restart},
		{"flushall", func() error { return rdb.FlushAll(ctx).Err() }},
		{"del lock+counter", func() error { return rdb.Del(ctx, lockKey(key), "lease:{"+key+"}:f").Err() }},
		{"restart again", srv.Restart},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		next := e.next(3 * time.Second)
		for next.token == prev.token { // cannot happen: tokens are unique per grant
			next = e.next(3 * time.Second)
		}
		if next.token <= prev.token {
			t.Errorf("after %s: term %d of %s follows term %d of %s", st.name, next.token, next.cand, prev.token, prev.cand)
		}
		prev = next
	}
	r0.stop(t)
	r1.stop(t)
	e.markLostFromEvents(cands...)
	e.check()
}

// A candidate's ctx cancelled at the very moment the leader steps down and
// hands it the lease: the grant must pass on to the next candidate at
// once (not after a TTL), the cancelled candidate's Lead returns nil and
// runs no term afterwards; repeated with the race shifted by a few
// hundred microseconds each round.
func TestAdversary16_CancelRacingHandover(t *testing.T) {
	const ttl = 2 * time.Second // a grant stuck with the cancelled one would show as a ~2s gap
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	cands := newCandidates(t, srv, 3, lease.WithRecheck(time.Second))
	e := newElection(t, key, lease.LeadSpec{TTL: ttl}, rdb)
	runs := map[string]*running{}
	for _, cd := range cands {
		runs[cd.name] = e.lead(cd)
	}
	cur := e.next(3 * time.Second)
	var slow []time.Duration
	st := watchStalls(t, 5*time.Millisecond)
	for round := 0; round < 12; round++ {
		queued(t, rdb, key, 2)
		// The first in the queue is the one the release hands the lease to.
		first, err := rdb.ZRange(context.Background(), "lease:{"+key+"}:q", 0, 0).Result()
		if err != nil || len(first) == 0 {
			t.Fatalf("queue: %v %v", first, err)
		}
		var victim *candidate
		for _, cd := range cands {
			if strings.Contains(first[0], "/"+cd.name+"|") {
				victim = cd
			}
		}
		if victim == nil || victim.name == cur.cand {
			t.Fatalf("round %d: first in queue %q is not a waiting candidate (leader %s)", round, first[0], cur.cand)
		}
		rv := runs[victim.name]
		shift := time.Duration(round%4) * 200 * time.Microsecond
		stopAt := time.Now()
		go func() { time.Sleep(shift); rv.cancel() }()
		runs[cur.cand].cancel()
		rv.stop(t)
		stoppedAt := time.Now()
		next := e.next(2 * time.Second)
		if next.cand == victim.name {
			// It entered before its ctx ended: allowed only if that term
			// started before Lead returned.
			if next.from.After(stoppedAt) {
				t.Fatalf("round %d: %s started a term after its Lead returned", round, victim.name)
			}
			next = e.next(2 * time.Second)
		}
		// A stuck grant shows as the re-check (1s) or the TTL; the time
		// this process did not run is not the handover's.
		if d := next.from.Sub(stopAt); d-st.lost(stopAt, next.from) > 500*time.Millisecond {
			slow = append(slow, d)
			t.Errorf("round %d: %s led %v after the handover raced %s's cancel (the grant was stuck with the cancelled candidate)", round, next.cand, d.Round(time.Millisecond), victim.name)
		}
		runs[cur.cand].stop(t)
		runs[cur.cand] = e.lead(byName(cands, cur.cand))
		runs[victim.name] = e.lead(victim)
		cur = next
	}
	for _, r := range runs {
		r.stop(t)
	}
	e.markLostFromEvents(cands...)
	e.check()
}

func byName(cs []*candidate, name string) *candidate {
	for _, c := range cs {
		if c.name == name {
			return c
		}
	}
	return nil
}

// adv16SlowObserver blocks the campaign's goroutine on EventAcquired once:
// a pause (GC, SIGSTOP, a slow hook) between the grant's validity check
// and fn's entry.
type adv16SlowObserver struct {
	pause time.Duration
	armed atomic.Bool
}

func (o *adv16SlowObserver) Observe(ev lease.Event) {
	if ev.Kind == lease.EventAcquired && o.armed.CompareAndSwap(true, false) {
		time.Sleep(o.pause)
	}
}

// A pause between the grant's check (MinValidity left) and fn's entry that
// lasts past the lease: another candidate takes over meanwhile. When the
// paused candidate resumes, its fn must not run as a leader: either fn is
// not entered, or it is entered with its context already cancelled
// (ErrLost). Found by the round (fixed: run looks at the validity again
// as the last thing before fn). Observed before the fix: fn is always entered,
// with a lease that reports no validity left while the other candidate's
// term runs; in most runs its context is still live at entry (the
// validity timer, armed in run, has not fired yet), so two fns believe
// they lead at once. Cause: the MinValidity check is made when the reply
// is read (acquire.go:101, wait.go:117) and never again before fn is
// entered (run.go:93-94); the Observer call in between (acquire.go:122)
// stands in for any pause there (GC, SIGSTOP, a slow hook).
func TestAdversary16_PauseBetweenGrantAndEntry(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	obs := &adv16SlowObserver{pause: 2 * ttl}
	pA := leasetest.StartProxy(t, srv.Addr())
	rdbA := redis.NewClient(&redis.Options{Addr: pA.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdbA.Close() })
	cA, err := lease.New(rdbA, lease.WithObserver(obs), lease.WithRecheck(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cA.Close() })
	cB := newCandidates(t, srv, 1, lease.WithRecheck(50*time.Millisecond))[0]

	type seen struct {
		at        time.Time
		ctxErr    error
		remaining time.Duration
		holder    string
		own       string
	}
	aIn := make(chan seen, 1)
	obs.armed.Store(true)
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		cA.Lead(ctxA, key, lease.LeadSpec{TTL: ttl, Owner: "A", Backoff: time.Hour}, func(ctx context.Context) error {
			// What a leader sees as it starts: is it leading?
			l, _ := lease.FromContext(ctx)
			s := seen{at: time.Now(), ctxErr: ctx.Err(), remaining: l.Remaining(), own: l.Owner()}
			s.holder = adv16Holder(context.Background(), rdb, key)
			select {
			case aIn <- s:
			default:
			}
			<-ctx.Done()
			return nil
		})
	}()
	// A is now paused in its observer with a fresh grant; B campaigns.
	time.Sleep(20 * time.Millisecond)
	bIn := make(chan time.Time, 1)
	ctxB, stopB := context.WithCancel(context.Background())
	doneB := make(chan struct{})
	go func() {
		defer close(doneB)
		cB.c.Lead(ctxB, key, lease.LeadSpec{TTL: ttl, Owner: "B"}, func(ctx context.Context) error {
			select {
			case bIn <- time.Now():
			default:
			}
			<-ctx.Done()
			return nil
		})
	}()
	var bFrom time.Time
	select {
	case bFrom = <-bIn:
	case <-time.After(3 * time.Second):
		t.Fatal("B never led")
	}
	var a seen
	select {
	case a = <-aIn:
	case <-time.After(3 * time.Second):
		t.Log("A's fn was never entered (held)")
	}
	stopA()
	stopB()
	<-doneA
	<-doneB
	if a.at.IsZero() {
		return
	}
	t.Logf("B led from %v; A entered fn at %v: ctx.Err()=%v, Remaining()=%v, key held by %q (A is %q)",
		bFrom.Format("15:04:05.000"), a.at.Format("15:04:05.000"), a.ctxErr, a.remaining, a.holder, a.own)
	// "Enter only if valid-until − now ≥ MinValidity" (DESIGN §4), "a term
	// starts only on a confirmed grant with min-validity left" (README):
	// checked when the reply was read, not when fn is entered.
	if minValidity := ttl / 2; a.remaining < minValidity {
		t.Errorf("A's fn was entered %v after B's term started, with %v of validity left (MinValidity %v), the key held by another (%q); its context at entry: %v (nil = A believes it leads alongside B)",
			a.at.Sub(bFrom).Round(time.Millisecond), a.remaining, minValidity, a.holder, a.ctxErr)
	}
}

// adv16Ghosts samples the lock key every millisecond and measures how long
// it held an identity whose candidate was not in fn ("a leader that does
// not know it leads"), using the identities fn reported at entry/exit.
type adv16Ghosts struct {
	mu      sync.Mutex
	inFn    map[string]bool
	longest time.Duration
	who     string
}

func (g *adv16Ghosts) enter(id string, in bool) {
	g.mu.Lock()
	if g.inFn == nil {
		g.inFn = map[string]bool{}
	}
	g.inFn[id] = in
	g.mu.Unlock()
}

func (g *adv16Ghosts) watch(ctx context.Context, rdb *redis.Client, key string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var since time.Time
		var cur string
		for ctx.Err() == nil {
			id := adv16Holder(context.Background(), rdb, key)
			g.mu.Lock()
			ghost := id != "" && !g.inFn[id]
			if ghost {
				if id != cur || since.IsZero() {
					cur, since = id, time.Now()
				}
				if d := time.Since(since); d > g.longest {
					g.longest, g.who = d, id
				}
			} else {
				since = time.Time{}
			}
			g.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	return done
}

// The reply to a campaign's grant is lost (the connection is cut after
// the server ran the acquire), with go-redis retries on (the replay finds
// the grant) and off (the outcome is unknown: released). Two candidates
// campaign; every term is recorded. Neither may lead without knowing it
// for longer than a release takes, and no two terms overlap.
func TestAdversary16_LostGrantReply(t *testing.T) {
	const ttl = 600 * time.Millisecond
	for _, retries := range []int{0, -1} {
		t.Run(fmt.Sprintf("MaxRetries=%d", retries), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			rdb := srv.Client(t)
			key := uniqueKey(t)
			// Load the scripts first: the cut reply must be the grant's.
			warm, _ := newClient(t, rdb)
			if err := warm.Do(context.Background(), key+"-warm", lease.Spec{TTL: ttl, Deadline: time.Second, Fence: true}, func(ctx context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			e := newElection(t, key, lease.LeadSpec{TTL: ttl, Backoff: 50 * time.Millisecond}, rdb)
			var g adv16Ghosts
			mk := func(name string) *candidate {
				p := leasetest.StartProxy(t, srv.Addr())
				r := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: retries})
				t.Cleanup(func() { r.Close() })
				c, rec := newClient(t, r, lease.WithRecheck(100*time.Millisecond))
				return &candidate{name: name, proxy: p, c: c, rec: rec}
			}
			a, b := mk("A"), mk("B")
			wctx, wstop := context.WithCancel(context.Background())
			wdone := g.watch(wctx, rdb, key)
			lead := func(cd *candidate) (context.CancelFunc, chan error) {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- cd.c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: cd.name, Backoff: 50 * time.Millisecond}, func(fctx context.Context) error {
						l, _ := lease.FromContext(fctx)
						g.enter(l.Owner(), true)
						tm := &term{cand: cd.name, token: l.Token(), from: time.Now()}
						e.add(tm)
						<-fctx.Done()
						e.update(func() { tm.to = time.Now(); tm.lost = errors.Is(context.Cause(fctx), lease.ErrLost) })
						g.enter(l.Owner(), false)
						return nil
					})
				}()
				return cancel, done
			}
			a.proxy.Set(leasetest.CutNextReply)
			stopA, doneA := lead(a)
			waitFor(2*time.Second, func() bool { return a.proxy.Cut() > 0 })
			stopB, doneB := lead(b)
			first := e.next(3 * time.Second)
			// Hand over a few times, cutting the next reply of whoever waits.
			cur := first
			for i := 0; i < 4; i++ {
				waiter, stopCur := b, stopA
				if cur.cand == "B" {
					waiter, stopCur = a, stopB
				}
				queued(t, rdb, key, 1)
				waiter.proxy.Set(leasetest.CutNextReply)
				stopCur()
				next := e.next(3 * time.Second)
				if cur.cand == "A" {
					<-doneA
					stopA, doneA = lead(a)
				} else {
					<-doneB
					stopB, doneB = lead(b)
				}
				cur = next
			}
			stopA()
			stopB()
			<-doneA
			<-doneB
			wstop()
			<-wdone
			e.markLostFromEvents(a, b)
			e.check()
			t.Logf("cuts: A %d, B %d; longest a key was held by a candidate not in fn: %v (%s)", a.proxy.Cut(), b.proxy.Cut(), g.longest, g.who)
			if g.longest > 300*time.Millisecond {
				t.Errorf("the key was held %v by %s, which was not leading (a leader that does not know it leads)", g.longest, g.who)
			}
		})
	}
}

// Close of the leader's Client while another process's candidate waits:
// the term ends with ErrClosed, the lease is handed over at once (not after
// its TTL), Lead returns ErrClosed, a watch on the closed Client ends, and
// nothing the closed Client started is left running.
func TestAdversary16_CloseDuringTermHandsOver(t *testing.T) {
	const ttl = 3 * time.Second
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	cb := newCandidates(t, srv, 1, lease.WithRecheck(time.Second))[0]
	e := newElection(t, key, lease.LeadSpec{TTL: ttl}, rdb)

	st := watchStalls(t, 5*time.Millisecond) // before IgnoreCurrent: it ends at Cleanup
	ignore := goleak.IgnoreCurrent()
	rA := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	cA, err := lease.New(rA)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan struct{})
	var cause error
	doneA := make(chan error, 1)
	go func() {
		doneA <- cA.Lead(context.Background(), key, lease.LeadSpec{TTL: ttl, Owner: "A"}, func(ctx context.Context) error {
			close(in)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		})
	}()
	<-in
	watch := cA.WatchLeader(context.Background(), key)
	if l := <-watch; l.Owner != "A" {
		t.Fatalf("watch: %+v, want A", l)
	}
	rb := e.lead(cb)
	queued(t, rdb, key, 1)
	closedAt := time.Now()
	cA.Close()
	next := e.next(2 * time.Second)
	if d, lost := next.from.Sub(closedAt), st.lost(closedAt, next.from); d-lost > 200*time.Millisecond {
		t.Errorf("B led %v after A's Client closed (the process stalled for %v of it), want a handover at once", d, lost)
	}
	select {
	case err := <-doneA:
		if !errors.Is(err, lease.ErrClosed) || !errors.Is(cause, lease.ErrClosed) {
			t.Errorf("Lead = %v, fn cause %v; want ErrClosed", err, cause)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Lead did not return after Close")
	}
	timeout := time.After(2 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-watch:
		case <-timeout:
			t.Fatal("WatchLeader's channel was not closed after Close")
		}
	}
	rA.Close()
	rb.stop(t)
	adv16NoLeak(t, ignore, cb)
}

// adv16NoLeak closes the other candidates and checks that no goroutine is
// left beyond those running before ignore was taken.
func adv16NoLeak(t *testing.T, ignore goleak.Option, others ...*candidate) {
	t.Helper()
	for _, cd := range others {
		cd.c.Close()
		cd.proxy.Close()
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left behind: %v", err)
	}
}

// fn panics during a term: the panic leaves Lead (as documented for Do),
// the lease is released and handed to the waiting candidate at once, the
// panicking Client keeps no goroutine once closed.
func TestAdversary16_PanicInTerm(t *testing.T) {
	const ttl = 3 * time.Second
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	cb := newCandidates(t, srv, 1, lease.WithRecheck(time.Second))[0]
	e := newElection(t, key, lease.LeadSpec{TTL: ttl}, rdb)
	st := watchStalls(t, 5*time.Millisecond) // before IgnoreCurrent: it ends at Cleanup
	ignore := goleak.IgnoreCurrent()
	rA := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	cA, err := lease.New(rA)
	if err != nil {
		t.Fatal(err)
	}
	in, boom := make(chan struct{}), make(chan struct{})
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		cA.Lead(context.Background(), key, lease.LeadSpec{TTL: ttl, Owner: "A"}, func(ctx context.Context) error {
			close(in)
			<-boom
			panic("adv16 boom")
		})
	}()
	<-in
	rb := e.lead(cb)
	queued(t, rdb, key, 1)
	at := time.Now()
	close(boom)
	if r := <-recovered; r != "adv16 boom" {
		t.Errorf("recovered %v, want the panic", r)
	}
	next := e.next(2 * time.Second)
	if d, lost := next.from.Sub(at), st.lost(at, next.from); d-lost > 200*time.Millisecond {
		t.Errorf("B led %v after A's fn panicked (the process stalled for %v of it), want a handover at once", d, lost)
	}
	cA.Close()
	rA.Close()
	rb.stop(t)
	adv16NoLeak(t, ignore, cb)
}

// Two candidate processes paused in turn, each past its TTL, with a third
// candidate in this process: P1 leads and is SIGSTOPped; P2 takes over and
// is SIGSTOPped as soon as it leads; the in-process candidate takes over.
// Resumed, each paused leader must learn it lost (its term reported lost)
// and its late fenced write must be refused as stale. A watch on a Client
// of its own must follow: report each new leader within a re-check, and
// never go back to a deposed one.
func TestAdversary16_StackedPausedLeaders(t *testing.T) {
	t.Parallel()
	const ttl, recheck = 500 * time.Millisecond, 100 * time.Millisecond
	st := watchStalls(t, 5*time.Millisecond)
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	e := newElection(t, key, lease.LeadSpec{TTL: ttl}, rdb)
	watcher, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	type report struct {
		at    time.Time
		owner string
		err   error
	}
	var wmu sync.Mutex
	var reports []report
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		for l := range watcher.WatchLeader(wctx, key) {
			wmu.Lock()
			reports = append(reports, report{time.Now(), l.Owner, l.Err})
			wmu.Unlock()
		}
	}()

	p1 := e.startSub(t, "proc-1", srv.Addr())
	first := e.next(5 * time.Second)
	if first.cand != "proc-1" {
		t.Fatalf("first leader %s", first.cand)
	}
	p2 := e.startSub(t, "proc-2", srv.Addr())
	queued(t, rdb, key, 1)
	cands := newCandidates(t, srv, 1, lease.WithRecheck(recheck))
	rc := e.lead(cands[0])
	queued(t, rdb, key, 2)

	p1.signal(syscall.SIGSTOP)
	second := e.next(3 * time.Second)
	if second.cand == "proc-2" {
		p2.signal(syscall.SIGSTOP)
	}
	third := second
	if second.cand == "proc-2" {
		third = e.next(3 * time.Second)
	}
	time.Sleep(200 * time.Millisecond)
	p1.signal(syscall.SIGCONT)
	p2.signal(syscall.SIGCONT)
	for _, s := range []struct {
		p  *subCandidate
		tm *term
	}{{p1, first}, {p2, second}} {
		if s.tm.cand != s.p.name {
			continue
		}
		if !waitFor(2*time.Second, func() bool {
			var ended bool
			e.update(func() { ended = !s.tm.to.IsZero() && s.tm.lost })
			return ended
		}) {
			t.Errorf("%s: its term %d did not end reported lost after it resumed", s.p.name, s.tm.token)
		}
		s.p.send("write")
		if l := s.p.line(t, 2*time.Second); l != fmt.Sprintf("WRITE %d stale", s.tm.token) {
			t.Errorf("%s's late write: %q, want it refused as stale", s.p.name, l)
		}
	}
	time.Sleep(2 * recheck)
	rc.stop(t)
	e.next(3 * time.Second) // one of the resumed processes leads now
	time.Sleep(2 * recheck)
	wstop()
	<-wdone
	e.check()

	// The watch: after each term started, the new leader is reported
	// within a re-check (plus slack), and a deposed leader is never
	// reported again after its successor was.
	wmu.Lock()
	defer wmu.Unlock()
	var seq []string
	for _, r := range reports {
		seq = append(seq, fmt.Sprintf("%s@%s", r.owner, r.at.Format("05.000")))
	}
	t.Logf("terms: %s %d, %s %d, %s %d; watch: %v", first.cand, first.token, second.cand, second.token, third.cand, third.token, seq)
	for _, tm := range []*term{second, third} {
		var at time.Time
		for _, r := range reports {
			if r.owner == tm.cand && !r.at.Before(tm.from.Add(-50*time.Millisecond)) {
				at = r.at
				break
			}
		}
		if at.IsZero() {
			t.Errorf("the watch never reported %s's term %d", tm.cand, tm.token)
		} else if d := at.Sub(tm.from); d-st.lost(tm.from, at) > recheck+250*time.Millisecond {
			// 250ms: a term's start may be a subprocess's clock, whose
			// stalls this process does not see.
			t.Errorf("the watch reported %s's term %v after it started, want within a re-check", tm.cand, d)
		}
	}
}

// A Sentinel deployment whose primary is killed (SIGKILL) while a term
// runs and the other candidate waits: after the failover, the next term's
// token exceeds every earlier one, and terms overlap only if one of them
// was reported lost.
func TestAdversary16_SentinelKillPrimaryTokens(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	sn := leasetest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := sn.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	store := sn.FailoverClient(t)
	e := newElection(t, key, lease.LeadSpec{TTL: ttl, Backoff: 100 * time.Millisecond}, store)
	var cands []*candidate
	for i := range 2 {
		c, rec := newClient(t, sn.FailoverClient(t), lease.WithRecheck(100*time.Millisecond))
		cands = append(cands, &candidate{name: fmt.Sprintf("node-%d", i), c: c, rec: rec})
	}
	r0 := e.lead(cands[0])
	first := e.next(5 * time.Second)
	r1 := e.lead(cands[1])
	time.Sleep(300 * time.Millisecond) // the second is queued, a renewal or two went by
	old.Kill()
	if _, err := sn.WaitFailover(ctx, old); err != nil {
		t.Fatal(err)
	}
	var after *term
	for after == nil || after.token == first.token {
		after = e.next(10 * time.Second)
	}
	if after.token <= first.token {
		t.Errorf("after the failover: term %d of %s follows term %d of %s", after.token, after.cand, first.token, first.cand)
	}
	r0.stop(t)
	r1.stop(t)
	e.markLostFromEvents(cands...)
	terms := e.check()
	t.Logf("%d terms; first %d (%s), first after the failover %d (%s)", len(terms), first.token, first.cand, after.token, after.cand)
}

// Found by the round (fixed: a term's release gets the release timeout
// after ctx ends, by a deadline as by a cancel).
// A Lead whose ctx ends by a deadline (context.WithTimeout, a shutdown
// budget) rather than a cancel: "Lead returns nil when ctx ends (after
// releasing the lease if it led)", and a stop hands over at once. Here fn
// returns at once, so Lead campaigns again and again until the deadline;
// when the deadline comes within a few ms of a campaign's start, that
// campaign's grant (or its acquire in flight) is cleaned up with a release
// whose budget is min((end−start)/10, 20ms) past a deadline already gone,
// which may never be sent. Lead returns nil and the lease stays on the
// server for its full TTL: nobody leads and every other candidate waits a
// TTL (30s by default). Observed before the fix: failed in most runs
// (the key still holds the returned candidate's grant 100ms after Lead
// returned, with TTL 2s). Cause: Client.term sets a.end to ctx's deadline
// and a.reserve = min(releaseTimeout, (end−start)/10) (lead.go:218-222);
// release bounds itself by a.end floored at min(reserve, 20ms)
// (release.go:23-30), and unknown/releaseUnused/run use that release.
func TestAdversary16_DeadlineCtxLeavesGrantBehind(t *testing.T) {
	t.Parallel()
	// releaseTimedOut: a release of key was reported unconfirmed after
	// most of the release timeout (so it was given the timeout).
	releaseTimedOut := func(rec *leasetest.Recorder, key string) (time.Duration, bool) {
		for _, e := range rec.Events() {
			if e.Key == key && e.Kind == lease.EventReleaseUnconfirmed && e.Took >= lease.DefaultReleaseTimeout*4/5 {
				return e.Took, true
			}
		}
		return 0, false
	}
	const ttl = 2 * time.Second
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, rec := newClient(t, srv.Client(t))
	ghosts := 0
	var what []string
	for i := range 20 {
		key := uniqueKey(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+i*2)*time.Millisecond)
		err := c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: "A"}, func(ctx context.Context) error { return nil })
		cancel()
		if err != nil {
			t.Fatalf("Lead = %v, want nil once ctx ended", err)
		}
		returned := time.Now()
		time.Sleep(100 * time.Millisecond)
		if v, err := rdb.Get(context.Background(), lockKey(key)).Result(); err == nil {
			pttl := rdb.PTTL(context.Background(), lockKey(key)).Val()
			desc := fmt.Sprintf("%q held %v after Lead returned, PTTL %v", v, time.Since(returned).Round(time.Millisecond), pttl)
			if took, ok := releaseTimedOut(rec, key); ok {
				// The release had its whole timeout and got no answer (a
				// process or server stalled that long): reported, as
				// documented, and the key expires by its TTL. The bug was
				// a release given a budget already gone (a few ms).
				t.Logf("not counted: %s (its release went unconfirmed after %v)", desc, took.Round(time.Millisecond))
				continue
			}
			ghosts++
			what = append(what, desc)
		}
	}
	t.Logf("events: acquire_unknown %d, release_unconfirmed %d, low_validity %d", rec.Count(lease.EventAcquireUnknown), rec.Count(lease.EventReleaseUnconfirmed), rec.Count(lease.EventLowValidity))
	if ghosts > 0 {
		t.Errorf("in %d of 20 Lead calls ended by a ctx deadline, the candidate's grant stayed on the server after Lead returned nil (nobody leads until its TTL runs out): %v", ghosts, what)
	}
}
