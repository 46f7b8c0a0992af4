package lease_test

// Adversarial tests, round 72b: leader election (Client.Lead, Leader,
// WatchLeader) against real redis-server processes.
// Run: go test -race -count=1 -run 'Adversary72b' ./runtime/lease/ -v

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv72bTerm is one term as its fn saw it.
type adv72bTerm struct {
	owner      string
	token      lease.Token
	leaseTok   lease.Token // the Lease's Token() from FromContext
	from, to   time.Time
	cause      error
	concurrent int32 // fns running (this one included) at entry
}

// Several candidates in one Client (goroutines sharing its hub and queue
// handling) and in two other Clients churn through short terms: each fn
// returns nil (or an error) a few milliseconds after entry, so its Lead
// campaigns again at once while the others wait. Claim: terms of one key
// never overlap (no term reported lost in a fault-free run), one token per
// term, strictly increasing in the order terms start, the Lease's token
// and TokenFrom agree, and Leader (sampled meanwhile) names only terms
// that ran, with their owner.
func TestAdversary72b_SameClientCandidatesNeverOverlap(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	clients := make([]*lease.Client, 3)
	for i := range clients {
		clients[i], _ = newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	}
	var (
		mu      sync.Mutex
		terms   []*adv72bTerm
		running atomic.Int32
	)
	// The run ends by this deadline: a term running then ends with it.
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	type who struct {
		c     *lease.Client
		owner string
	}
	var cands []who
	for i := 0; i < 4; i++ {
		cands = append(cands, who{clients[0], fmt.Sprintf("c0-g%d", i)})
	}
	cands = append(cands, who{clients[1], "c1"}, who{clients[2], "c2"})
	leadErrs := make(chan error, len(cands))
	for i, cd := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			leadErrs <- cd.c.Lead(ctx, key, lease.LeadSpec{TTL: 600 * time.Millisecond, Owner: cd.owner, Backoff: 20 * time.Millisecond}, func(fctx context.Context) error {
				tm := &adv72bTerm{owner: cd.owner, from: time.Now(), concurrent: running.Add(1)}
				defer running.Add(-1)
				tm.token, _ = lease.TokenFrom(fctx)
				if l, ok := lease.FromContext(fctx); ok {
					tm.leaseTok = l.Token()
				}
				n++
				select {
				case <-time.After(time.Duration(2+(i+n)%5) * time.Millisecond):
				case <-fctx.Done():
					tm.cause = context.Cause(fctx)
				}
				tm.to = time.Now()
				mu.Lock()
				terms = append(terms, tm)
				mu.Unlock()
				if n%3 == 0 {
					return errors.New("fn failed (a term ending with an error)")
				}
				return nil
			})
		}()
	}
	// Leader sampled meanwhile, from a Client of its own.
	obs, _ := newClient(t, srv.Client(t))
	type sample struct {
		l  lease.Leader
		at time.Time
	}
	var samples []sample
	for ctx.Err() == nil {
		l, err := obs.Leader(context.Background(), key)
		if err != nil {
			t.Fatalf("Leader: %v", err)
		}
		if l.Holder != "" {
			samples = append(samples, sample{l, time.Now()})
		}
		time.Sleep(3 * time.Millisecond)
	}
	wg.Wait()
	close(leadErrs)
	for err := range leadErrs {
		if err != nil {
			t.Errorf("Lead after ctx ended = %v, want nil", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(terms, func(i, j int) bool { return terms[i].from.Before(terms[j].from) })
	if len(terms) < 20 {
		t.Fatalf("only %d terms in 2.5s of churn", len(terms))
	}
	byTok := map[lease.Token]*adv72bTerm{}
	led := map[string]int{}
	for i, tm := range terms {
		led[tm.owner]++
		byTok[tm.token] = tm
		if tm.token == 0 || tm.token != tm.leaseTok {
			t.Errorf("term of %s: TokenFrom %d, Lease.Token %d", tm.owner, tm.token, tm.leaseTok)
		}
		if tm.concurrent != 1 {
			t.Errorf("term %d of %s entered while %d fns ran", tm.token, tm.owner, tm.concurrent-1)
		}
		if tm.cause != nil && !errors.Is(tm.cause, context.DeadlineExceeded) {
			t.Errorf("term %d of %s ended early with cause %v in a fault-free run", tm.token, tm.owner, tm.cause)
		}
		if i > 0 {
			prev := terms[i-1]
			if tm.token <= prev.token {
				t.Errorf("term of %s started after %s's with token %d <= %d", tm.owner, prev.owner, tm.token, prev.token)
			}
			if tm.from.Before(prev.to) {
				t.Errorf("overlap: %s (term %d) entered %v before %s (term %d) returned", tm.owner, tm.token, prev.to.Sub(tm.from), prev.owner, prev.token)
			}
		}
	}
	if len(led) < 3 {
		t.Errorf("leaders %v: want the lease to move between candidates", led)
	}
	bad := 0
	for _, s := range samples {
		tm := byTok[s.l.Term]
		// A term granted near the end (ctx ended before entry) may be
		// missing; any other sample must name a term that ran.
		if tm == nil {
			if s.at.Before(terms[len(terms)-1].from) {
				bad++
				if bad < 5 {
					t.Errorf("Leader named term %d (owner %q) at %v, which no fn ran", s.l.Term, s.l.Owner, s.at.Format("15:04:05.000"))
				}
			}
			continue
		}
		if tm.owner != s.l.Owner {
			t.Errorf("Leader named term %d with owner %q; its fn was %s's", s.l.Term, s.l.Owner, tm.owner)
		}
	}
	t.Logf("%d terms, leaders %v, %d Leader samples", len(terms), led, len(samples))
}

// A candidate whose campaign ends while it waits in the queue (its ctx
// cancelled, or its Client closed) must leave the queue, so that the
// leader's step-down hands the lease at once to the candidate still
// waiting, not to the gone one (whose claim would hold the key for a
// re-check: a minute here).
func TestAdversary72b_GoneCampaignerLeavesQueue(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			const long = time.Minute
			srv := leasetest.StartRedis(t)
			rdb := srv.Client(t)
			key := uniqueKey(t)
			e := newElection(t, key, lease.LeadSpec{TTL: long}, rdb)
			cands := newCandidates(t, srv, 3, lease.WithRecheck(long))
			a := e.lead(cands[0])
			first := e.next(5 * time.Second)
			if first.cand != cands[0].name {
				t.Fatalf("first leader %s", first.cand)
			}
			b := e.lead(cands[1])
			queued(t, rdb, key, 1)
			c := e.lead(cands[2])
			queued(t, rdb, key, 2)
			goneAt := time.Now()
			if how == "cancel" {
				b.stop(t)
			} else {
				cands[1].c.Close()
				select {
				case <-b.done:
					if !errors.Is(b.err, lease.ErrClosed) {
						t.Fatalf("Lead after Close = %v, want ErrClosed", b.err)
					}
				case <-time.After(3 * time.Second):
					t.Fatal("Lead did not return after Close")
				}
			}
			t.Logf("%s: Lead returned %v after", how, time.Since(goneAt).Round(time.Millisecond))
			if !waitFor(2*time.Second, func() bool { return rdb.ZCard(context.Background(), "lease:{"+key+"}:q").Val() == 1 }) {
				t.Errorf("queue after %s's campaign ended: %v, want only the live candidate", cands[1].name, rdb.ZRange(context.Background(), "lease:{"+key+"}:q", 0, -1).Val())
			}
			stopAt := time.Now()
			a.stop(t)
			next := e.next(5 * time.Second)
			if next.cand != cands[2].name {
				t.Fatalf("after the step-down %s leads, want %s", next.cand, cands[2].name)
			}
			if d := next.from.Sub(stopAt); d > 2*time.Second {
				t.Errorf("the live candidate entered %v after the step-down, want at once", d)
			}
			c.stop(t)
			e.markLostFromEvents(cands...)
			e.check()
		})
	}
}

// ForceRelease of a leader's term. Claims: with a candidate waiting, it
// gets the lease at once (ForceRelease hands it over), and the forced-out
// leader is told within a third of its TTL (its next renewal) with a cause
// wrapping ErrLost that says it was released from outside; the new term's
// token is greater. With nobody waiting, WatchLeader reports nobody within
// a re-check, the leader is told, and it campaigns again and wins a new
// term with a greater token, which the watch reports.
func TestAdversary72b_ForceReleasedLeader(t *testing.T) {
	t.Parallel()
	const ttl, recheck = 900 * time.Millisecond, 150 * time.Millisecond
	const slack = 400 * time.Millisecond
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	admin, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))

	type tm struct {
		owner    string
		tok      lease.Token
		from, to time.Time
		cause    error
	}
	entered := make(chan *tm, 16)
	ended := make(chan *tm, 16)
	lead := func(c *lease.Client, owner string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: owner, Backoff: 50 * time.Millisecond}, func(fctx context.Context) error {
				x := &tm{owner: owner, from: time.Now()}
				x.tok, _ = lease.TokenFrom(fctx)
				entered <- x
				<-fctx.Done()
				x.to, x.cause = time.Now(), context.Cause(fctx)
				ended <- x
				return nil
			})
		}()
		return cancel, done
	}
	next := func(ch chan *tm, what string, within time.Duration) *tm {
		t.Helper()
		select {
		case x := <-ch:
			return x
		case <-time.After(within):
			t.Fatalf("no %s within %v", what, within)
		}
		return nil
	}
	ca, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	cb, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	log := logLeaders(admin.WatchLeader(wctx, key))
	reported := func(from time.Time, within time.Duration, what string, ok func(lease.Leader) bool) watched {
		t.Helper()
		return log.wait(t, from, within, "the watch's "+what, ok)
	}
	force := func() (time.Time, lease.Leader) {
		t.Helper()
		l, err := admin.Leader(context.Background(), key)
		if err != nil || l.Holder == "" {
			t.Fatalf("Leader before ForceRelease: %+v, %v", l, err)
		}
		at := time.Now()
		res, err := admin.ForceRelease(context.Background(), key, l.Holder)
		if err != nil {
			t.Fatalf("ForceRelease = %v, %v", res, err)
		}
		t.Logf("ForceRelease of %s term %d: %v", l.Owner, l.Term, res)
		return at, l
	}
	checkTold := func(x *tm, at time.Time) {
		t.Helper()
		if !errors.Is(x.cause, lease.ErrLost) || !strings.Contains(x.cause.Error(), "outside") {
			t.Errorf("forced-out leader %s: cause %v, want ErrLost saying it was released from outside", x.owner, x.cause)
		}
		if d := x.to.Sub(at); d > ttl/3+slack {
			t.Errorf("forced-out leader %s told %v after ForceRelease, want within TTL/3 (%v)", x.owner, d, ttl/3)
		}
	}

	// 1. Nobody waiting.
	cancelA, doneA := lead(ca, "A")
	a1 := next(entered, "first term", 5*time.Second)
	reported(time.Time{}, 2*time.Second, "A's first term", func(l lease.Leader) bool { return l.Term == a1.tok && l.Owner == "A" })
	at, _ := force()
	x := next(ended, "A told of the loss", 3*time.Second)
	checkTold(x, at)
	a2 := next(entered, "A's new term", 3*time.Second)
	if a2.owner != "A" || a2.tok <= a1.tok {
		t.Fatalf("after the forced release: term %d of %s, want A with a token > %d", a2.tok, a2.owner, a1.tok)
	}
	reported(at, 3*time.Second, "A's new term", func(l lease.Leader) bool { return l.Term == a2.tok && l.Owner == "A" })
	// Nobody must have been reported between the forced release and A's
	// new term, or A's new term directly; never A's old term after it was
	// told (a deposed leader reported as current).
	for _, s := range log.all() {
		if s.at.After(x.to.Add(recheck+slack)) && s.Term == a1.tok && s.Err == nil {
			t.Errorf("watch reported the forced-out term %d at %v, %v after its leader was told", a1.tok, s.at.Format("15:04:05.000"), s.at.Sub(x.to))
		}
	}

	// 2. B waits: the forced release hands it the lease at once.
	cancelB, doneB := lead(cb, "B")
	queued(t, rdb, key, 1)
	at, _ = force()
	b1 := next(entered, "B's term", 3*time.Second)
	if b1.owner != "B" || b1.tok <= a2.tok {
		t.Fatalf("after the forced release: term %d of %s, want B with a token > %d", b1.tok, b1.owner, a2.tok)
	}
	if d := b1.from.Sub(at); d > recheck+slack {
		t.Errorf("B entered %v after ForceRelease, want at once (the release hands the lease over)", d)
	}
	x = next(ended, "A told of the loss", 3*time.Second)
	if x.owner != "A" {
		t.Fatalf("term ended: %s's, want A's", x.owner)
	}
	checkTold(x, at)
	reported(at, 2*time.Second, "B's term", func(l lease.Leader) bool { return l.Term == b1.tok && l.Owner == "B" })

	cancelB()
	cancelA()
	for _, d := range []chan error{doneA, doneB} {
		select {
		case err := <-d:
			if err != nil {
				t.Errorf("Lead = %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Lead did not return")
		}
	}
	if n := rdb.Exists(context.Background(), lockKey(key)).Val(); n != 0 {
		t.Errorf("key still held after every candidate stopped")
	}
}

// The only candidate, a process of its own, is paused (SIGSTOP) past its
// TTL while it leads. Claims: a watch reports nobody within TTL + a
// re-check (the lease ran out); once resumed, the process learns its term
// was lost (fn's context cancelled with ErrLost) and campaigns again,
// starting a new term with a greater token, which the watch reports.
func TestAdversary72b_PausedSoleLeaderProcess(t *testing.T) {
	t.Parallel()
	const ttl, recheck = 500 * time.Millisecond, 100 * time.Millisecond
	const slack = 300 * time.Millisecond
	st := watchStalls(t, 5*time.Millisecond)
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	e := newElection(t, key, lease.LeadSpec{TTL: ttl}, rdb)
	observer, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	log := logLeaders(observer.WatchLeader(wctx, key))
	find := log.find
	sub := e.startSub(t, "proc-1", srv.Addr())
	first := e.next(5 * time.Second)
	if _, ok := find(time.Time{}, 2*time.Second, func(l lease.Leader) bool { return l.Term == first.token && l.Owner == "proc-1" }); !ok {
		t.Fatalf("watch never reported the first term %d", first.token)
	}
	pausedAt := time.Now()
	sub.signal(syscall.SIGSTOP)
	nobody, ok := find(pausedAt, 3*time.Second, func(l lease.Leader) bool { return l.Holder == "" && l.Err == nil })
	if !ok {
		t.Fatalf("watch never reported nobody while the sole leader was paused; reports %+v", log.all())
	}
	if d := nobody.at.Sub(pausedAt) - st.lost(pausedAt, nobody.at); d > ttl+recheck+slack {
		t.Errorf("the paused leader was reported gone %v after the pause, want within TTL + re-check (%v)", d, ttl+recheck)
	}
	if v := rdb.Exists(context.Background(), lockKey(key)).Val(); v != 0 {
		t.Errorf("the paused leader's key still exists past its TTL")
	}
	time.Sleep(400 * time.Millisecond)
	resumedAt := time.Now()
	sub.signal(syscall.SIGCONT)
	if !waitFor(3*time.Second, func() bool {
		var done bool
		e.update(func() { done = !first.to.IsZero() })
		return done
	}) {
		t.Fatal("the resumed leader's term did not end")
	}
	e.update(func() {
		if !first.lost {
			t.Errorf("the resumed leader's term %d ended without ErrLost", first.token)
		}
		if d := first.to.Sub(resumedAt); d > slack {
			t.Errorf("the resumed leader was told %v after it resumed, want at once (its validity had run out)", d)
		}
	})
	second := e.next(3 * time.Second)
	if second.cand != "proc-1" || second.token <= first.token {
		t.Fatalf("after resuming: term %d of %s, want proc-1 with a token > %d", second.token, second.cand, first.token)
	}
	if _, ok := find(resumedAt, 3*time.Second, func(l lease.Leader) bool { return l.Term == second.token }); !ok {
		t.Errorf("watch never reported the new term %d", second.token)
	}
	// The deposed term must not be reported again after nobody was.
	for _, s := range log.all() {
		if s.at.After(nobody.at) && s.Term == first.token {
			t.Errorf("watch reported the deposed term %d again at %v", first.token, s.at.Format("15:04:05.000"))
		}
	}
	e.check()
}

// A leader's step-down (ctx cancelled, nobody waiting) whose release reply
// is cut: the script ran, go-redis sees EOF and sends it again. Claims:
// Lead returns nil, the key is free at once (not after the TTL: a minute),
// the release is reported as a release (no EventReleaseUnconfirmed, no
// ErrLost in the term's outcome), and a watch (re-checks a minute apart)
// hears the step-down at once.
// Without go-redis's retry (MaxRetries -1) the outcome is unknown: it must
// be reported as unconfirmed (never as a confirmed release or a loss), the
// key is free all the same (the script ran).
func TestAdversary72b_StepDownCutReply(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{3, -1} {
		t.Run(fmt.Sprintf("retries=%d", retries), func(t *testing.T) {
			const long = time.Minute
			srv := leasetest.StartRedis(t)
			rdb := srv.Client(t)
			key := uniqueKey(t)
			r, p := adv40CutClient(t, srv, key, nil)
			if retries < 0 {
				p2 := leasetest.StartProxy(t, srv.Addr())
				r = redis.NewClient(&redis.Options{Addr: p2.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
				t.Cleanup(func() { r.Close() })
				r.AddHook(&adv40CutRelease{p: p2, key: key})
				p = p2
			}
			// The scripts loaded first: a fresh server would answer the
			// release's EVALSHA with NOSCRIPT, and the cut would drop that
			// answer (nothing ran) rather than the release's.
			warm, _ := newClient(t, srv.Client(t))
			if err := warm.Do(context.Background(), key+"-warm", lease.Spec{TTL: time.Second, Deadline: time.Second, Fence: true}, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			c, rec := newClient(t, r, lease.WithRecheck(long))
			observer, _ := newClient(t, srv.Client(t), lease.WithRecheck(long))
			wctx, wcancel := context.WithCancel(context.Background())
			defer wcancel()
			watch := observer.WatchLeader(wctx, key)
			ctx, cancel := context.WithCancel(context.Background())
			in := make(chan lease.Token, 1)
			done := make(chan error, 1)
			go func() {
				done <- c.Lead(ctx, key, lease.LeadSpec{TTL: long, Owner: "cut"}, func(fctx context.Context) error {
					tok, _ := lease.TokenFrom(fctx)
					in <- tok
					<-fctx.Done()
					return nil
				})
			}()
			var tok lease.Token
			select {
			case tok = <-in:
			case <-time.After(5 * time.Second):
				t.Fatal("no term")
			}
			wait := func(what string, ok func(lease.Leader) bool) {
				t.Helper()
				deadline := time.After(5 * time.Second)
				var got []lease.Leader
				for {
					select {
					case l := <-watch:
						got = append(got, l)
						if ok(l) {
							return
						}
					case <-deadline:
						t.Fatalf("watch: no %s within 5s (re-check %v); reports %+v", what, long, got)
					}
				}
			}
			wait("term", func(l lease.Leader) bool { return l.Term == tok })
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Lead = %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Lead did not return")
			}
			if p.Cut() != 1 {
				t.Fatalf("%d replies cut, want the release's", p.Cut())
			}
			if n := rdb.Exists(context.Background(), lockKey(key)).Val(); n != 0 {
				t.Errorf("the key is still held after the step-down (TTL %v)", long)
			}
			wait("nobody after the step-down", func(l lease.Leader) bool { return l.Holder == "" && l.Err == nil })
			var doneEv *lease.Event
			for _, ev := range rec.Events() {
				if ev.Kind == lease.EventDone && ev.Entered {
					ev := ev
					doneEv = &ev
				}
			}
			if doneEv == nil {
				t.Fatalf("no EventDone of the term; events %v", kinds(rec.Events()))
			}
			unconfirmed, released := rec.Count(lease.EventReleaseUnconfirmed), rec.Count(lease.EventReleased)
			t.Logf("events %v; term outcome %v", kinds(rec.Events()), doneEv.Err)
			if doneEv.Lost || errors.Is(doneEv.Err, lease.ErrLost) {
				t.Errorf("the step-down was reported as a loss: %v", doneEv.Err)
			}
			if retries > 0 {
				if unconfirmed != 0 || released != 1 {
					t.Errorf("replayed release: %d released, %d unconfirmed; want one released", released, unconfirmed)
				}
			} else if unconfirmed != 1 || released != 0 {
				t.Errorf("release with its reply lost and no retry: %d released, %d unconfirmed; want it unconfirmed", released, unconfirmed)
			}
		})
	}
}

// adv72bMonitor records the commands redis-server runs (MONITOR on a raw
// connection of its own).
type adv72bMonitor struct {
	mu    sync.Mutex
	lines []string
}

func adv72bStartMonitor(t *testing.T, addr string) *adv72bMonitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	m := &adv72bMonitor{}
	go func() {
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, l)
			m.mu.Unlock()
		}
	}()
	return m
}

// count counts the recorded commands containing every one of parts.
func (m *adv72bMonitor) count(parts ...string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
next:
	for _, l := range m.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		n++
	}
	return n
}

// A campaign whose replies are blackholed on a free key: its acquires run
// on the server (a grant may have been made) but no reply comes. Claims:
// a campaign whose acquire reached the server is reported ErrUnknown,
// never busy, and ErrRefused only for one that never ran (here: go-redis
// sends HELLO on every new connection, and that handshake hangs, so the
// acquire is never written — documented as ErrRefused); so the server
// runs exactly as many acquires as campaigns were reported unknown. fn is
// never entered without a reply, and once the replies flow again the
// candidate leads within about a TTL and a backoff.
func TestAdversary72b_BlackholedCampaignIsUnknown(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	srv := leasetest.StartRedis(t)
	mon := adv72bStartMonitor(t, srv.Addr())
	cands := newCandidates(t, srv, 1, lease.WithRecheck(100*time.Millisecond))
	cd := cands[0]
	key := uniqueKey(t)
	// Warm the connection pool and the scripts, then cut the replies.
	warm, _ := newClient(t, srv.Client(t))
	if err := warm.Do(context.Background(), key+"-warm", lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Fence: true, Wait: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := cd.c.Leader(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	acquires := func() int { return mon.count(`"4" "lease:{` + key + `}:l"`) }
	before := acquires()
	cd.proxy.Set(leasetest.Blackhole)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var blackholed atomic.Bool
	blackholed.Store(true)
	var enteredBlind atomic.Bool
	in := make(chan time.Time, 4)
	done := make(chan error, 1)
	go func() {
		done <- cd.c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: "blind", Backoff: 50 * time.Millisecond}, func(fctx context.Context) error {
			if blackholed.Load() {
				enteredBlind.Store(true)
			}
			select {
			case in <- time.Now():
			default:
			}
			<-fctx.Done()
			return nil
		})
	}()
	time.Sleep(2 * time.Second)
	// Leader on a blackholed connection returns by its ctx, with an error.
	lctx, lcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	lt := time.Now()
	_, lerr := cd.c.Leader(lctx, key)
	lcancel()
	if lerr == nil || time.Since(lt) > time.Second {
		t.Errorf("Leader over a blackholed connection = %v after %v, want an error by its 300ms ctx", lerr, time.Since(lt))
	}
	// Campaigns still running now are left out: wait for one to end.
	healed := time.Now()
	var unknown, refused int
	tally := func() {
		unknown, refused = 0, 0
		for _, ev := range cd.rec.Events() {
			if ev.Kind != lease.EventDone || ev.Entered || ev.Err == nil || ev.At.After(healed) {
				continue
			}
			switch {
			case errors.Is(ev.Err, lease.ErrBusy):
				t.Errorf("a blackholed campaign reported busy (nothing was parsed): %v", ev.Err)
			case errors.Is(ev.Err, lease.ErrUnknown) && errors.Is(ev.Err, lease.ErrRefused):
				t.Errorf("a campaign reported both unknown and refused: %v", ev.Err)
			case errors.Is(ev.Err, lease.ErrUnknown):
				unknown++
			case errors.Is(ev.Err, lease.ErrRefused):
				refused++
			default:
				t.Errorf("a blackholed campaign ended with %v: want ErrUnknown or ErrRefused", ev.Err)
			}
		}
	}
	tally()
	ran := acquires() - before
	blackholed.Store(false)
	cd.proxy.Set(leasetest.Pass)
	var enteredAt time.Time
	select {
	case enteredAt = <-in:
	case <-time.After(5 * time.Second):
		t.Fatalf("no term within 5s of the replies flowing again; events %v", kinds(cd.rec.Events()))
	}
	t.Logf("%d campaigns unknown, %d refused, %d acquires ran on the server while blackholed; led %v after the replies flowed again",
		unknown, refused, ran, enteredAt.Sub(healed).Round(time.Millisecond))
	if d := enteredAt.Sub(healed); d > ttl+ttl+time.Second {
		t.Errorf("led %v after the replies flowed again, want within about a TTL and a backoff", d)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Lead = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lead did not return")
	}
	if enteredBlind.Load() {
		t.Error("fn entered while every reply was blackholed")
	}
	if unknown == 0 {
		t.Errorf("no campaign reported unknown; events %v", kinds(cd.rec.Events()))
	}
	// One acquire may be in flight at the tally (written, not yet timed
	// out): it ran but is not reported yet.
	if ran < unknown || ran > unknown+1 {
		t.Errorf("%d acquires ran on the server, %d campaigns reported unknown (and %d refused): a refused campaign's acquire ran, or an unknown one's never reached the server", ran, unknown, refused)
	}
}
