package lease_test

// Round 68 (a helper's adversary round), change aaaf989: reads (Leader,
// WatchLeader, Inspect, List, ForceRelease) whose errors may say the slot
// map changed reload a Cluster client's slot map. A master hangs
// (SIGSTOP) and its replica takes over.

import (
	"context"
	"errors"
	"fmt"
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

// adv68SubscribedOn returns the addresses of the nodes where channel has a
// subscriber (PUBSUB NUMSUB is per node on a Cluster).
func adv68SubscribedOn(t *testing.T, cl *leasetest.Cluster, channel string) []string {
	t.Helper()
	var on []string
	for _, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		m, err := c.PubSubNumSub(ctx, channel).Result()
		cancel()
		c.Close()
		if err == nil && m[channel] > 0 {
			on = append(on, n.Addr())
		}
	}
	return on
}

func adv68TracedObserver(t *testing.T, cl *leasetest.Cluster, avoid *leasetest.Server, key string, opts ...lease.Option) (*lease.Client, *adv68Reports, context.CancelFunc, *adv68Trace) {
	t.Helper()
	channel := "lease:{" + key + "}:c"
	tr := &adv68Trace{}
	c, _ := newClient(t, adv68Traced(t, cl, tr), opts...)
	ctx, cancel := context.WithCancel(context.Background())
	reps := adv68Collect(c.WatchLeader(ctx, key))
	if _, ok := reps.first(time.Time{}, 5*time.Second, func(l lease.Leader) bool { return l.Err == nil }); !ok {
		t.Fatalf("no first report: %v", reps)
	}
	var on []string
	waitFor(3*time.Second, func() bool { on = adv68SubscribedOn(t, cl, channel); return len(on) > 0 })
	t.Logf("watch subscription on %v (the key's master: %s)", on, avoid.Addr())
	return c, reps, cancel, tr
}

// adv68Trace records, per node, the slot map loads and lease reads a
// ClusterClient sends (hooked on every node client as go-redis makes it).
type adv68Trace struct {
	mu    sync.Mutex
	since time.Time
	lines []string
}

func adv68Traced(t *testing.T, cl *leasetest.Cluster, tr *adv68Trace, adjust ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	cc := cl.Client(t, adjust...)
	cc.OnNewNode(func(rdb *redis.Client) {
		addr := rdb.Options().Addr
		rdb.AddHook(adv68Hook{process: func(next redis.ProcessHook) redis.ProcessHook {
			return func(ctx context.Context, cmd redis.Cmder) error {
				name := strings.ToLower(cmd.FullName())
				if name != "cluster slots" && name != "evalsha" && name != "eval" && name != "get" {
					return next(ctx, cmd)
				}
				start := time.Now()
				err := next(ctx, cmd)
				tr.mu.Lock()
				if !tr.since.IsZero() {
					e := "ok"
					if err != nil {
						e = err.Error()
						if len(e) > 40 {
							e = e[:40]
						}
					}
					tr.lines = append(tr.lines, fmt.Sprintf("+%v %s %s %v %s", start.Sub(tr.since).Round(time.Millisecond), addr, name, time.Since(start).Round(time.Millisecond), e))
				}
				tr.mu.Unlock()
				return err
			}
		}})
	})
	return cc
}

func (tr *adv68Trace) start(at time.Time) {
	tr.mu.Lock()
	tr.since = at
	tr.mu.Unlock()
}

func (tr *adv68Trace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.lines, "; ")
}

// adv68LoadStall is how long a Cluster client's slot map may stay old
// after the failover through no fault of the runtime's: go-redis loads it
// from one node at a time, in random order, on a goroutine of its own
// without a deadline, and one load that asks the hung node first waits
// for it (5s here: go-redis's dial timeout) before asking the next; the
// runtime's reloads meanwhile are merged into that one. Twice, and a
// second. (Measured after the failover: 0.2-3.5s for an operator's
// ForceRelease, 0-1.6s for a watch's report of a new term.) Before the
// runtime reloaded after reads, a Client that only read kept asking the
// hung node until go-redis's own reload, a minute later.
const adv68LoadStall = 2*5*time.Second + time.Second

// (The Cluster tests of this round do not run in parallel: six servers
// each, failing over, beside the parallel timing tests on 2 cores made
// those fail in CI.)

type adv68Term struct {
	tok lease.Token
	at  time.Time
}

// adv68Leader starts a 3-master Cluster with a replica each and a
// leader (Lead, owner, ttl) on a key of prefix's master, victim; it
// returns once the first term started. The leader's terms come on terms;
// the victim is resumed and the leader stopped at the test's end.
func adv68Leader(t *testing.T, prefix, owner string, ttl time.Duration) (cl *leasetest.Cluster, victim *leasetest.Server, key string, lrec *leasetest.Recorder, terms chan adv68Term, first adv68Term) {
	t.Helper()
	cl = leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	victim, err := cl.MasterForKey(ctx, lockKey(prefix))
	if err != nil {
		t.Fatal(err)
	}
	key = adv67KeysOn(t, cl, victim, prefix, 1)[0]
	leader, lrec := newClient(t, cl.Client(t))
	terms = make(chan adv68Term, 16)
	lctx, lcancel := context.WithCancel(ctx)
	leadDone := make(chan error, 1)
	go func() {
		leadDone <- leader.Lead(lctx, key, lease.LeadSpec{TTL: ttl, Owner: owner}, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			terms <- adv68Term{tok, time.Now()}
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() {
		victim.Resume()
		lcancel()
		<-leadDone
	})
	select {
	case first = <-terms:
	case <-time.After(10 * time.Second):
		t.Fatal("no first term")
	}
	return cl, victim, key, lrec, terms, first
}

// A leader (Lead, TTL 2s) on a key whose master hangs, then fails over.
// Two watches (re-check 500ms, the default, and a minute): each reports
// Err once the leader's lease has run out (no later than the TTL after
// the hang, plus a little), and then the leader's new term on the
// promoted replica soon after its start (the re-check-a-minute watch by
// its grant's "g"; within a second when the watch's slot map is current,
// within adv68LoadStall when go-redis's load of it waited on the hung
// node).
func TestAdversary68_WatchLeaderAcrossHungMaster(t *testing.T) {
	const ttl = 2 * time.Second
	cl, victim, key, lrec, terms, first := adv68Leader(t, "adv68w", "L", ttl)
	ctx := context.Background()
	_, repsD, cancelD, trD := adv68TracedObserver(t, cl, victim, key)
	defer cancelD()
	_, repsM, cancelM, trM := adv68TracedObserver(t, cl, victim, key, lease.WithRecheck(time.Minute))
	defer cancelM()
	traces := map[*adv68Reports]*adv68Trace{repsD: trD, repsM: trM}
	for name, r := range map[string]*adv68Reports{"default": repsD, "minute": repsM} {
		if _, ok := r.first(time.Time{}, 3*time.Second, func(l lease.Leader) bool { return l.Term == first.tok }); !ok {
			t.Fatalf("%s watch: no report of the first term: %v", name, r)
		}
	}
	time.Sleep(time.Second)

	pausedAt := time.Now()
	trD.start(pausedAt)
	trM.start(pausedAt)
	victim.Pause()
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	promoted, err := cl.WaitFailover(wctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	failedOver := time.Now()
	var next adv68Term
	select {
	case next = <-terms:
	case <-time.After(adv68LoadStall + 5*time.Second):
		t.Fatalf("the leader got no new term within %v of the failover; events %v", adv68LoadStall+5*time.Second, kinds(lrec.Events()))
	}
	t.Logf("failover to %s %v after the hang; new term %d %v after the failover",
		promoted.Addr(), failedOver.Sub(pausedAt).Round(time.Millisecond), next.tok, next.at.Sub(failedOver).Round(time.Millisecond))
	for name, r := range map[string]*adv68Reports{"default": repsD, "minute": repsM} {
		e, ok := r.first(pausedAt, 0, func(l lease.Leader) bool { return l.Err != nil })
		switch {
		case !ok:
			// The first term may have ended (lost) and been reported as
			// nobody before any read failed: then no Err is owed.
			t.Logf("%s watch: no Err reported: %v", name, r)
		case e.at.Sub(pausedAt) > ttl+300*time.Millisecond:
			t.Errorf("%s watch: Err reported %v after the hang, past the leader's lease (TTL %v): vouched too long: %v", name, e.at.Sub(pausedAt), ttl, r)
		default:
			t.Logf("%s watch: Err %v after the hang", name, e.at.Sub(pausedAt).Round(time.Millisecond))
		}
		got, ok := r.first(failedOver, adv68LoadStall+5*time.Second, func(l lease.Leader) bool { return l.Err == nil && l.Term == next.tok })
		if !ok {
			t.Errorf("%s watch: the new term %d (started %v after the failover) not reported within %v: %v; its Client's requests since the hang (failover at +%v): %v", name, next.tok, next.at.Sub(failedOver).Round(time.Millisecond), adv68LoadStall+5*time.Second, r, failedOver.Sub(pausedAt).Round(time.Millisecond), traces[r])
			continue
		}
		t.Logf("%s watch: new term reported %v after it started", name, got.at.Sub(next.at).Round(time.Millisecond))
		if d := got.at.Sub(next.at); d > adv68LoadStall {
			t.Errorf("%s watch: the new term (its grant's \"g\" published at once) reported %v after it started, %v after the failover: reports %v; its Client's requests since the hang (failover at +%v, term at +%v): %v", name, d.Round(time.Millisecond), got.at.Sub(failedOver).Round(time.Millisecond), r, failedOver.Sub(pausedAt).Round(time.Millisecond), next.at.Sub(pausedAt).Round(time.Millisecond), traces[r])
		}
	}
}

// Leases held on every master for the whole test (TTL 20s, renewed across
// the failover); one master hangs, then fails over. A listing that starts
// during the hang fails at the hung master (an error with the cursor to go
// on from, as List's doc says) and is resumed from that cursor, again
// and again, until it ends after the failover. Every lease held for the
// whole listing must be listed. When the promoted replica's address sorts
// before the hung master's, List resumes at "the next master in order",
// after it. Also measured: how soon after the failover a listing from the
// start succeeds.
func TestAdversary68_ListResumedAcrossHungMasterFailover(t *testing.T) {
	ctx := context.Background()
	// A cluster where some master's replica's address sorts before its
	// own (free ports are random: up to 4 clusters are started).
	var (
		cl      *leasetest.Cluster
		masters []*leasetest.Server
		victim  *leasetest.Server
		vreps   []*leasetest.Server
	)
	for try := 0; try < 4 && vreps == nil; try++ {
		c, err := leasetest.NewCluster(3, 1)
		if err != nil {
			t.Fatal(err)
		}
		ms := c.Nodes[:3]
		for _, m := range ms {
			reps, err := c.ReplicasOf(ctx, m)
			if err != nil || len(reps) == 0 {
				c.Stop()
				t.Fatalf("replicas of %s: %v %v", m.Addr(), reps, err)
			}
			if reps[0].Addr() < m.Addr() {
				victim, vreps = m, reps
				break
			}
		}
		if vreps == nil && try < 3 {
			c.Stop()
			continue
		}
		cl, masters = c, ms
		t.Cleanup(c.Stop)
	}
	if vreps == nil {
		victim = masters[0]
		vreps, _ = cl.ReplicasOf(ctx, victim)
		t.Logf("no master's replica sorts before it in 4 clusters; victim %s, replica %s (nothing to miss)", victim.Addr(), vreps[0].Addr())
	}
	holder, hrec := newClient(t, cl.Client(t))
	release := make(chan struct{})
	var keys []string
	var helds []<-chan error
	for i, m := range masters {
		for _, k := range adv67KeysOn(t, cl, m, fmt.Sprintf("adv68l%d-", i), 2) {
			keys = append(keys, k)
			helds = append(helds, hold(t, holder, k, lease.Spec{TTL: 20 * time.Second, Deadline: 60 * time.Second}, release))
		}
	}
	defer func() {
		victim.Resume()
		close(release)
		for _, h := range helds {
			<-h
		}
	}()
	sort.Strings(keys)
	lister, _ := newClient(t, cl.Client(t))
	listAll := func(budget time.Duration) (map[string]bool, error) {
		found := map[string]bool{}
		cursor := ""
		for {
			lctx, cancel := context.WithTimeout(ctx, budget)
			page, next, err := lister.List(lctx, "adv68l*", cursor)
			cancel()
			for _, in := range page {
				found[in.Key] = true
			}
			if err != nil {
				return found, err
			}
			if cursor = next; cursor == "" {
				return found, nil
			}
		}
	}
	if found, err := listAll(2 * time.Second); err != nil || len(found) != len(keys) {
		t.Fatalf("listing before the fault: %v of %d, %v", found, len(keys), err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := victim.WaitSync(wctx, vreps...); err != nil {
		t.Fatal(err)
	}
	wcancel()

	pausedAt := time.Now()
	victim.Pause()
	var failedOver atomic.Int64
	foDone := make(chan struct{})
	go func() {
		defer close(foDone)
		fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if _, err := cl.WaitFailover(fctx, victim); err == nil {
			failedOver.Store(time.Now().UnixNano())
		}
	}()
	// The resumed listing.
	found := map[string]bool{}
	cursor := ""
	var errs []string
	for time.Since(pausedAt) < 20*time.Second {
		lctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		page, next, err := lister.List(lctx, "adv68l*", cursor)
		cancel()
		for _, in := range page {
			found[in.Key] = true
		}
		if err != nil {
			if len(errs) < 3 || !strings.Contains(errs[len(errs)-1], "SCAN") {
				errs = append(errs, fmt.Sprintf("+%v cursor %q: %v", time.Since(pausedAt).Round(time.Millisecond), next, err))
			}
			cursor = next
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	endedAt := time.Now()
	// The listing may end (its reload found the new master) before the
	// watcher of the failover, polling on a loaded machine, has seen it
	// (CI: "no failover" 9s into a 15s wait).
	<-foDone
	fo := time.Unix(0, failedOver.Load())
	if failedOver.Load() == 0 {
		t.Fatalf("no failover within 15s")
	}
	var missing []string
	for _, k := range keys {
		if !found[k] {
			missing = append(missing, k)
		}
	}
	t.Logf("victim %s (replica %s); failover %v after the hang; resumed listing ended %v after the failover; errors: %v",
		victim.Addr(), vreps[0].Addr(), fo.Sub(pausedAt).Round(time.Millisecond), endedAt.Sub(fo).Round(time.Millisecond), errs)
	if cursor != "" {
		t.Errorf("the resumed listing did not end within 20s of the hang (cursor %q)", cursor)
	}
	if len(missing) > 0 {
		t.Errorf("a listing resumed from List's error cursor after the failover missed %d of %d leases held for the whole listing (on the failed-over shard: its promoted replica %s sorts before the hung master %s, and resumeAt goes on after it): missing %v",
			len(missing), len(keys), vreps[0].Addr(), victim.Addr(), missing)
	}
	// A listing from the start after the failover.
	var fullAt time.Time
	for time.Since(fo) < 10*time.Second {
		f, err := listAll(700 * time.Millisecond)
		if err == nil && len(f) == len(keys) {
			fullAt = time.Now()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fullAt.IsZero() {
		t.Errorf("no complete listing within 10s of the failover")
	} else {
		t.Logf("a complete listing from the start %v after the failover", fullAt.Sub(fo).Round(time.Millisecond))
	}
	if n := hrec.Count(lease.EventLost); n != 0 {
		t.Errorf("the holder lost %d leases", n)
	}
}

// ForceRelease of a real holder on the failed-over shard, by an operator
// Client made before the hang whose attempts during the hang timed out:
// a normal Client and a ReadOnly one (whose GET may go to a replica).
// Each must release the holder soon after the failover (within
// adv68LoadStall), and the holder must learn it lost the lease.
const adv68HolderTTL = 20 * time.Second

func TestAdversary68_ForceReleaseHolderAcrossHungMaster(t *testing.T) {
	cl := leasetest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	victim, err := cl.MasterForKey(ctx, lockKey("adv68f"))
	if err != nil {
		t.Fatal(err)
	}
	keys := adv67KeysOn(t, cl, victim, "adv68f", 2)
	holder, _ := newClient(t, cl.Client(t))
	type result struct {
		cause error
		at    time.Time
	}
	causes := make([]chan result, len(keys))
	done := make([]chan error, len(keys))
	for i, k := range keys {
		causes[i] = make(chan result, 1)
		done[i] = make(chan error, 1)
		held := make(chan struct{})
		go func() {
			// (A TTL the holder's renewals outlast across the hang,
			// the failover and a slot map load that waits on the hung
			// node: see adv68LoadStall.)
			done[i] <- holder.Do(ctx, k, lease.Spec{TTL: adv68HolderTTL, Deadline: 60 * time.Second}, func(ctx context.Context) error {
				close(held)
				<-ctx.Done()
				causes[i] <- result{context.Cause(ctx), time.Now()}
				return nil
			})
		}()
		select {
		case <-held:
		case <-time.After(5 * time.Second):
			t.Fatalf("holder did not get %s", k)
		}
	}
	ops := []struct {
		name string
		c    *lease.Client
	}{}
	tr1, tr2 := &adv68Trace{}, &adv68Trace{}
	o1, _ := newClient(t, adv68Traced(t, cl, tr1))
	o2, _ := newClient(t, adv68Traced(t, cl, tr2, func(o *redis.ClusterOptions) { o.ReadOnly = true }))
	trs := []*adv68Trace{tr1, tr2}
	ops = append(ops, struct {
		name string
		c    *lease.Client
	}{"normal", o1}, struct {
		name string
		c    *lease.Client
	}{"ReadOnly", o2})
	ids := make([]string, len(keys))
	for i, k := range keys {
		in, err := ops[i].c.Inspect(ctx, k)
		if err != nil || in.Holder == "" {
			t.Fatalf("%s: inspect %s: %+v %v", ops[i].name, k, in, err)
		}
		ids[i] = in.Holder
		if _, err := ops[i].c.Leader(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	vreps, _ := cl.ReplicasOf(ctx, victim)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := victim.WaitSync(wctx, vreps...); err != nil {
		t.Fatal(err)
	}
	wcancel()
	pausedAt := time.Now()
	tr1.start(pausedAt)
	tr2.start(pausedAt)
	victim.Pause()
	defer func() {
		victim.Resume()
		for i := range keys {
			<-done[i]
		}
	}()
	type outcome struct {
		res  lease.ForceResult
		err  error
		at   time.Time
		errs map[string]int
	}
	outs := make([]outcome, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := outcome{errs: map[string]int{}}
			for time.Since(pausedAt) < 20*time.Second {
				rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				res, err := ops[i].c.ForceRelease(rctx, keys[i], ids[i])
				cancel()
				if err == nil {
					o.res, o.at = res, time.Now()
					break
				}
				o.err = err
				o.errs[outcomeOf(err)]++
				time.Sleep(50 * time.Millisecond)
			}
			outs[i] = o
		}()
	}
	fctx, fcancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = cl.WaitFailover(fctx, victim)
	fcancel()
	if err != nil {
		t.Fatal(err)
	}
	failedOver := time.Now()
	wg.Wait()
	for i, o := range outs {
		name := ops[i].name
		if o.at.IsZero() {
			t.Errorf("%s operator: no ForceRelease answered within 20s of the hang: %v (errors %v)", name, o.err, o.errs)
			continue
		}
		t.Logf("%s operator: %v %v after the failover (errors before: %v)", name, o.res, o.at.Sub(failedOver).Round(time.Millisecond), o.errs)
		if o.res != lease.ForceReleased {
			t.Errorf("%s operator: ForceRelease of the live holder answered %v, want released", name, o.res)
		}
		if d := o.at.Sub(failedOver); d > adv68LoadStall {
			t.Errorf("%s operator: ForceRelease (300ms budget, every 50ms) of the live holder answered only %v after the failover (%v after the hang); its Client's requests since the hang: %v", name, d.Round(time.Millisecond), o.at.Sub(pausedAt).Round(time.Millisecond), trs[i])
		}
		select {
		case r := <-causes[i]:
			t.Logf("%s: holder's fn ended %v after the release: %v", name, r.at.Sub(o.at).Round(time.Millisecond), r.cause)
			if !errors.Is(r.cause, lease.ErrLost) {
				t.Errorf("%s: the holder's context ended with %v, want ErrLost", name, r.cause)
			}
		case <-time.After(adv68HolderTTL):
			// README: the holder learns of it at its next renewal, at most
			// its remaining TTL after the release.
			t.Errorf("%s: the holder did not learn of the forced release within its TTL (%v)", name, adv68HolderTTL)
		}
	}
}

// Reload storm: a master hangs (no failover within the measurement: node
// timeout 20s). One Client runs 20 WatchLeaders with a 10ms re-check on
// keys of that master, then also loops of Leader, Inspect, ForceRelease
// and List (100-300ms budgets); every read times out and asks for a slot
// map reload. CLUSTER SLOTS/SHARDS/NODES calls on the healthy nodes are
// counted (INFO commandstats) over 4s each: a handful per second is fine,
// hundreds a defect.
func TestAdversary68_ReloadRateWhileMasterHangs(t *testing.T) {
	cl := leasetest.StartClusterReplicas(t, 3, 1, func(o *leasetest.ClusterOptions) { o.NodeTimeout = 20 * time.Second })
	ctx := context.Background()
	victim, err := cl.MasterForKey(ctx, lockKey("adv68r"))
	if err != nil {
		t.Fatal(err)
	}
	keys := adv67KeysOn(t, cl, victim, "adv68r", 20)
	var healthy []*redis.Client
	for _, n := range cl.Nodes {
		if n != victim {
			healthy = append(healthy, n.Client(t))
		}
	}
	topo := func() int64 {
		var sum int64
		for _, h := range healthy {
			calls := serverCalls(t, h)
			sum += calls["cluster|slots"] + calls["cluster|shards"] + calls["cluster|nodes"]
		}
		return sum
	}
	c, _ := newClient(t, cl.Client(t), lease.WithRecheck(10*time.Millisecond))
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var reps []*adv68Reports
	for _, k := range keys {
		reps = append(reps, adv68Collect(c.WatchLeader(wctx, k)))
	}
	for _, r := range reps {
		if _, ok := r.first(time.Time{}, 5*time.Second, func(l lease.Leader) bool { return l.Err == nil }); !ok {
			t.Fatalf("no first report: %v", r)
		}
	}
	measure := func(d time.Duration) float64 {
		a := topo()
		time.Sleep(d)
		return float64(topo()-a) / d.Seconds()
	}
	base := measure(2 * time.Second)
	victim.Pause()
	defer victim.Resume()
	watches := measure(4 * time.Second)
	var reads atomic.Int64
	lctx, lcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	loop := func(budget time.Duration, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				rctx, cancel := context.WithTimeout(lctx, budget)
				_ = f(rctx)
				cancel()
				reads.Add(1)
			}
		}()
	}
	for i := range 4 {
		k := keys[i]
		loop(100*time.Millisecond, func(ctx context.Context) error { _, err := c.Leader(ctx, k); return err })
		loop(100*time.Millisecond, func(ctx context.Context) error { _, err := c.Inspect(ctx, k); return err })
		loop(100*time.Millisecond, func(ctx context.Context) error {
			_, err := c.ForceRelease(ctx, k, adv68Foreign)
			return err
		})
	}
	loop(300*time.Millisecond, func(ctx context.Context) error { _, _, err := c.List(ctx, "adv68r*", ""); return err })
	all := measure(4 * time.Second)
	lcancel()
	wg.Wait()
	t.Logf("CLUSTER SLOTS/SHARDS/NODES calls per second on the %d healthy nodes: before the hang %.1f; 20 watches (re-check 10ms) on the hung master %.1f; plus read loops (%d reads) %.1f",
		len(healthy), base, watches, reads.Load(), all)
	if watches > 20 {
		t.Errorf("reload storm: %.1f slot map loads per second from one Client's watches", watches)
	}
	if all > 30 {
		t.Errorf("reload storm: %.1f slot map loads per second from one Client's reads", all)
	}
}
