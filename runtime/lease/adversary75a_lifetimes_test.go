package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// a75WaitEvent waits until rec has recorded n events of kind k.
func a75WaitEvent(t *testing.T, rec *leasetest.Recorder, k lease.EventKind, n int, within time.Duration) {
	t.Helper()
	end := time.Now().Add(within)
	for rec.Count(k) < n {
		if time.Now().After(end) {
			t.Fatalf("no %d %v events within %v (have %d)", n, k, within, rec.Count(k))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// a75Only returns the single key of kind in ks (fails when not exactly one).
func a75Only(t *testing.T, ks a75Keys, kind string) (string, time.Duration) {
	t.Helper()
	var name string
	var p time.Duration
	n := 0
	for k, v := range ks {
		if a75Kind(k) == kind {
			name, p = k, v
			n++
		}
	}
	if n != 1 {
		t.Fatalf("want exactly one %s key, have %d:%v", kind, n, ks)
	}
	return name, p
}

func a75In(t *testing.T, what string, got, lo, hi time.Duration) {
	t.Helper()
	if got <= lo || got > hi {
		t.Errorf("%s: PTTL %v, want in (%v, %v]", what, got, lo, hi)
	} else {
		t.Logf("%s: PTTL %v (bound %v)", what, got, hi)
	}
}

// The documented lifetimes, as set: a release's tombstone lives
// max(1s, 4 × release timeout) (release.go tombTTL; README "A short
// tombstone"), a fence counter WithCounterTTL (default 24h), a queue place
// "two re-check intervals past its last look" (and not past the wait),
// a hold-min's lock the rest of the hold, a forced release's tombstone the
// holder's remaining TTL plus the tombstone's life, an ended hold's
// tombstone the tombstone's life.
func TestAdversary75a_DocumentedLifetimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nop := func(context.Context) error { return nil }

	t.Run("tombstone", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			rt   time.Duration
			want time.Duration
		}{{0, time.Second}, {100 * time.Millisecond, time.Second}, {2 * time.Second, 8 * time.Second}} {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			var opts []lease.Option
			if tc.rt > 0 {
				opts = append(opts, lease.WithReleaseTimeout(tc.rt))
			}
			c, _ := newClient(t, srv.Client(t), opts...)
			for _, fence := range []bool{false, true} {
				admin.FlushAll(ctx)
				if err := c.Do(ctx, "a75-tomb", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Fence: fence}, nop); err != nil {
					t.Fatal(err)
				}
				ks, err := a75Scan(ctx, admin)
				if err != nil {
					t.Fatal(err)
				}
				a75NoPersistent(t, "after a release", ks)
				_, p := a75Only(t, ks, "tomb")
				a75In(t, "tombstone, release timeout "+tc.rt.String(), p, tc.want-500*time.Millisecond, tc.want)
				if _, ok := ks["lease:{a75-tomb}:l"]; ok {
					t.Errorf("lock key left after the release:%v", ks)
				}
			}
		}
	})

	t.Run("counter", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			ttl  time.Duration
			want time.Duration
		}{{0, 24 * time.Hour}, {90 * time.Second, 90 * time.Second}, {1500 * time.Millisecond, 1500 * time.Millisecond}} {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			var opts []lease.Option
			if tc.ttl > 0 {
				opts = append(opts, lease.WithCounterTTL(tc.ttl))
			}
			c, _ := newClient(t, srv.Client(t), opts...)
			var inside time.Duration
			if err := c.Do(ctx, "a75-ctr", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(context.Context) error {
				inside = admin.PTTL(ctx, "lease:{a75-ctr}:f").Val()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			a75In(t, "counter during the call, WithCounterTTL "+tc.ttl.String(), inside, tc.want-time.Second, tc.want)
			ks, _ := a75Scan(ctx, admin)
			a75NoPersistent(t, "after a fenced call", ks)
			if tc.ttl == 1500*time.Millisecond {
				// Outlives the last grant by 1.5s, then gone with the
				// tombstone.
				a75Drain(t, "WithCounterTTL(1.5s)", 2*time.Second, admin)
			}
		}
	})

	t.Run("queue", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.StartRedis(t)
		admin := srv.Client(t)
		const recheck = 300 * time.Millisecond
		holder, _ := newClient(t, srv.Client(t))
		w, wrec := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
		rel := make(chan struct{})
		hdone := hold(t, holder, "a75-q", lease.Spec{TTL: 10 * time.Second, Deadline: 10 * time.Second}, rel)
		done := make(chan error, 2)
		go func() {
			done <- w.Do(ctx, "a75-q", lease.Spec{TTL: 5 * time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second, MinValidity: time.Millisecond}, nop)
		}()
		a75WaitEvent(t, wrec, lease.EventWaiting, 1, 3*time.Second)
		// Sampled while it waits: never more than 2 re-checks + 100ms.
		bound := 2*recheck + 100*time.Millisecond
		var most time.Duration
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			ks, err := a75Scan(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			a75NoPersistent(t, "while waiting", ks)
			a75Bounds(t, "while waiting", ks, map[string]time.Duration{"queue": bound, "qexp": bound})
			for k, p := range ks {
				if a75Kind(k) == "queue" && p > most {
					most = p
				}
			}
		}
		t.Logf("queue PTTL at most %v (bound %v)", most, bound)
		// A short wait: its place does not outlive the wait by more than 50ms.
		go func() {
			done <- w.Do(ctx, "a75-q", lease.Spec{TTL: 5 * time.Second, Deadline: 3 * time.Second, Wait: 150 * time.Millisecond, MinValidity: time.Millisecond}, nop)
		}()
		a75WaitEvent(t, wrec, lease.EventWaiting, 2, 3*time.Second)
		x, _ := admin.HGetAll(ctx, "lease:{a75-q}:x").Result()
		now, _ := admin.Time(ctx).Result()
		for m, v := range x {
			var exp int64
			for _, r := range strings.SplitN(v, ":", 2)[0] {
				exp = exp*10 + int64(r-'0')
			}
			left := time.Duration(exp-now.UnixMilli()) * time.Millisecond
			if left > bound {
				t.Errorf("queue entry %q lives %v more, above %v", m, left, bound)
			}
		}
		if err := <-done; err == nil {
			t.Errorf("a call waiting on a held key returned nil")
		}
		if err := <-done; err == nil {
			t.Errorf("a call waiting on a held key returned nil")
		}
		close(rel)
		if err := <-hdone; err != nil {
			t.Fatal(err)
		}
		// Both waiters gave up: their places were taken out by their own
		// releases; what is left is tombstones.
		a75Drain(t, "after the waiters gave up and the holder released", time.Second+200*time.Millisecond, admin)
	})

	t.Run("holdmin and force", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.StartRedis(t)
		admin := srv.Client(t)
		c, _ := newClient(t, srv.Client(t))
		op, _ := newClient(t, srv.Client(t))
		if err := c.Do(ctx, "a75-h", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, HoldMin: 2 * time.Second}, nop); err != nil {
			t.Fatal(err)
		}
		ks, _ := a75Scan(ctx, admin)
		a75NoPersistent(t, "after a hold-min release", ks)
		_, p := a75Only(t, ks, "lock")
		a75In(t, "hold-min lock", p, time.Second, 2*time.Second)
		_, p = a75Only(t, ks, "tomb")
		a75In(t, "hold-min tombstone", p, 500*time.Millisecond, time.Second)
		info, err := op.Inspect(ctx, "a75-h")
		if err != nil || !info.Hold {
			t.Fatalf("inspect: %+v %v", info, err)
		}
		if r, err := op.ForceRelease(ctx, "a75-h", info.Holder); err != nil || r != lease.ForceHoldEnded {
			t.Fatalf("force: %v %v", r, err)
		}
		ks, _ = a75Scan(ctx, admin)
		a75NoPersistent(t, "after ending a hold", ks)
		a75Bounds(t, "after ending a hold", ks, map[string]time.Duration{"tomb": time.Second})

		// Forced release of a held lease: its tombstone lives the
		// holder's remaining TTL plus a tombstone's life.
		admin.FlushAll(ctx)
		rel := make(chan struct{})
		hdone := hold(t, c, "a75-f", lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second}, rel)
		info, err = op.Inspect(ctx, "a75-f")
		if err != nil {
			t.Fatal(err)
		}
		if r, err := op.ForceRelease(ctx, "a75-f", info.Holder); err != nil || r != lease.ForceReleased {
			t.Fatalf("force: %v %v", r, err)
		}
		ks, _ = a75Scan(ctx, admin)
		a75NoPersistent(t, "after a forced release", ks)
		_, p = a75Only(t, ks, "tomb")
		a75In(t, "forced tombstone", p, 3*time.Second, 4*time.Second)
		close(rel)
		<-hdone
	})
}
