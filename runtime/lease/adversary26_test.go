package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// adv26Term is one running Lead of a test: it enters fn, then waits for
// stop, which ends the term (ctx cancelled) and waits for Lead to return.
type adv26Term struct {
	entered chan *lease.Lease
	cancel  context.CancelFunc
	done    chan error
}

func adv26Lead(c *lease.Client, key string, spec lease.LeadSpec) *adv26Term {
	ctx, cancel := context.WithCancel(context.Background())
	t := &adv26Term{entered: make(chan *lease.Lease, 16), cancel: cancel, done: make(chan error, 1)}
	go func() {
		t.done <- c.Lead(ctx, key, spec, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			t.entered <- l
			<-fctx.Done()
			return nil
		})
	}()
	return t
}

func (a *adv26Term) waitEntered(t *testing.T) *lease.Lease {
	t.Helper()
	select {
	case l := <-a.entered:
		return l
	case <-time.After(5 * time.Second):
		t.Fatal("no term within 5s")
	}
	return nil
}

func (a *adv26Term) stop(t *testing.T) {
	t.Helper()
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("Lead returned %v, want nil after ctx ended", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lead did not return within 5s of ctx ending")
	}
}

// Watch (leasectl watch) names how a lease ended from the holder's release
// tombstone. A leader term's own release now leaves "l" (and says "r" on
// the key's channel, so Watch looks at once): it is a release by its
// holder, just like a Do's ("1"), and must be reported as "released", not
// as "expired".
func TestAdversary26_WatchHowLeaderRelease(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t))
	watcher, _ := newClient(t, srv.Client(t))
	for _, kind := range []string{"do", "lead"} {
		t.Run(kind, func(t *testing.T) {
			key := uniqueKey(t)
			var mu sync.Mutex
			var changes []lease.Change
			ctx, cancel := context.WithCancel(context.Background())
			wdone := make(chan error, 1)
			go func() {
				wdone <- watcher.Watch(ctx, key, 50*time.Millisecond, func(ch lease.Change) {
					mu.Lock()
					changes = append(changes, ch)
					mu.Unlock()
				})
			}()
			defer func() { cancel(); <-wdone }()
			count := func(k lease.ChangeKind) (n int, how string) {
				mu.Lock()
				defer mu.Unlock()
				for _, ch := range changes {
					if ch.Kind == k {
						n++
						how = ch.How
					}
				}
				return
			}
			time.Sleep(100 * time.Millisecond) // the watch's first listing
			release := make(chan struct{})
			var done <-chan error
			var term *adv26Term
			if kind == "do" {
				done = hold(t, c, key, lease.Spec{TTL: 30 * time.Second, Deadline: time.Minute}, release)
			} else {
				term = adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L"})
				term.waitEntered(t)
			}
			if !waitFor(3*time.Second, func() bool { n, _ := count(lease.ChangeGranted); return n > 0 }) {
				t.Fatal("the watch saw no grant within 3s")
			}
			time.Sleep(200 * time.Millisecond)
			if kind == "do" {
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else {
				term.stop(t)
			}
			if !waitFor(3*time.Second, func() bool { n, _ := count(lease.ChangeEnded); return n > 0 }) {
				t.Fatal("the watch saw no end within 3s")
			}
			n, how := count(lease.ChangeEnded)
			t.Logf("%s: %d ended, How %q", kind, n, how)
			if how != "released" {
				t.Errorf("%s released by its holder: Watch says How %q, want \"released\"", kind, how)
			}
		})
	}
}

// go-redis replays a release whose reply was lost: the replay must answer
// "released" for a leader term's tombstone "l" as for "1". The release's
// reply is cut once (the script ran); Lead returns nil, the term's release
// is reported EventReleased (not unconfirmed), the key is free and a
// ForceRelease of the old identity afterwards finds it not held.
func TestAdversary26_LeaderReleaseReplay(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	p := leasetest.StartProxy(t, srv.Addr())
	r := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { r.Close() })
	c, rec := newClient(t, r)
	admin, _ := newClient(t, rdb)
	// Load the release script first (a NOSCRIPT fallback is not the replay).
	if err := c.Do(context.Background(), key+"-warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L"})
	l := term.waitEntered(t)
	id := l.Owner()
	p.Set(leasetest.CutNextReply)
	term.stop(t)
	if p.Cut() != 1 {
		t.Fatalf("%d replies cut, want 1 (the release's)", p.Cut())
	}
	tomb, _ := rdb.Get(context.Background(), "lease:{"+key+"}:r:"+id).Result()
	t.Logf("cut %d; released %d, unconfirmed %d; tombstone %q", p.Cut(), rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed), tomb)
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		for _, e := range rec.Events() {
			if e.Kind == lease.EventReleaseUnconfirmed {
				t.Logf("unconfirmed: %v", e.Err)
			}
		}
		t.Errorf("%d unconfirmed releases, want 0 (the replay answers released)", n)
	}
	if n := rec.Count(lease.EventReleased); n != 2 { // the warm-up Do's and the term's
		t.Errorf("%d releases reported, want 2", n)
	}
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Errorf("the key is still held after the term's release")
	}
	res, err := admin.ForceRelease(context.Background(), key, id)
	if err != nil || res != lease.ForceNotHeld {
		t.Errorf("ForceRelease of the released term = %v, %v; want ForceNotHeld", res, err)
	}
}

// A ForceRelease (leasectl release) races a leader's own release: exactly
// one of them releases the term's lease. Force reports ForceReleased iff
// the leader's release is not reported EventReleased; the key ends free;
// Lead returns nil each time.
func TestAdversary26_ForceRacesLeaderRelease(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := uniqueKey(t)
	admin, _ := newClient(t, rdb)
	const rounds = 40
	forced, own := 0, 0
	for i := 0; i < rounds; i++ {
		c, rec := newClient(t, srv.Client(t))
		term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: fmt.Sprintf("L%d", i)})
		l := term.waitEntered(t)
		id := l.Owner()
		force := forceRacing(admin, key, id, i)
		term.stop(t)
		res, ferr := force()
		if ferr != nil {
			t.Fatalf("round %d: ForceRelease: %v", i, ferr)
		}
		rel := rec.Count(lease.EventReleased)
		switch {
		case res == lease.ForceReleased && rel == 0:
			forced++
		case res == lease.ForceNotHeld && rel == 1:
			own++
		default:
			t.Errorf("round %d: ForceRelease %v and %d EventReleased of the leader; want exactly one release", i, res, rel)
		}
		if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
			t.Errorf("round %d: the key is held after both releases", i)
		}
		c.Close()
	}
	t.Logf("%d rounds: %d forced first, %d released by the leader first", rounds, forced, own)
}

// A candidate whose user may not publish on the key's channel (an ACL
// with no channels): each term's release is still released (EventReleased,
// Lead nil), with at most one subscription_failed event per 10s for the
// Client however many terms end; a WatchLeader on that user falls back to
// re-checks and still reports "nobody".
func TestAdversary26_ACLNoChannelLeaderRelease(t *testing.T) {
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	nochan := srv.ACLUser(t, "nochan26", "pw", "~*", "+@all")
	c, rec := newClient(t, nochan)
	obs, _ := newClient(t, srv.ACLUser(t, "nochan26", "pw", "~*", "+@all"), lease.WithRecheck(200*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := obs.WatchLeader(ctx, key)
	const terms = 5
	for i := 0; i < terms; i++ {
		term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L"})
		term.waitEntered(t)
		term.stop(t)
	}
	// The watch reports nobody within a re-check of the last stop.
	deadline := time.After(3 * time.Second)
	var last lease.Leader
wait:
	for {
		select {
		case l := <-ch:
			last = l
			if l.Holder == "" && l.Err == nil {
				if n, _ := srv.Client(t).Exists(context.Background(), lockKey(key)).Result(); n == 0 {
					break wait
				}
			}
		case <-deadline:
			t.Fatalf("no report of nobody within 3s; last %+v", last)
		}
	}
	rel, unconf, sf := rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed), rec.Count(lease.EventSubscriptionFailed)
	t.Logf("%d terms: %d released, %d unconfirmed, %d subscription_failed", terms, rel, unconf, sf)
	if rel != terms || unconf != 0 {
		t.Errorf("%d released, %d unconfirmed of %d terms; want all released", rel, unconf, terms)
	}
	if sf > 1 {
		for _, e := range rec.Events() {
			if e.Kind == lease.EventSubscriptionFailed {
				t.Logf("subscription_failed: %v", e.Err)
			}
		}
		t.Errorf("%d subscription_failed events within seconds, want at most 1", sf)
	}
}

// A Client keeps a Do lease on a key (Spec.Keep) that a leader also uses:
// the keeper's lease is wanted by the candidate (released to it), the
// leader's term then ends with nobody waiting ("r" on the channel the
// keeper listens to). The keeper's next Do must take the key again, never
// overlapping a term, and nobody may lose a lease to the "r".
func TestAdversary26_KeptLeaseHearsLeaderStep(t *testing.T) {
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	keeper, krec := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	cand, crec := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	var mu sync.Mutex
	inside := 0
	overlap := 0
	enter := func() {
		mu.Lock()
		inside++
		if inside > 1 {
			overlap++
		}
		mu.Unlock()
	}
	leave := func() { mu.Lock(); inside--; mu.Unlock() }
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second, Keep: 2 * time.Second}
	const rounds = 8
	for i := 0; i < rounds; i++ {
		if err := keeper.Do(context.Background(), key, s, func(context.Context) error { enter(); time.Sleep(5 * time.Millisecond); leave(); return nil }); err != nil {
			t.Fatalf("round %d: keeper's Do: %v", i, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		entered := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- cand.Lead(ctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: "C"}, func(fctx context.Context) error {
				enter()
				entered <- struct{}{}
				<-fctx.Done()
				leave()
				return nil
			})
		}()
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the candidate did not lead within 5s (the kept lease was not released to it)", i)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Lead: %v", i, err)
		}
	}
	if err := keeper.Do(context.Background(), key, s, func(context.Context) error { enter(); leave(); return nil }); err != nil {
		t.Fatalf("keeper's last Do: %v", err)
	}
	t.Logf("%d rounds: overlaps %d; keeper lost %d, candidate lost %d", rounds, overlap, krec.Count(lease.EventLost), crec.Count(lease.EventLost))
	if overlap != 0 {
		t.Errorf("%d overlaps of the keeper and the leader", overlap)
	}
	if n := krec.Count(lease.EventLost) + crec.Count(lease.EventLost); n != 0 {
		t.Errorf("%d leases lost", n)
	}
}

// WatchLeader under rapid step-down/step-up cycles of two candidates, with
// re-checks a minute apart (every report comes from a notification): no
// report repeats the one before it, terms reported only grow, and the last
// report is "nobody" once both stopped. A "nobody" report is only made
// while the key was found free: every nobody must come between two terms.
func TestAdversary26_WatchLeaderRapidCycles(t *testing.T) {
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	a, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	b, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	obs, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := obs.WatchLeader(ctx, key)
	var reports []lease.Leader
	var rmu sync.Mutex
	rdone := make(chan struct{})
	go func() {
		defer close(rdone)
		for l := range ch {
			rmu.Lock()
			reports = append(reports, l)
			rmu.Unlock()
		}
	}()
	const cycles = 30
	var tokens []lease.Token
	for i := 0; i < cycles; i++ {
		c := a
		if i%2 == 1 {
			c = b
		}
		term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: fmt.Sprintf("O%d", i%2)})
		l := term.waitEntered(t)
		tokens = append(tokens, l.Token())
		if i%3 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		term.stop(t)
	}
	ok := waitFor(3*time.Second, func() bool {
		rmu.Lock()
		defer rmu.Unlock()
		return len(reports) > 0 && reports[len(reports)-1].Holder == "" && reports[len(reports)-1].Err == nil
	})
	cancel()
	<-rdone
	if !ok {
		t.Fatalf("the last report is not nobody within 3s of the last stop: %+v", reports[len(reports)-1])
	}
	known := map[lease.Token]bool{}
	for _, tk := range tokens {
		known[tk] = true
	}
	var lastTerm lease.Token
	nobody, leaders := 0, 0
	for i, l := range reports {
		if l.Err != nil {
			t.Errorf("report %d: error %v", i, l.Err)
			continue
		}
		if i > 0 && reports[i-1].Holder == l.Holder && reports[i-1].Term == l.Term && reports[i-1].Err == nil {
			t.Errorf("report %d repeats report %d: %+v", i, i-1, l)
		}
		if l.Holder == "" {
			nobody++
			continue
		}
		leaders++
		if !known[l.Term] {
			t.Errorf("report %d: term %v was never granted", i, l.Term)
		}
		if l.Term <= lastTerm {
			t.Errorf("report %d: term %v after term %v", i, l.Term, lastTerm)
		}
		lastTerm = l.Term
	}
	t.Logf("%d cycles: %d reports (%d leaders, %d nobody)", cycles, len(reports), leaders, nobody)
}

// A candidate that acquires right after a leader's release deletes the key
// (it was not queued: it campaigns just then). The leader's "r" may make
// the watch read the key between the delete and the new grant and report
// "nobody" (a grant of a free key is not announced: it is found at the
// next re-check, as documented). What must hold: the watch ends on the new
// leader within a re-check (300ms here), never stuck on "nobody".
func TestAdversary26_WatchLeaderNobodyThenNewLeader(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	a, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	b, _ := newClient(t, srv.Client(t), lease.WithRecheck(time.Minute))
	obs, _ := newClient(t, srv.Client(t), lease.WithRecheck(300*time.Millisecond))
	const rounds = 8
	bad, nobodyFirst := 0, 0
	for i := 0; i < rounds; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		ch := obs.WatchLeader(ctx, key)
		ta := adv26Lead(a, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "A"})
		ta.waitEntered(t)
		// a stops and b campaigns at the same moment.
		var tb *adv26Term
		go ta.cancel()
		tb = adv26Lead(b, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "B"})
		lb := tb.waitEntered(t)
		<-ta.done
		// Within a second the watch must report b's term, and nothing after it.
		var last lease.Leader
		deadline := time.After(700 * time.Millisecond)
	drain:
		for {
			select {
			case l := <-ch:
				if l.Holder == "" && last.Owner == "A" {
					nobodyFirst++
				}
				last = l
			case <-deadline:
				break drain
			}
		}
		if last.Holder != lb.Owner() || last.Term != lb.Token() {
			bad++
			t.Errorf("round %d: last report %+v while B leads term %v", i, last, lb.Token())
		}
		tb.stop(t)
		cancel()
	}
	t.Logf("%d rounds, %d bad; %d rounds reported nobody between A and B", rounds, bad, nobodyFirst)
}

// On a Cluster the term's release says "r" on the key's slot's node: a
// watch (re-checks a minute apart) on another Client hears the stop within
// seconds, and the release is reported released.
func TestAdversary26_ClusterLeaderStopNotified(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	key := uniqueKey(t)
	c, rec := newClient(t, cl.Client(t), lease.WithRecheck(time.Minute))
	obs, _ := newClient(t, cl.Client(t), lease.WithRecheck(time.Minute))
	for i := 0; i < 3; i++ {
		term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L"})
		l := term.waitEntered(t)
		// A new watch per term: a grant of a free key is found by a
		// re-check (a minute), the stop by its notification.
		ctx, cancel := context.WithCancel(context.Background())
		ch := obs.WatchLeader(ctx, key)
		expect := func(what string, ok func(lease.Leader) bool) {
			t.Helper()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case l := <-ch:
					if ok(l) {
						return
					}
				case <-deadline:
					t.Fatalf("cycle %d: no report of %s within 5s", i, what)
				}
			}
		}
		expect("the leader", func(x lease.Leader) bool { return x.Term == l.Token() })
		time.Sleep(300 * time.Millisecond) // the watch's subscription
		start := time.Now()
		term.stop(t)
		expect("nobody", func(x lease.Leader) bool { return x.Holder == "" && x.Err == nil })
		t.Logf("cycle %d: nobody reported %v after the stop", i, time.Since(start))
		cancel()
	}
	if n := rec.Count(lease.EventReleased); n != 3 {
		t.Errorf("%d releases reported, want 3", n)
	}
	if n := rec.Count(lease.EventSubscriptionFailed); n != 0 {
		t.Errorf("%d subscription_failed events", n)
	}
}
