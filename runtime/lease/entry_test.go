package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A call paused between reading its grant and entering fn (here by an
// Observer that sleeps on EventAcquired; a GC pause or a stopped process
// does the same) until less than MinValidity is left is not entered: Do
// returns ErrLowValidity, and the key is released at once, without the
// call's hold-min (no work ran to space out), for the next caller.
//
// The pause makes the lease's first renewal due at once when run arms its
// watcher, just before the entry check: a renewal confirmed in between
// (this goroutine descheduled for a round trip, as on a loaded machine)
// leaves MinValidity again, and fn is then rightly entered (the check is
// on the validity left at entry). The renewed hook holds each renewal's
// answer until Do returns, as a renewer goroutine that runs late, so the
// check sees the paused grant's own validity.
func TestNotEnteredWhenValidityRanLowBeforeEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec lease.Spec
	}{
		{"unfenced", lease.Spec{TTL: 400 * time.Millisecond, Deadline: 5 * time.Second, MinValidity: 250 * time.Millisecond}},
		{"fenced, hold-min", lease.Spec{TTL: 400 * time.Millisecond, Deadline: 5 * time.Second, MinValidity: 250 * time.Millisecond, Fence: true, HoldMin: 4 * time.Second}},
		{"kept", lease.Spec{TTL: 400 * time.Millisecond, Deadline: 5 * time.Second, MinValidity: 250 * time.Millisecond, Keep: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &adv16SlowObserver{pause: 250 * time.Millisecond}
			rec := &leasetest.Recorder{}
			c, err := lease.New(shared.Client(t), lease.WithObserver(lease.Observers{obs, rec}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			direct := shared.Client(t)
			key := uniqueKey(t)
			returned := make(chan struct{})
			restore := lease.SetRenewedHook(func() {
				select {
				case <-returned:
				case <-time.After(10 * time.Second):
				}
			})
			obs.armed.Store(true)
			entered := false
			err = c.Do(context.Background(), key, tc.spec, func(context.Context) error {
				entered = true
				return nil
			})
			close(returned)
			restore()
			if entered || !errors.Is(err, lease.ErrLowValidity) {
				t.Fatalf("Do = %v, entered %v; want ErrLowValidity and fn not entered", err, entered)
			}
			if errors.Is(err, lease.ErrLost) {
				t.Errorf("Do = %v: a call that was not entered reports no loss", err)
			}
			if n := rec.Count(lease.EventLowValidity); n != 1 {
				t.Errorf("%d EventLowValidity, want 1", n)
			}
			if v, err := direct.Get(context.Background(), lockKey(key)).Result(); err != redis.Nil {
				t.Errorf("the key holds %q (%v) after Do returned; want it released", v, err)
			}
			// The next call gets the key at once (less what the process
			// stalled meanwhile: a held key would take its 4s hold-min or a
			// re-check).
			st := watchStalls(t, 5*time.Millisecond)
			start := time.Now()
			if err := c.Do(context.Background(), key, lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("next Do: %v", err)
			}
			end := time.Now()
			if d, lost := end.Sub(start), st.lost(start, end); d-lost > 200*time.Millisecond {
				t.Errorf("next Do took %v (the process stalled for %v of it): the key was not free", d, lost)
			}
		})
	}
}
