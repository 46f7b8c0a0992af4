package lease_test

// Round 47 (adversary): attacks on round 45's fixes — Close waiting for the
// calls outside their function, with Observer callbacks "made on the
// goroutine of a call Close waits for" subtracted (client.go Close,
// Client.unsettled / Client.observing, do.go observe / observeAside).

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// FINDING. Close, called from an ordinary goroutine (NOT from an
// Observer), does not wait for a call that is outside its function while
// that call's own Observer callback is slow (an exporter flushing, a
// metrics push): the callback is counted in Client.observing, and Close
// subtracts it whoever called Close. Close returns at once; the service
// closes its go-redis client (no call is in its function); the call then
// goes on and what it still had to send fails on the closed client. The
// key stays held for the call's full TTL (20s) by a call that never
// entered, while the server answers throughout and everything fits well
// within the release timeout (2s; the Observer takes 300ms).
//
// Subtests:
//   - unreplicatedGrant: WithReplicas(1, 50ms) against a server without
//     replicas: the grant is acknowledged by 0 replicas, the call reports
//     EventUnreplicated (acquire.go:130, counted) and then releases
//     the unused grant (releaseUnused, acquire.go:131). Close during that Observer returns
//     at once; the release is refused by the closed go-redis client.
//   - waitingThenHandover: the call finds the key busy (held by another
//     Client), takes a queue place, reports EventWaiting (wait.go:71, counted)
//     before joining the hub. Close during that Observer returns at once
//     (the call is not yet among the hub's waiters, so Close gives up no
//     place for it); the call's own giveUp fails on the closed client; the
//     holder's release then hands the key to the dead call's queue place
//     (release.lua's short claim: a few hundred ms here, not the TTL), so
//     a key is left held after Close by a call Close ended. Weaker than
//     the first subtest, same cause; also against "the queue places of
//     the waiting calls it ends ... are given up by releases sent before
//     Close returns".
//
// Promise (client.go Close doc): "Calls outside their function are waited
// for within the same bound: one whose acquire is on its way (a grant it
// gets is released by the call, which does not enter) ... Close waits for
// nothing else and may be called from an Observer (it does not wait for
// the call whose Observer called it)." — and the round's claim: "after
// Close returns, with no call in its function, the go-redis client may be
// closed and no key is left held — within the bound." Here Close is not
// called from any Observer, yet it does not wait.
//
// Root cause: client.go Close's wait loop
// `for c.unsettled.Load() > c.observing.Load() && ...` (client.go:415):
// observing counts every counted Observer callback under way (do.go emit,
// do.go:225 and do.go:238), not the callbacks on Close's own goroutine, so a Close
// from any goroutine treats a call sitting in its Observer as if that
// Observer had called Close.
func TestAdversary47_CloseSkipsCallInItsOwnSlowObserver(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"unreplicatedGrant", "waitingThenHandover"} {
		t.Run(mode, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			xc, _ := adv23Client(t, srv.Addr())
			ctx := context.Background()
			key := "adv47-slowobs-" + mode

			want := lease.EventUnreplicated
			opts := []lease.Option{lease.WithReleaseTimeout(2 * time.Second)}
			if mode == "unreplicatedGrant" {
				opts = append(opts, lease.WithReplicas(1, 50*time.Millisecond))
			} else {
				want = lease.EventWaiting
			}
			inObs := make(chan struct{})
			releaseObs := make(chan struct{})
			obs := lease.ObserverFunc(func(e lease.Event) {
				if e.Key == key && e.Kind == want {
					close(inObs)
					<-releaseObs // a slow exporter (300ms), not Close
				}
			})
			rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			qc, err := lease.New(rdbQ, append(opts, lease.WithObserver(obs))...)
			if err != nil {
				t.Fatal(err)
			}

			// The holder (another Client) for the waiting case.
			holderIn := make(chan struct{})
			holderOut := make(chan struct{})
			holderDone := make(chan error, 1)
			if mode == "waitingThenHandover" {
				go func() {
					holderDone <- xc.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, func(context.Context) error {
						close(holderIn)
						<-holderOut
						return nil
					})
				}()
				<-holderIn
			}

			var entered bool
			done := make(chan error, 1)
			go func() {
				done <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second}, func(context.Context) error {
					entered = true
					return nil
				})
			}()
			select {
			case <-inObs:
			case <-time.After(5 * time.Second):
				t.Fatalf("the %v Observer was not called", want)
			}
			go func() { time.Sleep(300 * time.Millisecond); close(releaseObs) }()
			t0 := time.Now()
			_ = qc.Close() // from the test's goroutine: no Observer called it
			took := time.Since(t0)
			_ = rdbQ.Close() // no call of qc is in its function
			qerr := <-done

			if mode == "waitingThenHandover" {
				close(holderOut) // the holder releases: the queue is handed the key
				if err := <-holderDone; err != nil {
					t.Fatalf("holder: %v", err)
				}
			}
			time.Sleep(200 * time.Millisecond)
			pttl := admin.PTTL(ctx, lockKey(key)).Val()
			val := admin.Get(ctx, lockKey(key)).Val()
			xerr := xc.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}, func(context.Context) error { return nil })
			t.Logf("Close took %v; the call: %v (entered: %v); key's PTTL after: %v (value %q); another Client waiting 2s: %v", took, qerr, entered, pttl, val, xerr)
			if entered {
				t.Fatalf("the call entered its function: not the case under test")
			}
			if pttl > 0 || xerr != nil {
				t.Errorf("%s: Close (not from an Observer) returned after %v without waiting for a call outside its function whose %v Observer was slow (300ms, release timeout 2s); the go-redis client closed after Close, and the key stays held (PTTL %v) by a call that never entered; another Client waiting 2s gets %v", mode, took.Round(time.Millisecond), want, pttl.Round(time.Millisecond), xerr)
			}
			if errors.Is(xerr, lease.ErrBusy) || pttl > 0 {
				_ = admin.Del(ctx, lockKey(key)).Err()
			}
		})
	}
}

// FINDING. Close called from an Observer waits for the very call whose
// Observer called it, for the whole release timeout (3s here): the call
// and the Close are stuck on each other until the bound passes, and the
// call's Do is held up as long. The callback runs on the call's own
// goroutine while the call is counted in Client.unsettled, but is reported
// through Lease.observe, which always uses call.observeAside (not counted
// in Client.observing), so Close counts the call that is blocked in the
// Observer running Close.
//
// Subtests (two paths, same cause):
//   - eventLostAtRelease: fn returns; the call's release finds the key no
//     longer its own (deleted from outside while fn ran: a failover, an
//     operator's DEL) and marks the lease lost on its own goroutine
//     (run.go:108 l.lose -> reportLoss -> lease.go:326 EventLost). Close
//     from that EventLost Observer takes 3s. (The overrun check in run.go's
//     defer, "the function returned after the lease's validity ended",
//     goes the same way by code reading.)
//   - eventReleasedOfUnsuitableKept: call Y finds the lease kept by an
//     earlier call unsuitable (another TTL) and releases it on Y's own
//     goroutine (keep.go:127 takeKept -> releaseKept -> l.observe):
//     Close from that EventReleased Observer takes 3s; afterwards Y even
//     goes on to acquire (after Close returned).
//   - eventLostFromRenewal: a renewal (renewer goroutine) finds the key
//     gone, cancels fn and reports EventLost there (observeAside, which the
//     round deliberately does not subtract); fn returns, the call releases
//     and then waits for that very report (lease.go awaitReport, up to
//     lossReportWait = 1s) while the Observer runs Close, which waits for
//     the call: Close takes ~1s (release timeout 3s), the call the same.
//     Not subtracting "callbacks from other goroutines" assumes the call
//     does not wait for them; awaitReport does.
//
// Promise (client.go Close doc; README Close): "Close waits for nothing
// else and may be called from an Observer (it does not wait for the call
// whose Observer called it)"; observer.go: "It is never called with an
// internal lock held, so it may call any method of the Client, Close
// included." The round's claim: "Observer callbacks made on the goroutine
// of a call Close waits for are subtracted (Client.observing), so Close
// from such an Observer does not wait for that call".
//
// Root cause: lease.go:205 Lease.observe always goes through
// do.go:227 observeAside (counted=false), also when called on the call's
// own goroutine (run.go:108 via reportLoss; keep.go:127/149 via
// releaseKept), so client.go:415's `c.unsettled.Load() >
// c.observing.Load()` keeps waiting for the call whose Observer is
// running Close. For eventLostFromRenewal: the callback is on the
// renewer's goroutine (not subtracted by design), but the call, outside
// its function, waits for it (run.go:110 l.awaitReport (lease.go:336),
// bounded by lossReportWait, lease.go:332), so Close and the call wait on
// each other for a second.
func TestAdversary47_CloseFromOwnEventLostWaitsFullBound(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"eventLostAtRelease", "eventReleasedOfUnsuitableKept", "eventLostFromRenewal"} {
		t.Run(mode, func(t *testing.T) { adv47CloseFromAsideObserver(t, mode) })
	}
}

func adv47CloseFromAsideObserver(t *testing.T, mode string) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := "adv47-aside-close-" + mode
	const bound = 3 * time.Second
	var qc *lease.Client
	var armed atomic.Bool
	closeTook := make(chan time.Duration, 1)
	want := lease.EventLost
	limit := bound / 2
	if mode == "eventLostFromRenewal" {
		limit = 500 * time.Millisecond
	}
	if mode == "eventReleasedOfUnsuitableKept" {
		want = lease.EventReleased
	}
	obs := lease.ObserverFunc(func(e lease.Event) {
		if armed.Load() && e.Key == key && e.Kind == want && armed.CompareAndSwap(true, false) {
			if mode == "eventLostFromRenewal" {
				// The Observer does a little work first (50ms): meanwhile
				// fn, cancelled, returns and the call reaches awaitReport.
				time.Sleep(50 * time.Millisecond)
			}
			t0 := time.Now()
			_ = qc.Close() // from an Observer callback on the call's own goroutine
			closeTook <- time.Since(t0)
		}
	})
	rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdbQ.Close() })
	var err error
	qc, err = lease.New(rdbQ, lease.WithObserver(obs), lease.WithReleaseTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, qc, "adv47-warm")
	var derr error
	t0 := time.Now()
	switch mode {
	case "eventLostAtRelease":
		armed.Store(true)
		derr = qc.Do(ctx, key, spec(10*time.Second, 20*time.Second), func(context.Context) error {
			// The key is taken from under the call (an operator, a
			// failover): the release will find it gone.
			return admin.Del(ctx, lockKey(key)).Err()
		})
	case "eventLostFromRenewal":
		// The renewal (on the renewer's goroutine) finds the key gone:
		// it cancels fn and reports EventLost; fn returns at once and the
		// call, after its release, waits for that report (awaitReport,
		// up to lossReportWait = 1s) while the Observer runs Close, which
		// waits for the call.
		armed.Store(true)
		derr = qc.Do(ctx, key, spec(600*time.Millisecond, 20*time.Second), func(c context.Context) error {
			if err := admin.Del(ctx, lockKey(key)).Err(); err != nil {
				return err
			}
			<-c.Done()
			return nil
		})
	case "eventReleasedOfUnsuitableKept":
		// X keeps its lease; Y (another TTL) finds it unsuitable and
		// releases it on Y's own goroutine (keep.go takeKept ->
		// releaseKept -> Lease.observe = observeAside).
		if err := qc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Keep: 10 * time.Second}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		t0 = time.Now()
		derr = qc.Do(ctx, key, lease.Spec{TTL: 6 * time.Second, Deadline: 10 * time.Second}, func(context.Context) error { return nil })
	}
	doTook := time.Since(t0)
	var took time.Duration
	select {
	case took = <-closeTook:
	case <-time.After(2 * bound):
		t.Fatalf("%v was not observed (Do: %v): not the case under test", want, derr)
	}
	t.Logf("%s: Do returned after %v: %v; Close from the call's %v Observer took %v (release timeout %v)", mode, doTook, derr, want, took, bound)
	if took > limit {
		t.Errorf("%s: Close called from the call's own %v Observer waited %v for that very call (release timeout %v), and Do took %v: Close must not wait for the call whose Observer called it", mode, want, took.Round(time.Millisecond), bound, doTook.Round(time.Millisecond))
	}
}

// FINDING (weaker: a bound exceeded, not a key left held). Close's bound
// is not a bound when an Observer is slow on the EventReleased of a kept
// lease that Close itself releases: releaseAllKept waits (wg.Wait) for
// each of its release goroutines, and each calls the Observer before it
// is done (keep.go releaseKept: l.observe after the reply). With
// WithReleaseTimeout(300ms) and an Observer taking 2s (an exporter
// flushing), Close takes 2s although the release was answered in a
// millisecond. The kept leases of calls Close takes from Client.granting
// are released the same way but waited for only until the bound
// (client.go's sent loop), so the two paths disagree.
//
// Promise (the round's claim / client.go Close doc): "Close waits, bounded
// by the release timeout counted from Close's start, for: releases it
// sends itself (..., kept leases)"; "Kept leases (Spec.Keep) not in use
// ... are released before Close returns (each bounded by the release
// timeout)"; "The bound is a limit".
//
// Root cause: keep.go:379 (releaseAllKept's wg.Wait) waits for goroutines
// that run keep.go:376 c.releaseKept(l, until, nil), which calls the
// Observer (keep.go:416-420) before returning; nothing bounds the wait
// by until.
func TestAdversary47_CloseWaitsForSlowObserverOfKeptRelease(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	key := "adv47-kept-slowobs"
	const bound = 300 * time.Millisecond
	var armed atomic.Bool
	slowDone := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { // the slow Observer ends before the test does (goleak)
		select {
		case <-slowDone:
		case <-time.After(5 * time.Second):
		}
	})
	obs := lease.ObserverFunc(func(e lease.Event) {
		if armed.Load() && e.Key == key && (e.Kind == lease.EventReleased || e.Kind == lease.EventReleaseUnconfirmed) {
			time.Sleep(2 * time.Second) // a slow exporter
			once.Do(func() { close(slowDone) })
		}
	})
	rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdbQ.Close() })
	qc, err := lease.New(rdbQ, lease.WithObserver(obs), lease.WithReleaseTimeout(bound))
	if err != nil {
		t.Fatal(err)
	}
	if err := qc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Keep: 10 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	t0 := time.Now()
	_ = qc.Close()
	took := time.Since(t0)
	pttl := srv.Client(t).PTTL(ctx, lockKey(key)).Val()
	t.Logf("Close took %v (release timeout %v); the kept key's PTTL after Close: %v", took, bound, pttl)
	if took > 3*bound {
		t.Errorf("Close took %v with a release timeout of %v: it waited for the Observer of the kept lease's release (answered at once), not only for the release", took.Round(time.Millisecond), bound)
	}
}
