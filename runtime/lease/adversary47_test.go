package lease_test

// Round 47 (adversary): attacks on round 45's fixes — Close waiting for the
// calls outside their function, with Observer callbacks "made on the
// goroutine of a call Close waits for" subtracted (client.go Close,
// Client.unsettled / Client.observing, do.go observe / observeAside).

import (
	"context"
	"errors"
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
//     EventUnreplicated (acquire.go: a.observe, counted) and then releases
//     the unused grant (releaseUnused). Close during that Observer returns
//     at once; the release is refused by the closed go-redis client.
//   - waitingThenHandover: the call finds the key busy (held by another
//     Client), takes a queue place, reports EventWaiting (wait.go: counted)
//     before joining the hub. Close during that Observer returns at once
//     (the call is not yet among the hub's waiters, so Close gives up no
//     place for it); the call's own giveUp fails on the closed client; the
//     holder's release then hands the key to the dead call's queue place,
//     for its full TTL.
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
// `for c.unsettled.Load() > c.observing.Load() && ...` (client.go:376):
// observing counts every counted Observer callback under way (do.go emit,
// do.go:258-261), not the callbacks on Close's own goroutine, so a Close
// from any goroutine treats a call sitting in its Observer as if that
// Observer had called Close.
func TestAdversary47_CloseSkipsCallInItsOwnSlowObserver(t *testing.T) {
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
// Observer called it, for the whole release timeout (here 3s; the call
// and the Close are stuck on each other until the bound passes): the call
// finds at its release that the key is no longer its own (deleted from
// outside while fn ran: a failover, an operator's DEL, leasectl release),
// marks the lease lost ON ITS OWN GOROUTINE (run.go's deferred release,
// l.lose) and reports EventLost through Lease.observe → call.observeAside,
// which is not counted in Client.observing although the callback runs on
// the goroutine of a call Close waits for (the call is in
// Client.unsettled: run.go's defer re-counted it). Close from that
// Observer then spins until the bound, and the call's Do is held up as
// long. The same holds for a loss found by run.go's overrun check (fn
// returned after the validity ended), also on the call's own goroutine.
//
// Promise (client.go Close doc, observer.go): "Close waits for nothing
// else and may be called from an Observer (it does not wait for the call
// whose Observer called it)"; "It is never called with an internal lock
// held, so it may call any method of the Client, Close included." The
// round's claim: "Observer callbacks made on the goroutine of a call Close
// waits for are subtracted (Client.observing), so Close from such an
// Observer does not wait for that call".
//
// Root cause: lease.go:205 Lease.observe always uses observeAside
// (do.go:227, counted=false), and reportLoss (lease.go:~316) is called on
// the call's own goroutine by run.go's defer (l.lose after the release,
// run.go:~108; the overrun check run.go:~56), so client.go Close's loop
// `c.unsettled.Load() > c.observing.Load()` counts the call that is
// blocked in the Observer that runs Close.
func TestAdversary47_CloseFromOwnEventLostWaitsFullBound(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := "adv47-lost-close"
	const bound = 3 * time.Second
	var qc *lease.Client
	closeTook := make(chan time.Duration, 1)
	obs := lease.ObserverFunc(func(e lease.Event) {
		if e.Key == key && e.Kind == lease.EventLost {
			t0 := time.Now()
			_ = qc.Close() // from the call's own EventLost Observer
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
	t0 := time.Now()
	derr := qc.Do(ctx, key, spec(10*time.Second, 20*time.Second), func(context.Context) error {
		// The key is taken from under the call (an operator, a failover):
		// the release will find it gone.
		return admin.Del(ctx, lockKey(key)).Err()
	})
	doTook := time.Since(t0)
	var took time.Duration
	select {
	case took = <-closeTook:
	default:
		t.Fatalf("EventLost was not observed (Do: %v): not the case under test", derr)
	}
	t.Logf("Do returned after %v: %v; Close from its EventLost Observer took %v (release timeout %v)", doTook, derr, took, bound)
	if !errors.Is(derr, lease.ErrLost) {
		t.Fatalf("Do: %v, want ErrLost", derr)
	}
	if took > bound/2 {
		t.Errorf("Close called from the call's own EventLost Observer waited %v for that very call (release timeout %v), and Do took %v: Close must not wait for the call whose Observer called it", took.Round(time.Millisecond), bound, doTook.Round(time.Millisecond))
	}
}
