package lease_test

// Regression tests for the runtime attacks of issue 11, one per item. Each
// failed on fda7df3.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// 1a. A context that outlived its call gets no reentry: fn hands a
// detached context to background work and returns; another Client takes
// the key; a later Do with the escaped context must not enter.
func TestReentryNotGrantedToEscapedContext(t *testing.T) {
	c, _ := sharedClient(t)
	other, _ := sharedClient(t)
	key := uniqueKey(t)
	s := spec(5*time.Second, 10*time.Second)
	var escaped context.Context
	if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		escaped = context.WithoutCancel(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	done := hold(t, other, key, s, release)
	defer func() { close(release); <-done }()

	err := c.Do(escaped, key, s, func(context.Context) error {
		t.Error("entered while another Client holds the key")
		return nil
	})
	mustIs(t, err, lease.ErrBusy)
}

// 1b. A lease that was lost gives no reentry, even to a context that does
// not carry its cancellation.
func TestReentryNotGrantedAfterLoss(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, spec(600*time.Millisecond, 10*time.Second), func(ctx context.Context) error {
		rdb.Del(ctx, lockKey(key))
		rdb.Set(ctx, lockKey(key), "other-owner:0", 5*time.Second)
		<-ctx.Done() // the renewal finds another owner
		inner := c.Do(context.WithoutCancel(ctx), key, spec(time.Second, 2*time.Second), func(context.Context) error {
			t.Error("nested call entered after the lease was lost")
			return nil
		})
		mustIs(t, inner, lease.ErrBusy)
		return nil
	})
	mustIs(t, err, lease.ErrLost)
}

// 1c. A nested call running in a goroutine of fn when fn returns: the
// lease is released under it, so it is cancelled and reports a loss.
func TestReentryEndsWithTheOuterCall(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	s := spec(5*time.Second, 10*time.Second)
	entered := make(chan struct{})
	inner := make(chan error, 1)
	var cause error
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		go func() {
			inner <- c.Do(context.WithoutCancel(ctx), key, s, func(ctx context.Context) error {
				close(entered)
				<-ctx.Done()
				cause = context.Cause(ctx)
				return nil
			})
		}()
		<-entered
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-inner:
		mustIs(t, err, lease.ErrLost)
		mustIs(t, cause, lease.ErrLost)
	case <-time.After(3 * time.Second):
		t.Fatal("the nested call was not cancelled when the outer call returned")
	}
}

// 2. A nested call's own spec applies: its Deadline cancels it, its
// MinValidity is checked against the outer lease, its Fence is not dropped
// silently, and its HoldMin keeps the key. (The Deadline's 50ms slack does
// not count the time the process did not run past the deadline.)
func TestNestedSpecApplies(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	outer := spec(time.Second, 10*time.Second)
	err := c.Do(context.Background(), key, outer, func(ctx context.Context) error {
		// Deadline.
		start := time.Now()
		short := spec(time.Second, 100*time.Millisecond)
		var cause error
		err := c.Do(ctx, key, short, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		mustIs(t, err, lease.ErrDeadline, context.DeadlineExceeded)
		mustIs(t, cause, lease.ErrDeadline)
		end := time.Now()
		if el, lost := end.Sub(start), st.lost(start.Add(100*time.Millisecond), end); el-lost > 100*time.Millisecond+50*time.Millisecond {
			t.Errorf("nested Deadline 100ms returned after %v (the process stalled for %v past the deadline)", el, lost)
		}

		// MinValidity against the outer lease's remaining validity.
		long := lease.Spec{TTL: 30 * time.Second, Deadline: 10 * time.Second, MinValidity: 20 * time.Second}
		err = c.Do(ctx, key, long, func(context.Context) error {
			t.Error("nested call entered with less validity than its MinValidity")
			return nil
		})
		mustIs(t, err, lease.ErrLowValidity)

		// Fence under a lease granted without fencing.
		fenced := spec(time.Second, 5*time.Second)
		fenced.Fence = true
		err = c.Do(ctx, key, fenced, func(context.Context) error {
			t.Error("nested fenced call entered without a token")
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "Fence") {
			t.Errorf("nested Fence under an unfenced lease: %v, want an error that says why", err)
		}

		// HoldMin of the nested call.
		holding := spec(time.Second, 5*time.Second)
		holding.HoldMin = 2 * time.Second
		return c.Do(ctx, key, holding, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if pttl, _ := rdb.PTTL(context.Background(), lockKey(key)).Result(); pttl < time.Second {
		t.Fatalf("PTTL after the outer call = %v, want the nested call's 2s hold", pttl)
	}
	if n := rec.Count(lease.EventAcquired); n != 1 {
		t.Fatalf("acquired %d times, want once (nested calls reuse the lease)", n)
	}
}

// 3a. fn outlives its validity while renewals get no reply and the CPU is
// busy: whatever the timers did, Do returns ErrLost.
func TestOverrunIsLoss(t *testing.T) {
	c, _, p, _, _ := proxied(t, nil)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const trials = 12
	violations := 0
	// A trial is a call that entered fn: one whose grant came back with
	// less than MinValidity left (the process stalled in the acquire, as a
	// loaded CI machine made it once: 22ms of 60ms left) rightly does not
	// enter, and is tried again.
	for i, tries := 0, 0; i < trials; tries++ {
		if tries == 3*trials {
			t.Fatalf("only %d of %d calls entered fn", i, tries)
		}
		p.Set(leasetest.Pass)
		entered := false
		err := c.Do(context.Background(), "overrun", spec(60*time.Millisecond, 5*time.Second), func(ctx context.Context) error {
			entered = true
			p.Set(leasetest.Blackhole)
			start := time.Now()
			for time.Since(start) < 150*time.Millisecond && ctx.Err() == nil {
				// CPU-bound work that checks its context on every loop
			}
			return nil
		})
		if !entered {
			mustIs(t, err, lease.ErrLowValidity)
			continue
		}
		if !errors.Is(err, lease.ErrLost) {
			violations++
			t.Logf("trial %d: Do = %v, want ErrLost", i, err)
		}
		i++
	}
	table(t, "fn overruns validity, renewals blackholed, GOMAXPROCS=1", "Do returns ErrLost", trials, violations)
}

// 3a'. A renewal's answer comes in time but is applied after the lease's
// validity ran out (the renewer's goroutine ran late), and the validity
// timer has not run yet either (as if its goroutine were later still).
// The late confirmation must not bring the lease back: §4 Loss says the
// lease is lost when valid-until passes, so fn is cancelled then (when the
// answer is applied, here) and Do reports ErrLost. Seen under -race load
// in CI: the renewal extended a lapsed lease and fn ran on, uncancelled,
// with Do returning nil.
func TestRenewalAppliedAfterValidityIsLoss(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	const ttl = 300 * time.Millisecond
	var first sync.Once
	restore := lease.SetRenewedHook(func() {
		// Only the first batch runs late: later renewals, had the lease
		// come back, would keep it alive until fn gives up.
		first.Do(func() { time.Sleep(ttl) })
	})
	defer restore()
	var cancelledAfter time.Duration
	var cause error
	err := c.Do(context.Background(), key, spec(ttl, 5*time.Second), func(ctx context.Context) error {
		l, _ := lease.FromContext(ctx)
		start := time.Now()
		// The first renewal is due at TTL/3; its timer has just handed
		// the lease to the renewer. From now on only the renewer and Do's
		// own checks can end the lease.
		time.Sleep(ttl/3 + 20*time.Millisecond)
		lease.StopValidityTimer(l)
		select {
		case <-ctx.Done():
			cancelledAfter = time.Since(start)
			cause = context.Cause(ctx)
		case <-time.After(3 * ttl):
		}
		return nil
	})
	if cause == nil {
		t.Fatalf("fn was never cancelled although its lease's validity ran out before the renewal was applied; Do = %v", err)
	}
	mustIs(t, cause, lease.ErrLost)
	mustIs(t, err, lease.ErrLost)
	t.Logf("fn cancelled %v after it started: %v", cancelledAfter.Round(time.Millisecond), cause)
}

// slowLossObserver records events and sleeps on the first EventLost (an
// observer is allowed to be slow: it may call anything).
type slowLossObserver struct {
	mu     sync.Mutex
	events []lease.Event
	slept  atomic.Bool
	block  time.Duration
}

func (o *slowLossObserver) Observe(e lease.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
	if e.Kind == lease.EventLost && o.slept.CompareAndSwap(false, true) {
		time.Sleep(o.block) // the others go on (sync.Once would hold them)
	}
}

// 3a”. Two leases of one renewal batch are lost together (the batch is
// applied after their validity, both validity timers late). One lease's
// slow observer must not delay the other's cancellation, and each call's
// EventLost comes before its EventDone (found by the adversary review of
// the fix above: the losses of a batch were reported one after another,
// and Do could return, EventDone first, while its loss waited in line).
func TestLossesOfABatchAreReportedIndependently(t *testing.T) {
	obs := &slowLossObserver{block: 400 * time.Millisecond}
	c, err := lease.New(shared.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ttl = 300 * time.Millisecond
	var first sync.Once
	defer lease.SetRenewedHook(func() { first.Do(func() { time.Sleep(ttl) }) })()
	keys := []string{uniqueKey(t), uniqueKey(t)}
	lostAt, cancelledAt := make([]time.Duration, 2), make([]time.Duration, 2)
	starts := make([]time.Time, 2)
	st := watchStalls(t, 5*time.Millisecond)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Do(context.Background(), k, spec(ttl, 5*time.Second), func(ctx context.Context) error {
				l, _ := lease.FromContext(ctx)
				start := time.Now()
				starts[i] = start
				time.Sleep(ttl/3 + 30*time.Millisecond)
				lease.StopValidityTimer(l)
				end := time.After(ttl + 150*time.Millisecond)
				lost, done := l.Lost(), ctx.Done()
				for lost != nil || done != nil {
					select {
					case <-lost:
						lostAt[i], lost = time.Since(start), nil
					case <-done:
						cancelledAt[i], done = time.Since(start), nil
					case <-end:
						return nil
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	obs.mu.Lock()
	evs := append([]lease.Event(nil), obs.events...)
	obs.mu.Unlock()
	slow := 0
	for i, k := range keys {
		li, di := -1, -1
		for j, e := range evs {
			if e.Key == k && e.Kind == lease.EventLost && li < 0 {
				li = j
			}
			if e.Key == k && e.Kind == lease.EventDone {
				di = j
			}
		}
		if li < 0 || di < 0 || li > di {
			t.Errorf("%s: EventLost at %d, EventDone at %d: want EventLost first", k, li, di)
		}
		if lostAt[i] == 0 {
			t.Fatalf("%s: not lost (the test did not set up its fault)", k)
		}
		if cancelledAt[i] == 0 {
			slow++ // its own observer sleeps before the cancellation
			continue
		}
		// Less what the process stalled in between (-race on a loaded
		// machine); the other lease's slow observer blocks for 400ms.
		stalled := st.lost(starts[i].Add(lostAt[i]), starts[i].Add(cancelledAt[i]))
		if late := cancelledAt[i] - lostAt[i]; late-stalled > 150*time.Millisecond {
			t.Errorf("%s: fn cancelled %v after its lease was marked lost (the process stalled for %v of it)", k, late, stalled)
		}
	}
	if slow > 1 {
		t.Errorf("%d of 2 calls were not cancelled while fn ran: one lease's slow observer held up the other", slow)
	}
}

// 3b. The release proves the key was not ours: it was deleted from outside
// while fn ran (no renewal fell in between). Do reports the loss.
func TestReleaseFindingKeyGoneIsLoss(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	for _, taken := range []bool{false, true} {
		key := uniqueKey(t)
		err := c.Do(context.Background(), key, spec(5*time.Second, 10*time.Second), func(ctx context.Context) error {
			rdb.Del(ctx, lockKey(key))
			if taken {
				rdb.Set(ctx, lockKey(key), "other-owner:0", 5*time.Second)
			}
			return nil
		})
		mustIs(t, err, lease.ErrLost)
		if taken {
			if v, _ := rdb.Get(context.Background(), lockKey(key)).Result(); v != "other-owner:0" {
				t.Fatalf("the other owner's lease was touched: %q", v)
			}
		}
	}
}

// 3c. A release whose reply is lost is replayed by go-redis; the replay
// finds the tombstone and answers "released": no false loss.
func TestReleaseReplayIsNotALoss(t *testing.T) {
	c, _, p, direct, _ := proxied(t, nil)
	for i := range 5 {
		err := c.Do(context.Background(), "replay", spec(5*time.Second, 10*time.Second), func(ctx context.Context) error {
			p.Set(leasetest.CutNextReply) // the release's reply
			return nil
		})
		if err != nil {
			t.Fatalf("trial %d: %v", i, err)
		}
		if n, _ := direct.Exists(context.Background(), lockKey("replay")).Result(); n != 0 {
			t.Fatalf("trial %d: the key is still there after the release", i)
		}
	}
	if p.Cut() != 5 {
		t.Fatalf("cut %d replies, want 5", p.Cut())
	}
}

// 5a. One lease past its validity (its fn ignores cancellation) does not
// poison the renewals of healthy leases after Redis recovers from a stall.
func TestExpiredLeaseDoesNotPoisonRenewals(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, rec := newClient(t, srv.Client(t))
	ttl := 300 * time.Millisecond
	stuckIn := make(chan struct{})
	stuckOut := make(chan struct{})
	stuck := make(chan error, 1)
	go func() {
		stuck <- c.Do(context.Background(), "stuck", spec(ttl, 20*time.Second), func(ctx context.Context) error {
			close(stuckIn)
			<-stuckOut // ignores its context
			return nil
		})
	}()
	<-stuckIn
	srv.Pause()
	time.Sleep(450 * time.Millisecond) // a stall longer than the TTL
	srv.Resume()

	var wg sync.WaitGroup
	var lost atomic.Int32
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Do(context.Background(), "healthy-"+string(rune('a'+i)), spec(ttl, 20*time.Second), func(ctx context.Context) error {
				select {
				case <-ctx.Done():
				case <-time.After(4 * ttl):
				}
				return nil
			})
			if err != nil {
				lost.Add(1)
				t.Logf("healthy lease %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(stuckOut)
	mustIs(t, <-stuck, lease.ErrLost)
	table(t, "one lease past validity (fn ignores ctx) + 450ms stall", "healthy leases taken after recovery are not lost", 5, int(lost.Load()))
	if n := rec.Count(lease.EventRenewed); n == 0 {
		t.Fatal("no renewal observed")
	}
}

// 5b. Short and long TTLs on one Client: the short leases' schedule never
// decides the fate of the long ones.
func TestMixedTTLsOnOneClient(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t, func(o *redis.Options) { o.PoolSize = 64 }))
	long := 6000
	if raceEnabled {
		// The race detector's pauses alone (up to a second on two shared
		// cores) exceed the 600ms between a renewal's due time and the
		// end of validity. 1,500 leases still span six renewal batches,
		// each joined by the short leases, which is what lost leases here.
		long = 1500
	}
	// A loss is the runtime's doing unless the whole process stalled for
	// a third of the TTL or more in the TTL before it (a lost lease's fn
	// returns when its context ends): such a stall alone takes half the
	// margin between a renewal's due time and the end of validity, and
	// under -race with a busy neighbour it cost most of the leases at once.
	st := watchStalls(t, 5*time.Millisecond)
	var lostMu sync.Mutex
	var lostAt []time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failedLong atomic.Int32
	started := make(chan bool, long)     // whether the lease was entered
	acquiring := make(chan struct{}, 64) // acquire a few at a time, as a real service would
	for i := range long {
		wg.Add(1)
		go func() {
			defer wg.Done()
			entered := false
			var err error
			// Getting the long leases is the set-up, not the test: an
			// acquire whose reply came too late to enter (1,500 goroutines
			// under -race on a loaded machine: stalls of 800ms were seen)
			// is tried again, on the key's own queue (an orphaned grant
			// of the first attempt is waited out).
			for attempt := 1; ; attempt++ {
				acquiring <- struct{}{}
				err = c.Do(context.Background(), "long-"+itoa(i), lease.Spec{TTL: 900 * time.Millisecond, Deadline: time.Minute, Wait: 30 * time.Second, MinValidity: 100 * time.Millisecond}, func(ctx context.Context) error {
					entered = true
					<-acquiring
					started <- true
					select {
					case <-stop:
					case <-ctx.Done():
					}
					return nil
				})
				if entered {
					break
				}
				<-acquiring
				if attempt < 3 && (errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrLowValidity)) {
					continue
				}
				failedLong.Add(1)
				started <- false
				t.Logf("long lease %d not acquired in %d attempts: %v", i, attempt, err)
				return
			}
			if err != nil {
				lostMu.Lock()
				lostAt = append(lostAt, time.Now())
				n := len(lostAt)
				lostMu.Unlock()
				if n <= 3 {
					t.Logf("long lease %d: %v", i, err)
				}
			}
		}()
	}
	for range long {
		<-started
	}
	if n := failedLong.Load(); n > 0 {
		t.Fatalf("%d of %d long leases could not be acquired", n, long)
	}
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := c.Do(context.Background(), "short-"+itoa(i), lease.Spec{TTL: 12 * time.Millisecond, Deadline: time.Second}, func(ctx context.Context) error {
					select {
					case <-ctx.Done():
					case <-time.After(40 * time.Millisecond):
					}
					return nil
				})
				if errors.Is(err, lease.ErrLost) {
					lostShort.Add(1)
				}
			}
		}()
	}
	time.Sleep(2500 * time.Millisecond) // the workload runs; nothing is asserted on time
	close(stop)
	wg.Wait()
	t.Logf("short leases lost: %d (no fault: these are timing-sensitive and not asserted)", lostShort.Load())
	const ttl = 900 * time.Millisecond
	lost, stalled := 0, 0
	for _, at := range lostAt {
		if st.lost(at.Add(-ttl), at) >= ttl/3 {
			stalled++
		} else {
			lost++
		}
	}
	if stalled > 0 {
		t.Logf("%d long leases lost after the process stalled for %v or more in the TTL before (not counted)", stalled, ttl/3)
	}
	table(t, itoa(long)+" leases at TTL 900ms + 4 at TTL 12ms on one Client", "no long lease lost", long, lost)
}

var lostShort atomic.Int32

// 6. No lock is held across network calls: a subscription whose dial is
// slow, or whose connection is reset while replies are blackholed, does not
// hold up other calls past their deadlines.
func TestSlowSubscriptionDoesNotDelayOtherCalls(t *testing.T) {
	t.Parallel()
	c, _, p, direct, _ := proxied(t, nil)
	ctx := context.Background()
	// Two busy keys held by another owner; warm the pool.
	for _, k := range []string{"a", "b"} {
		direct.Set(ctx, lockKey(k), "other-owner:0", 30*time.Second)
	}
	var warm sync.WaitGroup
	for range 8 {
		warm.Add(1)
		go func() {
			defer warm.Done()
			_ = c.Do(ctx, "warm", spec(time.Second, time.Second), func(context.Context) error { return nil })
		}()
	}
	warm.Wait()

	// Pooled connections stay prompt; a new one (the subscription) is slow.
	p.SetDelay(1500 * time.Millisecond)
	p.Set(leasetest.Pass)
	p.SetNew(leasetest.Delay)
	waiter := make(chan error, 1)
	go func() {
		waiter <- c.Do(ctx, "a", lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second, MinValidity: 100 * time.Millisecond}, func(context.Context) error { return nil })
	}()
	time.Sleep(50 * time.Millisecond) // the waiter is subscribing
	const budget = 300 * time.Millisecond
	late := 0
	st := watchStalls(t, 5*time.Millisecond)
	for range 5 {
		accepted := p.Accepted()
		start := time.Now()
		err := c.Do(ctx, "b", lease.Spec{TTL: time.Second, Deadline: budget, Wait: 200 * time.Millisecond, MinValidity: 10 * time.Millisecond}, func(context.Context) error { return nil })
		end := time.Now()
		if el := end.Sub(start); el-st.lost(start.Add(budget), end) > budget+100*time.Millisecond {
			late++
			t.Logf("call returned %v after start (budget %v): %v", el, budget, err)
		}
		// Busy, unless the acquire's reply could not come in time: on a
		// new connection (delayed 1.5s like the subscription's) or with
		// the process stalled for a good part of the budget (-race on a
		// loaded machine). That is ErrUnknown, as documented.
		if lost := st.lost(start, end); errors.Is(err, lease.ErrUnknown) && (p.Accepted() > accepted || lost >= budget/3) {
			t.Logf("not busy: %v (connections dialled %d, process stalled %v)", err, p.Accepted()-accepted, lost)
			continue
		}
		mustIs(t, err, lease.ErrBusy)
	}
	table(t, "subscription dial delayed 1.5s", "other waiting calls return by deadline + 100ms", 5, late)
	direct.Del(ctx, lockKey("a"))
	<-waiter

	// Reset every connection while replies are blackholed.
	p.Set(leasetest.Blackhole)
	p.SetNew(leasetest.Blackhole)
	p.CloseConns()
	late = 0
	for range 3 {
		start := time.Now()
		err := c.Do(ctx, "b", lease.Spec{TTL: time.Second, Deadline: budget, Wait: 200 * time.Millisecond, MinValidity: 10 * time.Millisecond}, func(context.Context) error { return nil })
		end := time.Now()
		if el := end.Sub(start); el-st.lost(start.Add(budget), end) > budget+100*time.Millisecond {
			late++
			t.Logf("call returned %v after start (budget %v): %v", el, budget, err)
		}
		if err == nil {
			t.Fatal("entered with replies blackholed")
		}
	}
	table(t, "connections reset, replies blackholed", "calls return by deadline + 100ms", 3, late)
}

// 7a. The end of a hold-min wakes waiters: a waiter that saw a long PTTL
// takes the key soon after the hold ends, not at the end of its wait.
func TestWaiterSeesHoldMinEnd(t *testing.T) {
	c, _ := sharedClient(t, lease.WithRecheck(10*time.Second)) // notifications only
	other, _ := sharedClient(t)
	key := uniqueKey(t)
	entered := make(chan struct{})
	go func() {
		_ = other.Do(context.Background(), key, lease.Spec{TTL: 10 * time.Second, Deadline: 10 * time.Second, HoldMin: 300 * time.Millisecond}, func(context.Context) error {
			close(entered)
			time.Sleep(100 * time.Millisecond)
			return nil // the hold keeps the key until 300ms after the grant
		})
	}()
	<-entered
	start := time.Now()
	err := c.Do(context.Background(), key, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second}, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("took the key %v after the wait began; the hold ended after ~300ms", el)
	}
}

// 7b. A lease deleted without notification is found by a re-check, not at
// the end of the holder's PTTL or of the wait.
func TestWaiterRechecksWithoutNotification(t *testing.T) {
	c, _ := sharedClient(t, lease.WithRecheck(200*time.Millisecond))
	rdb := shared.Client(t)
	key := uniqueKey(t)
	rdb.Set(context.Background(), lockKey(key), "stale-owner:0", 10*time.Second)
	st := watchStalls(t, 5*time.Millisecond)
	time.AfterFunc(100*time.Millisecond, func() { rdb.Del(context.Background(), lockKey(key)) })
	start := time.Now()
	err := c.Do(context.Background(), key, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 2 * time.Second}, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Less what the process stalled meanwhile (the race detector's pauses
	// on a loaded machine): a stall delays the deletion and the re-check
	// alike, while a waiter that slept on the PTTL takes 10s.
	end := time.Now()
	if el, lost := end.Sub(start), st.lost(start, end); el-lost > 100*time.Millisecond+200*time.Millisecond+150*time.Millisecond {
		t.Fatalf("took the key %v after the wait began (the process stalled for %v of it); re-checks are every 200ms", el, lost)
	}
}

// 7c. A waiter always makes a last attempt when its wait ends.
func TestWaiterMakesALastAttempt(t *testing.T) {
	c, _ := sharedClient(t, lease.WithRecheck(10*time.Second))
	rdb := shared.Client(t)
	key := uniqueKey(t)
	rdb.Set(context.Background(), lockKey(key), "stale-owner:0", 10*time.Second)
	time.AfterFunc(200*time.Millisecond, func() { rdb.Del(context.Background(), lockKey(key)) })
	err := c.Do(context.Background(), key, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 400 * time.Millisecond}, func(context.Context) error { return nil })
	if err != nil {
		t.Fatalf("the key was free before the wait ended: %v", err)
	}
}

// 8. An Observer may call Close, even on EventLost delivered by the
// renewal goroutine: no deadlock, and later calls get ErrClosed.
func TestObserverMayCloseTheClient(t *testing.T) {
	rdb := shared.Client(t)
	var c *lease.Client
	var closes atomic.Int32
	c, err := lease.New(rdb, lease.WithObserver(lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventLost || e.Kind == lease.EventRenewed {
			closes.Add(1)
			c.Close()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := uniqueKey(t)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), key, spec(300*time.Millisecond, 10*time.Second), func(ctx context.Context) error {
			rdb.Del(ctx, lockKey(key))
			rdb.Set(ctx, lockKey(key), "other-owner:0", 5*time.Second)
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case err := <-done:
		mustIs(t, err, lease.ErrLost)
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not return: Close from an Observer deadlocked")
	}
	if closes.Load() == 0 {
		t.Fatal("the observer was not called")
	}
	err = c.Do(context.Background(), uniqueKey(t), spec(time.Second, time.Second), func(context.Context) error { return nil })
	mustIs(t, err, lease.ErrClosed)
}

// 9. Close wakes waiters, which return ErrClosed at once.
func TestCloseWakesWaiters(t *testing.T) {
	c, _ := sharedClient(t)
	other, _ := sharedClient(t)
	key := uniqueKey(t)
	release := make(chan struct{})
	held := hold(t, other, key, spec(10*time.Second, 20*time.Second), release)
	defer func() { close(release); <-held }()
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), key, lease.Spec{TTL: time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second}, func(context.Context) error { return nil })
	}()
	time.Sleep(100 * time.Millisecond) // the waiter is asleep
	st := watchStalls(t, 5*time.Millisecond)
	start := time.Now()
	c.Close()
	select {
	case err := <-done:
		end := time.Now()
		mustIs(t, err, lease.ErrClosed)
		if el, lost := end.Sub(start), st.lost(start, end); el-lost > 100*time.Millisecond {
			t.Fatalf("waiter returned %v after Close (the process stalled for %v of it)", el, lost)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not woken by Close")
	}
}

// 10. Specs that can never be entered are refused up front.
func TestUnenterableSpecsRefused(t *testing.T) {
	c, _ := sharedClient(t)
	for _, s := range []lease.Spec{
		{TTL: 3 * time.Millisecond, Deadline: time.Second},
		{TTL: 4 * time.Millisecond, Deadline: time.Second},
		{TTL: 100 * time.Millisecond, Deadline: time.Second, MinValidity: 98 * time.Millisecond},
	} {
		if s.Check() == nil {
			t.Errorf("Check(%+v) = nil", s)
		}
		err := c.Do(context.Background(), uniqueKey(t), s, func(context.Context) error { t.Error("entered"); return nil })
		if err == nil || !strings.Contains(err.Error(), "cannot be entered") {
			t.Errorf("Do(%+v) = %v, want the enterability error", s, err)
		}
	}
	// A short TTL that passes can be entered (when the reply is fast enough:
	// on a loaded machine some attempts are rightly unknown or too late).
	s := lease.Spec{TTL: 10 * time.Millisecond, Deadline: time.Second}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	entered := 0
	for range 20 {
		if c.Do(context.Background(), uniqueKey(t), s, func(context.Context) error { return nil }) == nil {
			entered++
		}
	}
	if entered == 0 {
		t.Fatal("TTL 10ms passed Check but was never entered in 20 calls")
	}
}
