package lease_test

import (
	"errors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"math/rand/v2"

	"context"
	"fmt"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// adv29bWatch runs Watch and records its changes.
type adv29bWatch struct {
	mu      sync.Mutex
	changes []lease.Change
}

func adv29bStartWatch(t *testing.T, c *lease.Client, pattern string, every time.Duration) *adv29bWatch {
	t.Helper()
	w := &adv29bWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, pattern, every, func(ch lease.Change) {
			w.mu.Lock()
			w.changes = append(w.changes, ch)
			w.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return w
}

func (w *adv29bWatch) find(kind lease.ChangeKind) []lease.Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []lease.Change
	for _, ch := range w.changes {
		if ch.Kind == kind {
			out = append(out, ch)
		}
	}
	return out
}

// A leader's lease that vanishes from the server before its TTL ran out,
// without any release by its holder (deleted by hand; what a restart
// without persistence or a failover that lost it looks like), must not be
// reported by Watch as "released" (by its holder): the doc names that
// "expired", or "" when it ended unseen between looks more than a second
// apart. With a listing interval over a second, Watch inferred "released"
// from the TTL last seen.
func TestAdversary29b_WatchVanishedLeaseNotReleased(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	watcher, _ := sharedClient(t, lease.WithPrefix(prefix))
	key := "leader"
	w := adv29bStartWatch(t, watcher, key, 1200*time.Millisecond)
	term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "A"})
	defer term.stop(t)
	term.waitEntered(t)
	if !waitFor(5*time.Second, func() bool { return len(w.find(lease.ChangeGranted))+len(w.find(lease.ChangeHeld)) > 0 }) {
		t.Fatal("the watch saw no grant within 5s")
	}
	time.Sleep(100 * time.Millisecond)
	if err := c.Redis().Del(context.Background(), prefix+"{"+key+"}:l").Err(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return len(w.find(lease.ChangeEnded)) > 0 }) {
		t.Fatal("the watch saw no end within 5s")
	}
	how := w.find(lease.ChangeEnded)[0].How
	t.Logf("How %q", how)
	if how == "released" || how == "handed over" || how == "force-released" {
		t.Errorf("a lease deleted under its holder: Watch says How %q, which claims a release nobody made", how)
	}
}

// Watch stamps what it read with the time it got round to it, not the
// time it read it: a callback (or a long listing) in between makes a
// release's tombstone look younger than it is. A lease released by its
// holder right after the listing read it, while Watch's callback for
// another lease was busy, is later found gone with no tombstone and less
// than a second after the (late) stamp: Watch says "expired" for a
// release by its holder.
func TestAdversary29b_WatchSlowCallbackStampsLate(t *testing.T) {
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	watcher, _ := sharedClient(t, lease.WithPrefix(prefix))
	long := lease.Spec{TTL: 30 * time.Second, Deadline: time.Minute}
	hs := map[string]*holding{"a": holdUntil(t, c, "a", long), "b": holdUntil(t, c, "b", long)}
	var mu sync.Mutex
	var changes []lease.Change
	first := ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watcher.Watch(ctx, "*", 700*time.Millisecond, func(ch lease.Change) {
			mu.Lock()
			changes = append(changes, ch)
			slow := first == "" && ch.Kind == lease.ChangeHeld
			if slow {
				first = ch.Info.Key
			}
			mu.Unlock()
			if slow {
				// The other lease is released by its holder now, while
				// this callback runs (a slow consumer, or a long listing).
				other := "a"
				if ch.Info.Key == "a" {
					other = "b"
				}
				close(hs[other].release)
				if err := <-hs[other].done; err != nil {
					t.Errorf("release of %q: %v", other, err)
				}
				time.Sleep(900 * time.Millisecond)
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	var ended []lease.Change
	if !waitFor(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		ended = ended[:0]
		for _, ch := range changes {
			if ch.Kind == lease.ChangeEnded {
				ended = append(ended, ch)
			}
		}
		return len(ended) > 0
	}) {
		t.Fatal("the watch saw no end within 5s")
	}
	for _, ch := range ended {
		t.Logf("%q ended, How %q", ch.Info.Key, ch.How)
		if ch.How == "expired" || ch.How == "force-released" || ch.How == "hold ran out" {
			t.Errorf("%q was released by its holder: Watch says How %q", ch.Info.Key, ch.How)
		}
	}
}

// Close ends a Client's watches: WatchLeader's channel closes, and Watch
// must return too (with an error wrapping ErrClosed, as Lead does), not
// go on listing and subscribing through the go-redis client until its ctx
// ends. A Watch started on a closed Client returns ErrClosed at once.
func TestAdversary29b_CloseEndsWatch(t *testing.T) {
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	c, err := lease.New(shared.Client(t), lease.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, "*", 50*time.Millisecond, func(lease.Change) {}) }()
	leaders := c.WatchLeader(ctx, "k")
	<-leaders
	time.Sleep(100 * time.Millisecond) // the watch is listing
	c.Close()
	select {
	case _, ok := <-leaders:
		if ok {
			if _, ok := <-leaders; ok {
				t.Error("WatchLeader's channel still open after Close")
			}
		}
	case <-time.After(time.Second):
		t.Error("WatchLeader's channel not closed within 1s of Close")
	}
	select {
	case err := <-done:
		mustIs(t, err, lease.ErrClosed)
	case <-time.After(time.Second):
		cancel()
		<-done
		t.Fatal("Watch still running 1s after Close")
	}
	werr := make(chan error, 1)
	go func() { werr <- c.Watch(ctx, "*", 50*time.Millisecond, func(lease.Change) {}) }()
	select {
	case err := <-werr:
		mustIs(t, err, lease.ErrClosed)
	case <-time.After(time.Second):
		cancel()
		<-werr
		t.Fatal("Watch on a closed Client still running after 1s")
	}
}

// adv29bTerms records running terms across in-process candidates: at the
// instant a term starts, every other term's context must already be done
// (a term's context is cancelled, ErrLost, before another can start),
// whatever the fault.
type adv29bTerms struct {
	mu      sync.Mutex
	running map[context.Context]string
	started int
	tokens  []lease.Token
	errs    []string
}

func (r *adv29bTerms) enter(ctx context.Context, who string) func() {
	tok, _ := lease.TokenFrom(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for other, name := range r.running {
		if other.Err() == nil {
			r.errs = append(r.errs, fmt.Sprintf("%s entered term %d while %s's term context was not yet cancelled", who, tok, name))
		}
	}
	if n := len(r.tokens); n > 0 && tok <= r.tokens[n-1] {
		r.errs = append(r.errs, fmt.Sprintf("%s's term token %d after %d", who, tok, r.tokens[n-1]))
	}
	r.tokens = append(r.tokens, tok)
	r.running[ctx] = who
	r.started++
	return func() {
		r.mu.Lock()
		delete(r.running, ctx)
		r.mu.Unlock()
	}
}

// Under random faults on the leader's connection (replies blackholed,
// cut, delayed past a renewal) and redis-server paused past the TTL, no
// term starts before every earlier term's context is cancelled, and term
// tokens strictly increase.
func TestAdversary29b_StrictTermExclusionUnderFaults(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	cands := newCandidates(t, srv, 3, lease.WithRecheck(50*time.Millisecond))
	reg := &adv29bTerms{running: map[context.Context]string{}}
	var cur sync.Map // name -> leading
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, cd := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cd.c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: cd.name, Backoff: 20 * time.Millisecond}, func(fctx context.Context) error {
				leave := reg.enter(fctx, cd.name)
				defer leave()
				cur.Store(cd.name, true)
				defer cur.Delete(cd.name)
				<-fctx.Done()
				if cause := context.Cause(fctx); !errors.Is(cause, lease.ErrLost) && ctx.Err() == nil {
					t.Errorf("%s's term ended with cause %v, want ErrLost", cd.name, cause)
				}
				return nil
			})
			if err != nil {
				t.Errorf("%s: Lead = %v", cd.name, err)
			}
		}()
	}
	leader := func() *candidate {
		for range 200 {
			for _, cd := range cands {
				if _, ok := cur.Load(cd.name); ok {
					return cd
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("no leader within 2s")
		return nil
	}
	rng := rand.New(rand.NewPCG(29, uint64(time.Now().UnixNano())))
	for i := range 4 { // each fault ends the term; a few, to stay fast
		l := leader()
		switch (i + rng.IntN(3)) % 3 {
		case 0:
			l.proxy.Set(leasetest.Blackhole)
			time.Sleep(ttl + time.Duration(rng.IntN(100))*time.Millisecond)
			l.proxy.Set(leasetest.Pass)
		case 1:
			l.proxy.SetDelay(ttl + time.Duration(rng.IntN(100))*time.Millisecond)
			l.proxy.Set(leasetest.Delay)
			time.Sleep(ttl + ttl/2)
			l.proxy.Set(leasetest.Pass)
		case 2:
			srv.Pause()
			time.Sleep(ttl + time.Duration(rng.IntN(100))*time.Millisecond)
			srv.Resume()
		}
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
	}
	leader()
	cancel()
	wg.Wait()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	t.Logf("%d terms", reg.started)
	for _, e := range reg.errs {
		t.Error(e)
	}
	if reg.started < 4 {
		t.Errorf("%d terms, want at least 4 (each fault ends one)", reg.started)
	}
}

// A WatchLeader whose subscription is dead from the start (its new
// connection's replies blackholed; the command connections work) still
// reports a leader's graceful stop and the next leader within about a
// re-check, and never reports a stale leader as current for longer.
func TestAdversary29b_WatchLeaderDeadSubscription(t *testing.T) {
	const recheck = 200 * time.Millisecond
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	p := leasetest.StartProxy(t, srv.Addr())
	wr := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, PoolSize: 4, MinIdleConns: 4})
	t.Cleanup(func() { wr.Close() })
	wc, _ := newClient(t, wr, lease.WithRecheck(recheck))
	// Warm the command connections, then blackhole every new one.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); wr.Ping(context.Background()) }()
	}
	wg.Wait()
	if _, err := wc.Leader(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	p.SetNew(leasetest.Blackhole)
	c, _ := newClient(t, srv.Client(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := wc.WatchLeader(ctx, key)
	if l := <-ch; l.Err != nil || l.Holder != "" {
		t.Fatalf("first: %+v, want nobody", l)
	}
	term := adv26Lead(c, key, lease.LeadSpec{TTL: 10 * time.Second, Owner: "A"})
	term.waitEntered(t)
	startAt := time.Now()
	select {
	case l := <-ch:
		if l.Owner != "A" {
			t.Fatalf("got %+v, want A", l)
		}
		t.Logf("start seen after %v", time.Since(startAt))
	case <-time.After(recheck + 300*time.Millisecond):
		t.Fatal("the new leader not reported within a re-check")
	}
	stopAt := time.Now()
	term.stop(t)
	select {
	case l := <-ch:
		if l.Holder != "" || l.Err != nil {
			t.Fatalf("got %+v after the stop, want nobody", l)
		}
		t.Logf("stop seen after %v", time.Since(stopAt))
	case <-time.After(recheck + 300*time.Millisecond):
		t.Fatal("the stop not reported within a re-check")
	}
}

// Everything the election and watch APIs start ends once the Clients are
// closed: Lead (leading and campaigning), Elect with OnNewLeader,
// WatchLeader and Watch, with a leader's connection blackholed at the
// time of Close. Close ends each within the release timeout (a campaign's
// acquire in flight at its own limit), and no goroutine is left.
func TestAdversary29b_CloseLeavesNothingRunning(t *testing.T) {
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	ignore := goleak.IgnoreCurrent()
	type cl struct {
		p   *leasetest.Proxy
		rdb *redis.Client
		c   *lease.Client
	}
	var cls []cl
	for range 3 {
		p, err := leasetest.NewProxy(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		c, err := lease.New(rdb, lease.WithRecheck(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		cls = append(cls, cl{p, rdb, c})
	}
	ctx := context.Background()
	spec := lease.LeadSpec{TTL: 2 * time.Second}
	leading := make(chan string, 16)
	results := make(chan error, 16)
	for i, x := range cls[:2] {
		s := spec
		s.Owner = fmt.Sprint("lead-", i)
		go func() {
			results <- x.c.Lead(ctx, key, s, func(fctx context.Context) error {
				leading <- s.Owner
				<-fctx.Done()
				return nil
			})
		}()
	}
	es := spec
	es.Owner = "elect"
	go func() {
		results <- cls[2].c.Elect(ctx, key, es, lease.LeaderCallbacks{
			OnStartedLeading: func(fctx context.Context) { leading <- "elect"; <-fctx.Done() },
			OnNewLeader:      func(string) {},
		})
	}()
	go func() { results <- cls[2].c.Watch(ctx, "*", 50*time.Millisecond, func(lease.Change) {}) }()
	watches := []<-chan lease.Leader{cls[0].c.WatchLeader(ctx, key), cls[1].c.WatchLeader(ctx, key)}
	first := <-leading
	time.Sleep(200 * time.Millisecond)
	for _, x := range cls {
		x.p.Set(leasetest.Blackhole)
	}
	t.Logf("leader %s; closing every Client with its connection blackholed", first)
	// All at once: closed one after another, each Close waiting for its
	// blackholed release, the Watch's own read (bounded by the release
	// timeout) could time out before its Client's Close came, and the
	// Watch would rightly end with that error (seen under load).
	closedAt := time.Now()
	var closing sync.WaitGroup
	for _, x := range cls {
		closing.Go(func() { x.c.Close() })
	}
	closing.Wait()
	for range 4 {
		select {
		case err := <-results:
			if !errors.Is(err, lease.ErrClosed) {
				t.Errorf("after Close: %v, want ErrClosed", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a Lead, Elect or Watch still running 3s after Close")
		}
	}
	// A campaign's acquire already sent to the blackholed connection when
	// Close came is not abandoned: it ends at its own limit, the TTL less
	// the drift (Close's doc; round 33c saw 2.23s, 1 run in 16).
	if d, bound := time.Since(closedAt), max(lease.DefaultReleaseTimeout, spec.TTL)+700*time.Millisecond; d > bound {
		t.Errorf("the calls ended %v after Close, want within the release timeout %v, or an acquire's TTL %v if one was in flight", d, lease.DefaultReleaseTimeout, spec.TTL)
	}
	for _, ch := range watches {
		for range ch {
		}
	}
	for _, x := range cls {
		x.rdb.Close()
		x.p.Close()
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left behind: %v", err)
	}
}

// Owners made of every byte the escaping touches, at the longest allowed
// (200 bytes, 600 escaped): Leader, Inspect and WatchLeader report them
// exactly, a graceful stop hands over to the other candidate at once (the
// queue entry and the handover message carry the long identity), and
// ForceRelease takes the identity Inspect shows.
func TestAdversary29b_NastyOwners(t *testing.T) {
	c1, _ := sharedClient(t, lease.WithRecheck(300*time.Millisecond))
	c2, _ := sharedClient(t, lease.WithRecheck(300*time.Millisecond))
	key := uniqueKey(t)
	mk := func(fill string) string {
		b := []byte("~a/b:c|d%e{f}g h\n\x00é,;=@#")
		for len(b) < 200 {
			b = append(b, fill...)
		}
		return string(b[:200])
	}
	o1, o2 := mk("%/"), mk(":|")
	ctx := context.Background()
	watch := c2.WatchLeader(ctx, key)
	if l := <-watch; l.Holder != "" {
		t.Fatalf("first: %+v", l)
	}
	t1 := adv26Lead(c1, key, lease.LeadSpec{TTL: 10 * time.Second, Owner: o1})
	t1.waitEntered(t)
	l, err := c2.Leader(ctx, key)
	if err != nil || l.Owner != o1 {
		t.Fatalf("Leader = %+v, %v; want owner %q", l, err, o1)
	}
	select {
	case wl := <-watch:
		if wl.Owner != o1 || wl.Holder != l.Holder {
			t.Fatalf("WatchLeader: %+v", wl)
		}
	case <-time.After(6 * time.Second):
		t.Fatal("WatchLeader did not report the leader")
	}
	t2 := adv26Lead(c2, key, lease.LeadSpec{TTL: 10 * time.Second, Owner: o2})
	defer t2.stop(t)
	if !waitFor(3*time.Second, func() bool { return len(inspect(t, c2, key).Waiters) == 1 }) {
		t.Fatal("the second candidate never queued")
	}
	stopAt := time.Now()
	t1.stop(t)
	t2.waitEntered(t)
	if d := time.Since(stopAt); d > time.Second {
		t.Errorf("handover took %v, want at once", d)
	}
	info := inspect(t, c1, key)
	if info.Owner != o2 {
		t.Fatalf("Inspect owner %q, want %q", info.Owner, o2)
	}
	res, err := c1.ForceRelease(ctx, key, info.Holder)
	if err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v", res, err)
	}
}

// WatchLeader on a lease whose key has no expiry (PTTL -1: written or
// PERSISTed from outside, a state Inspect reports as TTL -1) or that is in
// its last millisecond: Remaining is 0, and the watch must not turn that
// into a re-read every millisecond (about a thousand scripts a second on
// the server, for as long as the key stays), but look again within the
// re-check interval like any other change.
func TestAdversary29b_WatchLeaderNoExpiryNoSpin(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	key := uniqueKey(t)
	if err := rdb.Set(context.Background(), lockKey(key), fmt.Sprintf("%032x/pod-1:7", 9), 0).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.WatchLeader(ctx, key)
	if l := <-ch; l.Owner != "pod-1" || l.Term != 7 {
		t.Fatalf("first: %+v", l)
	}
	before := serverCalls(t, rdb)
	time.Sleep(time.Second)
	after := serverCalls(t, rdb)
	n := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	t.Logf("%d leader reads in 1s with a re-check of 200ms", n)
	if n > 20 {
		t.Errorf("%d leader reads in 1s, want about 5 (one a re-check)", n)
	}
	// The key gone: reported within a re-check.
	rdb.Del(context.Background(), lockKey(key))
	select {
	case l := <-ch:
		if l.Holder != "" || l.Err != nil {
			t.Fatalf("after the delete: %+v", l)
		}
	case <-time.After(time.Second):
		t.Fatal("the delete not reported within 1s")
	}
}

// "Close stops the Client: later calls return ErrClosed." The leader and
// inspection calls too: a closed Client must not go on reading leases, and
// above all must not force-release one (a write) on an operator's behalf.
// WatchLeader on a closed Client reports ErrClosed and closes its channel.
func TestAdversary29b_CallsAfterCloseReturnErrClosed(t *testing.T) {
	c, err := lease.New(shared.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := sharedClient(t)
	key := uniqueKey(t)
	h := holdUntil(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
	info := inspect(t, c, key)
	c.Close()
	ctx := context.Background()
	_, err = c.Leader(ctx, key)
	mustIs(t, err, lease.ErrClosed)
	_, err = c.Inspect(ctx, key)
	mustIs(t, err, lease.ErrClosed)
	_, _, err = c.List(ctx, "*", "")
	mustIs(t, err, lease.ErrClosed)
	res, err := c.ForceRelease(ctx, key, info.Holder)
	mustIs(t, err, lease.ErrClosed)
	if res != 0 {
		t.Errorf("ForceRelease on a closed Client = %v", res)
	}
	if now := inspect(t, holder, key); now.Holder != info.Holder {
		t.Fatalf("the lease changed hands after a ForceRelease on a closed Client: %+v", now)
	}
	var got []lease.Leader
	for l := range c.WatchLeader(ctx, key) {
		got = append(got, l)
	}
	if len(got) != 1 || !errors.Is(got[0].Err, lease.ErrClosed) {
		t.Errorf("WatchLeader on a closed Client reported %+v, want one Leader with Err wrapping ErrClosed", got)
	}
	close(h.release)
	if err := <-h.done; err != nil {
		t.Errorf("the holder's Do = %v", err)
	}
}

// ForceRelease hands the lease to the waiting candidate (its message names
// it), then says "x" on the key's channel. Watch keeps the last message per
// key until it looks: when the next holder has released the lease by its
// own release before Watch gets to the "x" (here Watch's callback for the
// handover is slow), that "x" must not make Watch report the next holder's
// own release as "force-released": its tombstone says released.
func TestAdversary29b_WatchForceNoteNotPinnedOnNextHolder(t *testing.T) {
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	a, _ := sharedClient(t, lease.WithPrefix(prefix))
	b, _ := sharedClient(t, lease.WithPrefix(prefix))
	watcher, _ := sharedClient(t, lease.WithPrefix(prefix))
	const key = "k"
	long := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}
	ha := holdUntil(t, a, key, long)
	var mu sync.Mutex
	var changes []lease.Change
	ctx, cancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() {
		wdone <- watcher.Watch(ctx, key, 10*time.Second, func(ch lease.Change) {
			mu.Lock()
			changes = append(changes, ch)
			mu.Unlock()
			if ch.Kind == lease.ChangeGranted {
				time.Sleep(200 * time.Millisecond) // a slow consumer
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-wdone; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // the watch's first listing
	bdone := make(chan error, 1)
	go func() {
		bdone <- b.Do(context.Background(), key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second},
			func(context.Context) error { time.Sleep(50 * time.Millisecond); return nil })
	}()
	if !waitFor(3*time.Second, func() bool { return len(inspect(t, a, key).Waiters) == 1 }) {
		select {
		case err := <-bdone:
			t.Fatalf("the waiter never queued: %v", err)
		default:
		}
		t.Fatalf("the waiter never queued: %+v", inspect(t, a, key))
	}
	info := inspect(t, a, key)
	if res, err := a.ForceRelease(context.Background(), key, info.Holder); err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v", res, err)
	}
	if err := <-bdone; err != nil {
		t.Fatalf("the waiter's Do = %v", err)
	}
	close(ha.release) // A learns of the forced release at its release
	var ended []lease.Change
	if !waitFor(3*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		ended = ended[:0]
		for _, ch := range changes {
			if ch.Kind == lease.ChangeEnded {
				ended = append(ended, ch)
			}
		}
		return len(ended) >= 2
	}) {
		t.Fatalf("the watch saw %d ends, want 2: %+v", len(ended), changes)
	}
	for i, ch := range ended {
		t.Logf("end %d: holder %s How %q", i, ch.Info.Holder, ch.How)
	}
	if ended[0].Info.Holder != info.Holder || ended[0].How != "force-released" {
		t.Errorf("first end: %s %q, want %s force-released", ended[0].Info.Holder, ended[0].How, info.Holder)
	}
	if ended[1].How != "released" {
		t.Errorf("the waiter's own release: How %q, want released", ended[1].How)
	}
}
