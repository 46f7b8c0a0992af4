package lease_test

// Round 68 (a helper's adversary round), change fb147ba: a Lead term's
// grant publishes "g" on the key's channel; the hub wakes listeners
// (WatchLeader) on it, not waiters. Every watch and candidate here
// re-checks once a minute, so that a prompt report can only come from a
// notification.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

const adv68Foreign = "0123456789abcdef0123456789abcdef"

// adv68Reports collects a watch's reports with their times.
type adv68Reports struct {
	mu   sync.Mutex
	seen []watched
}

func adv68Collect(ch <-chan lease.Leader) *adv68Reports {
	r := &adv68Reports{}
	go func() {
		for l := range ch {
			r.mu.Lock()
			r.seen = append(r.seen, watched{l, time.Now()})
			r.mu.Unlock()
		}
	}()
	return r
}

// first returns the first report at or after from that satisfies ok,
// waiting up to within.
func (r *adv68Reports) first(from time.Time, within time.Duration, ok func(lease.Leader) bool) (watched, bool) {
	var got watched
	found := waitFor(within, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, w := range r.seen {
			if !w.at.Before(from) && ok(w.Leader) {
				got = w
				return true
			}
		}
		return false
	})
	return got, found
}

func (r *adv68Reports) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, w := range r.seen {
		b.WriteString(w.at.Format("15:04:05.000"))
		b.WriteString(" ")
		switch {
		case w.Err != nil:
			b.WriteString("Err(" + w.Err.Error() + ")")
		case w.Holder == "":
			b.WriteString("nobody")
		default:
			b.WriteString(w.Owner + "#" + itoa(int(w.Term)) + " rem " + w.Remaining.Round(time.Millisecond).String())
		}
		b.WriteString("; ")
	}
	return b.String()
}

// "g" wakes the listeners of a key (the watch reads the key again) and no
// waiter; any other one-letter message still wakes every waiter of the key
// (the older semantics). One Client both watches and waits on the key, so
// that its key channel is subscribed for both; a foreign holder keeps the
// key for a minute and everyone re-checks once a minute, so the server's
// command counts say exactly who looked: the watch's read is leader.lua
// (GET, PTTL), a waiter's look is acquire.lua (SET NX GET first).
func TestAdversary68_GrantWakesListenersNotWaiters(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	channel := "lease:{" + key + "}:c"
	if err := admin.Set(ctx, lockKey(key), adv68Foreign+":0", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	reps := adv68Collect(c.WatchLeader(wctx, key))
	if _, ok := reps.first(time.Time{}, 5*time.Second, func(l lease.Leader) bool { return l.Holder == adv68Foreign }); !ok {
		t.Fatalf("no first report of the foreign holder: %v", reps)
	}
	waited := make(chan error, 1)
	go func() {
		waited <- c.Do(wctx, key, lease.Spec{TTL: time.Second, Deadline: 50 * time.Second, Wait: 45 * time.Second}, func(context.Context) error { return nil })
	}()
	queued(t, admin, key, 1)
	if !waitFor(5*time.Second, func() bool {
		n := admin.PubSubNumSub(ctx, channel).Val()[channel]
		return n >= 1
	}) {
		t.Fatalf("the key channel %s was never subscribed", channel)
	}
	time.Sleep(500 * time.Millisecond) // the confirmations' looks are over

	look := func(msg string) map[string]int64 {
		t.Helper()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if n := admin.Publish(ctx, channel, msg).Val(); n < 1 {
			t.Fatalf("PUBLISH %q reached %d subscribers", msg, n)
		}
		time.Sleep(400 * time.Millisecond)
		return serverCalls(t, admin)
	}
	g := look("g")
	t.Logf(`after "g": %v`, g)
	if g["get"] < 1 {
		t.Errorf(`"g" did not make the watch read the key again (GET calls %d)`, g["get"])
	}
	if g["set"] != 0 || g["zadd"] != 0 {
		t.Errorf(`"g" woke the waiter: its acquire ran (SET %d, ZADD %d); a Lead grant must wake listeners only`, g["set"], g["zadd"])
	}
	q := look("q")
	t.Logf(`after "q": %v`, q)
	if q["set"] < 1 {
		t.Errorf(`a one-letter message other than "g" ("q") did not wake the waiter (SET calls %d): the older semantics wake every waiter`, q["set"])
	}
	if q["get"] < 1 {
		t.Errorf(`"q" did not wake the watch (GET calls %d)`, q["get"])
	}
	wcancel()
	if err := <-waited; err == nil {
		t.Errorf("the waiter got a key held by a foreign holder")
	}
}

// A term's grant whose reply is lost (the script ran; go-redis reports
// an error 300ms later, as a read timeout would): the candidate releases
// that grant (its outcome is unknown) and campaigns again after its
// backoff. The watch hears the grant's "g" at once, and reports the term
// that really starts within a notification's latency. With the candidate
// then cut off for good (every command fails), the watch must report
// nobody once that lease has run out, not vouch for it past its lease.
// Logged, not failed: whether the watch reported the unconfirmed grant
// (its term number never ran) as a term.
func TestAdversary68_GrantReplyLostWatchReportsThatTerm(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)

	var cutOne, cutAll atomic.Bool
	cutOne.Store(true)
	var cutAt atomic.Int64
	var cutTok atomic.Value
	rdb := srv.Client(t)
	rdb.AddHook(adv68Hook{process: func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			if cutAll.Load() {
				err := io.ErrUnexpectedEOF
				cmd.SetErr(err)
				return err
			}
			args := cmd.Args()
			name := strings.ToLower(cmd.Name())
			isGrantTry := (name == "evalsha" || name == "eval") && len(args) == 16 && args[2] == "4" && args[len(args)-1] == "1"
			err := next(ctx, cmd)
			if isGrantTry && err == nil && cutOne.CompareAndSwap(true, false) {
				cutAt.Store(time.Now().UnixNano())
				if c, ok := cmd.(*redis.Cmd); ok {
					cutTok.Store(fmt.Sprint(c.Val()))
				}
				time.Sleep(300 * time.Millisecond)
				err = io.ErrUnexpectedEOF // the reply was lost
				cmd.SetErr(err)
			}
			return err
		}
	}, pipeline: func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		// Cut off entirely means pipelines too (Cluster renewals and
		// WAIT go as pipelines; none is expected here, but the cut must
		// not depend on it).
		return func(ctx context.Context, cmds []redis.Cmder) error {
			if cutAll.Load() {
				for _, cmd := range cmds {
					cmd.SetErr(io.ErrUnexpectedEOF)
				}
				return io.ErrUnexpectedEOF
			}
			return next(ctx, cmds)
		}
	}})
	cand, crec := newClient(t, rdb, lease.WithRecheck(time.Minute))
	obs, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	reps := adv68Collect(obs.WatchLeader(wctx, key))
	if _, ok := reps.first(time.Time{}, 5*time.Second, func(l lease.Leader) bool { return l.Holder == "" && l.Err == nil }); !ok {
		t.Fatalf("no first report: %v", reps)
	}
	time.Sleep(300 * time.Millisecond) // the watch's subscription is confirmed
	if ch := "lease:{" + key + "}:c"; admin.PubSubNumSub(ctx, ch).Val()[ch] < 1 {
		t.Fatalf("the watch's key channel is not subscribed")
	}

	const ttl = 3 * time.Second
	type entry struct {
		tok lease.Token
		at  time.Time
	}
	entered := make(chan entry, 4)
	lctx, lcancel := context.WithCancel(ctx)
	leadDone := make(chan error, 1)
	start := time.Now()
	go func() {
		leadDone <- cand.Lead(lctx, key, lease.LeadSpec{TTL: ttl, Owner: "cut"}, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			entered <- entry{tok, time.Now()}
			<-ctx.Done()
			return nil
		})
	}()
	defer func() {
		cutAll.Store(false)
		lcancel()
		<-leadDone
	}()
	var e entry
	select {
	case e = <-entered:
	case <-time.After(5 * time.Second):
		t.Fatalf("the candidate's term did not start within 5s of the lost reply")
	}
	if cutAt.Load() == 0 {
		t.Fatalf("no grant reply was cut")
	}
	w, ok := reps.first(e.at.Add(-time.Second), 2*time.Second, func(l lease.Leader) bool { return l.Owner == "cut" && l.Term == e.tok })
	if !ok {
		t.Fatalf("the watch never reported the term that started (%d): %v", e.tok, reps)
	}
	t.Logf("unconfirmed grant %v made at +%v; term %d entered at +%v, reported at +%v; reports: %v; candidate events: %v",
		cutTok.Load(), time.Unix(0, cutAt.Load()).Sub(start).Round(time.Millisecond),
		e.tok, e.at.Sub(start).Round(time.Millisecond), w.at.Sub(start).Round(time.Millisecond), reps, kinds(crec.Events()))
	if d := w.at.Sub(e.at); d > 200*time.Millisecond {
		t.Errorf("the term was reported %v after it started (re-checks are a minute apart)", d)
	}
	if _, phantom := reps.first(time.Time{}, 0, func(l lease.Leader) bool { return l.Owner == "cut" && fmt.Sprint(l.Term) == cutTok.Load() }); phantom {
		t.Logf("NOTE: the watch reported the unconfirmed grant's term %v, which never ran (its \"g\" came before the candidate knew of it)", cutTok.Load())
	}
	// Now cut the candidate off entirely: its renewals fail, its lease runs
	// out on the server within ttl; the watch must say nobody by then
	// (plus a little), never vouching past the lease.
	cutAll.Store(true)
	cutOff := time.Now()
	pttl := time.Duration(admin.PTTL(ctx, lockKey(key)).Val())
	if pttl < 0 {
		pttl = 0
	}
	nobody, ok := reps.first(cutOff, ttl+3*time.Second, func(l lease.Leader) bool { return l.Holder == "" })
	if !ok {
		t.Fatalf("the watch still vouched for the cut-off candidate %v after its cut (its lease had %v left): %v", ttl+3*time.Second, pttl, reps)
	}
	if late := nobody.at.Sub(cutOff) - pttl; late > 300*time.Millisecond {
		t.Errorf("nobody reported %v after the lease ran out on the server", late)
	}
	t.Logf("nobody reported %v after the cut (the lease had %v left)", nobody.at.Sub(cutOff).Round(time.Millisecond), pttl)
}

type adv68Hook struct {
	process  func(redis.ProcessHook) redis.ProcessHook
	pipeline func(redis.ProcessPipelineHook) redis.ProcessPipelineHook // nil: pipelines pass
}

func (h adv68Hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv68Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return h.process(next)
}
func (h adv68Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.pipeline == nil {
		return next
	}
	return h.pipeline(next)
}

// The README's least-privilege ACL, on a single server and on a Cluster:
// terms that start on a free key (their "g"), handovers, stops, a watch,
// a Do waiter and a kept lease on the same keys leave the ACL LOG empty.
func TestAdversary68_GrantUnderACLRecipeLogsNothing(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := leasetest.StartRedis(t)
		admin := srv.Client(t)
		rules := readmeACL(t, false)
		mk := func() *lease.Client {
			c, _ := newClient(t, srv.ACLUser(t, "leases", "secret", rules...), lease.WithRecheck(time.Minute))
			return c
		}
		adv68ACLRun(t, mk, []string{uniqueKey(t)})
		adv68NoACLLog(t, admin)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := leasetest.StartCluster(t, 3)
		rules := readmeACL(t, true)
		mk := func() *lease.Client {
			c, _ := newClient(t, cl.ACLUser(t, "leases", "secret", rules...), lease.WithRecheck(time.Minute))
			return c
		}
		var keys []string
		for _, m := range cl.Nodes[:3] {
			keys = append(keys, adv67KeysOn(t, cl, m, "adv68acl"+m.Addr()+"-", 1)[0])
		}
		adv68ACLRun(t, mk, keys)
		for _, n := range cl.Nodes {
			adv68NoACLLog(t, n.Client(t))
		}
	})
}

func adv68NoACLLog(t *testing.T, admin *redis.Client) {
	t.Helper()
	entries, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("ACL LOG on %s has %d entries: %v", admin.Options().Addr, len(entries), entries)
	}
}

func adv68ACLRun(t *testing.T, mk func() *lease.Client, keys []string) {
	t.Helper()
	ctx := context.Background()
	a, b, obs := mk(), mk(), mk()
	for _, key := range keys {
		wctx, wcancel := context.WithCancel(ctx)
		reps := adv68Collect(obs.WatchLeader(wctx, key))
		if _, ok := reps.first(time.Time{}, 5*time.Second, func(l lease.Leader) bool { return l.Err == nil }); !ok {
			t.Fatalf("%s: no first report: %v", key, reps)
		}
		time.Sleep(200 * time.Millisecond)
		// A kept lease on the key, then released on its own (keep ends).
		s := lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Keep: 200 * time.Millisecond, Fence: true}
		if err := a.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("%s: kept Do: %v", key, err)
		}
		time.Sleep(400 * time.Millisecond)
		// A term on the free key: its grant's "g".
		started := time.Now()
		var aTerm atomic.Int64
		actx, acancel := context.WithCancel(ctx)
		aDone := make(chan error, 1)
		go func() {
			aDone <- a.Lead(actx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: "acl-a"}, func(ctx context.Context) error {
				tok, _ := lease.TokenFrom(ctx)
				aTerm.Store(int64(tok))
				<-ctx.Done()
				return nil
			})
		}()
		if w, ok := reps.first(started, 3*time.Second, func(l lease.Leader) bool { return l.Owner == "acl-a" }); !ok {
			t.Errorf("%s: the term on the free key was not reported within 3s under the ACL recipe: %v", key, reps)
		} else {
			t.Logf("%s: term on the free key reported %v after Lead started", key, w.at.Sub(started).Round(time.Millisecond))
		}
		// A Do waiter and a second candidate queue behind it.
		bctx, bcancel := context.WithCancel(ctx)
		bDone := make(chan error, 1)
		go func() {
			bDone <- b.Lead(bctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: "acl-b"}, func(ctx context.Context) error {
				<-ctx.Done()
				return nil
			})
		}()
		time.Sleep(300 * time.Millisecond)
		acancel() // handover to b
		<-aDone
		if _, ok := reps.first(started, 3*time.Second, func(l lease.Leader) bool { return l.Owner == "acl-b" }); !ok {
			t.Errorf("%s: handover not reported: %v", key, reps)
		}
		stopAt := time.Now()
		bcancel() // graceful stop, nobody waiting
		<-bDone
		if _, ok := reps.first(stopAt, 3*time.Second, func(l lease.Leader) bool { return l.Holder == "" && l.Err == nil }); !ok {
			t.Errorf("%s: stop not reported: %v", key, reps)
		}
		wcancel()
	}
}

// A kept lease (Spec.Keep) is not disturbed by a term's "g" on its key's
// channel: the next call still enters on it without a round trip, with
// the same token (a "g" says a term started: not this Client's key, so
// nothing to check).
func TestAdversary68_GrantDoesNotDisturbKeptLease(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	channel := "lease:{" + key + "}:c"
	c, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Keep: 20 * time.Second, Fence: true}
	var tokens []lease.Token
	call := func() {
		t.Helper()
		if err := c.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			tokens = append(tokens, tok)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	call()
	if !waitFor(5*time.Second, func() bool { return admin.PubSubNumSub(ctx, channel).Val()[channel] >= 1 }) {
		t.Fatal("the kept lease's channel was never subscribed")
	}
	time.Sleep(500 * time.Millisecond)
	call() // a reuse once trusted: no round trip
	admin.ConfigResetStat(ctx)
	call()
	base := serverCalls(t, admin)["evalsha"]
	for range 3 {
		admin.Publish(ctx, channel, "g")
	}
	time.Sleep(300 * time.Millisecond)
	admin.ConfigResetStat(ctx)
	call()
	after := serverCalls(t, admin)
	t.Logf("reuse before g: %d evalsha; after: %v; tokens %v", base, after, tokens)
	if after["evalsha"] > base {
		t.Errorf(`after "g" the kept lease's reuse cost %d script calls (before: %d)`, after["evalsha"], base)
	}
	for _, tok := range tokens[1:] {
		if tok != tokens[0] {
			t.Errorf("the kept lease was not reused: tokens %v", tokens)
			break
		}
	}
}

// Elect among four candidates (each its own connection and Client,
// re-checks a minute apart). The leader's replies are blackholed: its
// lease runs out, a queued candidate takes the free key (a term on a free
// key, so its grant's "g") and every other candidate's OnNewLeader hears
// of it at once, not a minute later.
func TestAdversary68_ElectNewLeaderAfterBlackholedLeader(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	key := uniqueKey(t)
	cands := newCandidates(t, srv, 4, lease.WithRecheck(time.Minute))
	const ttl = time.Second
	type seen struct {
		owner string
		at    time.Time
	}
	var mu sync.Mutex
	newLeader := make([][]seen, len(cands))
	started := make(chan seen, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		for _, cd := range cands {
			cd.proxy.Set(leasetest.Pass)
		}
		cancel()
		wg.Wait()
	}()
	for i, cd := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cd.c.Elect(ctx, key, lease.LeadSpec{TTL: ttl, Owner: cd.name}, lease.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					started <- seen{cd.name, time.Now()}
					<-ctx.Done()
				},
				OnNewLeader: func(owner string) {
					mu.Lock()
					newLeader[i] = append(newLeader[i], seen{owner, time.Now()})
					mu.Unlock()
				},
			})
		}()
	}
	var first seen
	select {
	case first = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("no leader within 5s")
	}
	queued(t, admin, key, 3)
	time.Sleep(300 * time.Millisecond)
	var leaderIdx int
	for i, cd := range cands {
		if cd.name == first.owner {
			leaderIdx = i
		}
	}
	cut := time.Now()
	cands[leaderIdx].proxy.Set(leasetest.Blackhole)
	var next seen
	select {
	case next = <-started:
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("no new leader within %v of blackholing %s", ttl+5*time.Second, first.owner)
	}
	t.Logf("%s blackholed; %s started leading %v later", first.owner, next.owner, next.at.Sub(cut).Round(time.Millisecond))
	if !waitFor(3*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range cands {
			if i == leaderIdx {
				continue
			}
			l := newLeader[i]
			if len(l) == 0 || l[len(l)-1].owner != next.owner {
				return false
			}
		}
		return true
	}) {
		mu.Lock()
		t.Fatalf("not every live candidate's OnNewLeader heard of %s within 3s of its term (re-checks are a minute apart): %v", next.owner, newLeader)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range cands {
		if i == leaderIdx {
			continue
		}
		l := newLeader[i]
		d := l[len(l)-1].at.Sub(next.at)
		t.Logf("%s heard %s %v after its term started", cands[i].name, next.owner, d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("%s heard the new leader %v after its term started", cands[i].name, d)
		}
	}
}

// A Do's grant on a free key (fenced and with a wait, so that it runs the
// acquire script) announces nothing: "g" is a Lead term's only (ARGV[9]),
// and a Do's lease taken on a watched key is reported within a re-check,
// as WatchLeader's doc says.
func TestAdversary68_DoGrantPublishesNothing(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	c, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	admin.ConfigResetStat(ctx)
	if err := c.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: time.Second, Fence: true, Wait: 500 * time.Millisecond}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	calls := serverCalls(t, admin)
	t.Logf("a fenced, waiting Do on a free key: %v", calls)
	if calls["publish"] != 0 {
		t.Errorf("a Do's grant published %d messages", calls["publish"])
	}
}

// A leader read with no time left (a key without expiry here; in CI, a
// lease read in its last milliseconds, the round trip taken off) is
// looked at again soon, not a re-check later: with a minute-long re-check
// the watch went on vouching for a lease that had run out.
func TestAdversary68_WatchLooksAgainAtALeaderWithNoTimeLeft(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	key := uniqueKey(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, lockKey(key), fmt.Sprintf("%032x/pod-1:7", 9), 0).Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reps := adv68Collect(c.WatchLeader(wctx, key))
	if _, ok := reps.first(time.Time{}, 5*time.Second, func(l lease.Leader) bool { return l.Owner == "pod-1" && l.Term == 7 }); !ok {
		t.Fatalf("first: %v", reps)
	}
	gone := time.Now()
	rdb.Del(ctx, lockKey(key))
	if _, ok := reps.first(gone, 2*time.Second, func(l lease.Leader) bool { return l.Holder == "" && l.Err == nil }); !ok {
		t.Fatalf("the key's end not reported within 2s (re-check a minute): %v", reps)
	}
}
