package lease_test

// Adversary round 76: Watch's PSUBSCRIBE bounded by max(every, release
// timeout) (5616d1c).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv76Proxied starts a server and a proxy to it, and returns them and a
// Client (not closed at cleanup: the tests close it) on the proxy.
func adv76Proxied(t *testing.T) (*leasetest.Server, *leasetest.Proxy, *lease.Client) {
	t.Helper()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return srv, p, c
}

// A server that answers every command, each within the bound, but slowly
// (a proxy delays each reply by 100ms; every read is bounded by
// max(every, release timeout) = 250ms here, and the subscription, a new
// connection's four round trips, by four times that). (A 150ms delay with
// the same bound failed an Inspect whose reply the proxy delayed twice,
// chunk by chunk: past the bound, as documented.) Watch's doc: "each read is
// bounded by every (at least the release timeout), and one not answered
// in time ends the watch". Every read is answered in time: the watch must
// run, and report the held lease.
func TestAdversary76_WatchSlowServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		delay, every time.Duration
	}{
		{100 * time.Millisecond, 200 * time.Millisecond},
		{400 * time.Millisecond, time.Second},
	} {
		t.Run(fmt.Sprintf("delay%v-every%v", tc.delay, tc.every), func(t *testing.T) {
			t.Parallel()
			srv, p, c := adv76Proxied(t)
			t.Cleanup(func() { c.Close() })
			holder, _ := newClient(t, srv.Client(t))
			rel := make(chan struct{})
			defer close(rel)
			hold(t, holder, "adv76-slow", lease.Spec{TTL: 10 * time.Second, Deadline: 30 * time.Second}, rel)
			// A warm pool: the server answered once, before the delay.
			if _, err := c.Inspect(context.Background(), "adv76-slow"); err != nil {
				t.Fatal(err)
			}
			p.SetDelay(tc.delay)
			// Calibration: a fresh connection's first command (dial,
			// HELLO, CLIENT SETINFO, the command) through the proxy.
			fresh := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t0 := time.Now()
			perr := fresh.Ping(context.Background()).Err()
			first := time.Since(t0)
			t0 = time.Now()
			fresh.Ping(context.Background())
			t.Logf("a fresh connection's first PING took %v (%v), the next %v: replies are each delayed %v", first.Round(time.Millisecond), perr, time.Since(t0).Round(time.Millisecond), tc.delay)
			fresh.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var ch adv75cChanges
			start := time.Now()
			err := c.Watch(ctx, "adv76-*", tc.every, ch.add)
			t.Logf("Watch returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if err != nil {
				t.Errorf("replies delayed %v (bound max(every %v, release timeout 250ms)): Watch failed: %v", tc.delay, tc.every, err)
			}
			if _, ok := ch.find("adv76-slow", lease.ChangeHeld); !ok {
				t.Errorf("the held lease was not reported")
			}
		})
	}
}

// The NOPERM fallback: a user allowed only the broad pattern
// &lease:{*}:c watches "orders:*". The precise PSUBSCRIBE is refused, the
// broad one taken; a handover of orders:1 is reported by its message
// (before the next listing, every 20s), and one of misc:1 is not reported.
func TestAdversary76_WatchNopermFallback(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rdb := srv.ACLUser(t, "watcher", "pw", "~lease:*", "&lease:{*}:c", "+@all")
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, _ := newClient(t, srv.Client(t))
	waiter, wrec := newClient(t, srv.Client(t))
	rels := map[string]chan struct{}{}
	for _, k := range []string{"orders:1", "misc:1"} {
		rels[k] = make(chan struct{})
		hold(t, holder, k, lease.Spec{TTL: 10 * time.Second, Deadline: 30 * time.Second}, rels[k])
	}
	var ch adv75cChanges
	wdone := make(chan error, 1)
	go func() { wdone <- c.Watch(ctx, "orders:*", 20*time.Second, ch.add) }()
	for end := time.Now().Add(3 * time.Second); ; {
		if _, ok := ch.find("orders:1", lease.ChangeHeld); ok {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no ChangeHeld for orders:1 within 3s")
		}
		select {
		case err := <-wdone:
			t.Fatalf("Watch ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(200 * time.Millisecond) // the subscription is confirmed before the listing
	n := 0
	for _, k := range []string{"orders:1", "misc:1"} {
		done := make(chan error, 1)
		go func() {
			done <- waiter.Do(context.Background(), k, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(context.Context) error {
				time.Sleep(300 * time.Millisecond)
				return nil
			})
		}()
		n++
		a75WaitEvent(t, wrec, lease.EventWaiting, n, 3*time.Second)
		close(rels[k])
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if c, ok := ch.find("orders:1", lease.ChangeEnded); !ok || c.How != "handed over" {
		t.Errorf("the handover of orders:1 was not reported at once through the broad subscription: %+v %v", c, ok)
	}
	if _, ok := ch.find("orders:1", lease.ChangeGranted); !ok {
		t.Errorf("the grant to orders:1's waiter was not reported")
	}
	if ks := ch.keys(); ks["misc:1"] {
		t.Errorf("a key outside the pattern was reported: %v", ks)
	}
	cancel()
	if err := <-wdone; err != nil {
		t.Errorf("Watch: %v", err)
	}
}

// A healthy server under load (ten Clients taking and releasing keys in a
// loop) and a Watch with every = 5ms: its reads (each bounded by the
// 250ms release timeout) and its subscription must not fail spuriously.
func TestAdversary76_WatchShortEveryUnderLoad(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 10 {
		wc, _ := newClient(t, srv.Client(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = wc.Do(ctx, fmt.Sprintf("adv76-load:%d", i%4), lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Wait: time.Second}, func(context.Context) error {
					time.Sleep(time.Millisecond)
					return nil
				})
			}
		}()
	}
	var ch adv75cChanges
	for range 3 {
		wctx, wcancel := context.WithTimeout(ctx, 800*time.Millisecond)
		err := c.Watch(wctx, "adv76-load:*", 5*time.Millisecond, ch.add)
		wcancel()
		if err != nil {
			t.Errorf("Watch (every 5ms) on a loaded healthy server: %v", err)
		}
	}
	cancel()
	wg.Wait()
	if len(ch.keys()) == 0 {
		t.Errorf("Watch saw nothing under load")
	}
}

// Cancel and Close while the subscription waits for a slow reply (the
// proxy delays replies 1s; every 1s bounds each read at 1s, and the
// subscription's four round trips at 4s): Watch ends with nil (cancel) or
// ErrClosed (Close), within the bound (Watch's doc: "When the Client is
// closed, Watch returns an error wrapping ErrClosed, also while a read
// waits ...: each read is bounded by every"; the subscription "is bounded
// by four times that").
func TestAdversary76_WatchStopDuringSlowSubscribe(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			_, p, c := adv76Proxied(t)
			if _, err := c.Inspect(context.Background(), "x"); err != nil {
				t.Fatal(err)
			}
			p.SetDelay(time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Watch(ctx, "*", time.Second, func(lease.Change) {}) }()
			time.Sleep(400 * time.Millisecond)
			at := time.Now()
			if how == "cancel" {
				cancel()
			} else {
				c.Close()
			}
			select {
			case err := <-done:
				t.Logf("%s: Watch returned %v after", how, time.Since(at).Round(time.Millisecond))
				if how == "cancel" && err != nil || how == "close" && !errors.Is(err, lease.ErrClosed) {
					t.Errorf("%s during the subscription: Watch returned %v", how, err)
				}
				if time.Since(at) > 4*time.Second+time.Second {
					t.Errorf("%s: Watch took %v to return", how, time.Since(at))
				}
			case <-time.After(8 * time.Second):
				t.Errorf("%s during the subscription: Watch did not return within 8s (its bound is 4s)", how)
			}
			c.Close()
		})
	}
}
