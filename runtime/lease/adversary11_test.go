package lease_test

// Adversarial tests, round 11 (adv11): commits 3433898 and 4001e84. Waiters
// listen on their Client's inbox; a handover that names a waiter not yet
// registered was kept Client-wide (h.recent: 2s, 64 at most). Fixed: a
// call that may wait registers its identity before its acquire is sent
// (waitHub.expect), and only messages naming a registered identity are
// kept, one per identity.
// Run: go test -race -count=1 -run 'TestAdversary11_' ./runtime/lease

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv11Busy reports whether cmd is an acquire that answered busy.
func adv11Busy(args []any, cmd redis.Cmder) bool {
	if !adv10Script(args, "4") {
		return false
	}
	// The acquire script answers one integer, negative when busy (see
	// acquire.lua).
	var n int64
	var err error
	switch c := cmd.(type) {
	case *redis.IntCmd:
		n, err = c.Result()
	case *redis.Cmd: // the runtime reads script answers with a Cmd
		n, err = c.Int64()
	default:
		return false
	}
	return err == nil && n < 0
}

// One Client waits on many keys at once (a worker pool on a sharded
// queue, say). Each waiter's busy reply is slow to come back (300ms: a
// slow network, a GC pause), and meanwhile its holder releases, handing it
// the key for its full TTL (the inbox is live). The handovers reach the
// Client before its waiters join and are kept in h.recent, which holds 64:
// with more waiters than that, the oldest notes are pushed out by the
// newer ones within the same second, and their waiters, finding nothing
// when they join, sleep until their re-check while the key sits granted to
// them, unused.
func TestAdversary11_RecentNotesEvictedByOtherWaiters(t *testing.T) {
	t.Parallel()
	if slow := adv11ManyWaiters(t, 60); slow > 0 {
		t.Fatalf("control: %d of 60 waiters entered only at their re-check", slow)
	}
	if slow := adv11ManyWaiters(t, 80); slow > 0 {
		t.Errorf("%d of 80 waiters entered only at their re-check: their handover notes arrived before they joined and were evicted from h.recent (64) by the other waiters' notes", slow)
	}
}

// adv11ManyWaiters runs n waiters of one Client, each on its own key, whose
// busy replies are held while their holders release; it returns how many
// entered only at their re-check.
func adv11ManyWaiters(t *testing.T, n int) int {
	t.Helper()
	srv := leasetest.StartRedis(t)
	const (
		recheck = 3 * time.Second
		delay   = 600 * time.Millisecond
	)
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	wrdb := srv.Client(t, func(o *redis.Options) { o.PoolSize = 2 * n })
	var armed atomic.Int64
	wrdb.AddHook(adv10Hook{after: func(args []any, cmd redis.Cmder) {
		if adv11Busy(args, cmd) && armed.Add(-1) >= 0 {
			time.Sleep(delay)
		}
	}})
	waiter, _ := newClient(t, wrdb, lease.WithRecheck(recheck))
	if lag := adv10Handover(t, holder, waiter, op, uniqueKey(t)); lag > time.Second {
		t.Fatalf("warm-up handover took %v", lag)
	}
	keys := make([]string, n)
	release := make(chan struct{})
	helds := make([]<-chan error, n)
	for i := range keys {
		keys[i] = uniqueKey(t)
		helds[i] = hold(t, holder, keys[i], spec(20*time.Second, 30*time.Second), release)
	}
	armed.Store(int64(n))
	var mu sync.Mutex
	entered := map[string]time.Time{}
	errs := make(chan error, n)
	for _, k := range keys {
		go func() {
			errs <- waiter.Do(context.Background(), k, lease.Spec{TTL: 5 * time.Second, Deadline: 25 * time.Second, Wait: 20 * time.Second}, func(context.Context) error {
				mu.Lock()
				entered[k] = time.Now()
				mu.Unlock()
				return nil
			})
		}()
	}
	for _, k := range keys {
		adv2WaitQueued(t, op, k, 1)
	}
	released := time.Now()
	close(release)
	for i := range keys {
		if err := <-helds[i]; err != nil {
			t.Fatalf("holder: %v", err)
		}
	}
	for range keys {
		if err := <-errs; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	var lags []time.Duration
	slow := 0
	for _, k := range keys {
		lag := entered[k].Sub(released)
		lags = append(lags, lag)
		if lag > delay+time.Second {
			slow++
		}
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	t.Logf("%d waiters of one Client: lag after the release min %v, median %v, max %v; %d slower than %v (re-check %v)",
		n, lags[0].Round(time.Millisecond), lags[n/2].Round(time.Millisecond), lags[n-1].Round(time.Millisecond), slow, delay+time.Second, recheck)
	return slow
}

// The same eviction without any slow reply in bulk: a Client whose ACL
// refuses its inbox (an exact channel grant, "&lease:{k*}:c", that the
// probe "lease:{%probe-…}:c" does not match) listens on key channels, and
// there every handover to any other process's waiter is unnamed and kept
// in h.recent. A hot key the Client also watches (WatchLeader, or a waiter
// of its own) fills the 64 places in well under their 2s, so a handover
// that reaches one of its waiters just before it joins is pushed out and
// the waiter finds the key only at its re-check.
func TestAdversary11_InboxOffHotKeyEvictsHandover(t *testing.T) {
	t.Parallel()
	if lag := adv11InboxOff(t, 0); lag > 2*time.Second {
		t.Fatalf("control (no hot key traffic): handover took %v", lag.Round(time.Millisecond))
	}
	if lag := adv11InboxOff(t, 6); lag > 2*time.Second {
		t.Errorf("handover took %v: the release's message reached the Client before the waiter joined and was pushed out of h.recent by other processes' handovers on a watched hot key", lag.Round(time.Millisecond))
	}
}

// adv11InboxOff measures, for a Client whose inbox is refused, how long
// after its holder's release a waiter whose busy reply is held 1s enters,
// while churners other Clients hand a watched hot key around.
func adv11InboxOff(t *testing.T, churners int) time.Duration {
	t.Helper()
	srv := leasetest.StartRedis(t)
	const (
		recheck = 3 * time.Second
		delay   = time.Second
	)
	rules := append(without(leastPrivilege, "&lease:*"), "&lease:{k*}:c")
	wrdb := aclClient(t, srv, "w", rules...)
	var armed atomic.Bool
	executed := make(chan struct{})
	wrdb.AddHook(adv10Hook{after: func(args []any, cmd redis.Cmder) {
		if adv11Busy(args, cmd) && armed.CompareAndSwap(true, false) {
			close(executed)
			time.Sleep(delay)
		}
	}})
	waiter, wrec := newClient(t, wrdb, lease.WithRecheck(recheck))
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, k := range []string{"khot", "ktarget"} {
		ch := waiter.WatchLeader(ctx, k)
		go func() {
			for range ch {
			}
		}()
	}
	// Other processes churn on the hot key: every handover is published
	// on its channel.
	var handovers atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < churners; i++ {
		c, _ := newClient(t, srv.Client(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = c.Do(context.Background(), "khot", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second}, func(context.Context) error {
					handovers.Add(1)
					return nil
				})
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(500 * time.Millisecond) // the listeners' channels are live
	release := make(chan struct{})
	held := hold(t, holder, "ktarget", spec(20*time.Second, 30*time.Second), release)
	armed.Store(true)
	entered, done := adv10Enter(waiter, "ktarget")
	select {
	case <-executed:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's acquire never ran")
	}
	adv2WaitQueued(t, op, "ktarget", 1)
	before := handovers.Load()
	released := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	lag := (<-entered).Sub(released)
	t.Logf("inbox refused, %d churners; %d handovers on the hot key by the time the waiter entered; the waiter entered %v after the release (busy reply held %v, re-check %v); subscription failures %d",
		churners, handovers.Load()-before, lag.Round(time.Millisecond), delay, recheck, wrec.Count(lease.EventSubscriptionFailed))
	return lag
}

// Safety soak over the new paths at once: fenced calls on one key from
// Clients whose inbox is live, Clients whose ACL refuses the inbox (they
// listen on the key channel and get short claims), a Client that also
// watches the key (its waiters hear each handover twice: key channel and
// inbox), a Client behind a slow proxy, and calls with HoldMin. No two fn
// may overlap, tokens must increase, and the key must hold fn's token.
func TestAdversary11_MixedInboxFencedSoakNoOverlap(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	p := leasetest.StartProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { prdb.Close() })
	slow, _ := newClient(t, prdb)
	rules := append(without(leastPrivilege, "&lease:*"), "&lease:{k*}:c")
	off1, _ := newClient(t, aclClient(t, srv, "o1", rules...))
	off2, _ := newClient(t, aclClient(t, srv, "o2", rules...))
	watcher, _ := newClient(t, srv.Client(t))
	plain, _ := newClient(t, srv.Client(t))
	key := "ksoak"
	warm(t, slow, key)
	p.SetDelay(10 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wl := watcher.WatchLeader(ctx, key)
	go func() {
		for range wl {
		}
	}()

	per := adv10FencedSoak(t, direct, key, []*lease.Client{slow, off1, off2, watcher, plain}, func(ci, n int) time.Duration {
		if (ci+n)%7 == 0 {
			return 20 * time.Millisecond
		}
		return 0
	})
	t.Logf("entries per Client (slow, inbox refused x2, watcher, plain): %v", per)
}

// A release tells the next waiter's Client on its inbox by a PUBLISH inside
// the release script, run with the releasing Client's ACL user. A user
// whose channel grant does not cover the inbox namespace (a per-key grant
// such as "&lease:{k*}:c", which the commit supports on the subscribing
// side: such a Client listens on key channels instead) cannot publish
// there: the pcall swallows the refusal, nothing reports it, and yet the
// release has set the key for the waiter's full TTL, because PUBSUB NUMSUB
// saw the waiter's inbox subscribed. The waiter listens only on its inbox:
// it learns of the grant at its re-check, and the key sits granted and
// unused until then.
//
// Fixed in part: a release whose inbox publish is refused sets only the
// short claim, so the waiter confirms the grant at its re-check (a missed
// notification costs one re-check) and a waiter gone meanwhile holds the
// key no longer than the claim. Prompt handovers need the releasing user
// to be allowed to publish on the lease channels (the README's recipes
// grant &lease:*).
func TestAdversary11_HolderACLRefusesWaiterInboxPublish(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	const recheck = 3 * time.Second
	rules := append(without(leastPrivilege, "&lease:*"), "&lease:{k*}:c")
	holder, hrec := newClient(t, aclClient(t, srv, "h", rules...))
	waiter, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	op, _ := newClient(t, srv.Client(t))
	// Control: a holder with the README's grant.
	full, _ := newClient(t, aclClient(t, srv, "f", leastPrivilege...))
	if lag := adv10Handover(t, full, waiter, op, "kcontrol"); lag > time.Second {
		t.Fatalf("control handover took %v", lag)
	}
	lag := adv10Handover(t, holder, waiter, op, "ktarget")
	t.Logf("waiter of a Client with the README's ACL, holder with a per-key channel grant: entered %v after the release (re-check %v); events reported to the holder's observer: subscription failures %d",
		lag.Round(time.Millisecond), recheck, hrec.Count(lease.EventSubscriptionFailed))
	if lag > recheck+500*time.Millisecond {
		t.Errorf("handover took %v: more than one re-check (%v)", lag.Round(time.Millisecond), recheck)
	}
	// The refused publish left the waiter the short claim, not its TTL.
	release := make(chan struct{})
	held := hold(t, holder, "kclaim", spec(10*time.Second, 20*time.Second), release)
	go func() {
		_ = waiter.Do(context.Background(), "kclaim", lease.Spec{TTL: 10 * time.Second, Deadline: 15 * time.Second, Wait: 12 * time.Second}, nop)
	}()
	adv2WaitQueued(t, op, "kclaim", 1)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	info, err := op.Inspect(context.Background(), "kclaim")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the release the key is held for %v (waiter TTL 10s, claim %v)", info.TTL.Round(time.Millisecond), recheck+100*time.Millisecond)
	if info.TTL > recheck+100*time.Millisecond {
		t.Errorf("a handover the waiter was not told of set the key for %v, more than the claim", info.TTL)
	}
}
