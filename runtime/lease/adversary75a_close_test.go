package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Close while a Client waits on held keys and keeps leases (Spec.Keep):
// "Before it returns, it sends the releases of the queue places of the
// waiters it ended ... and kept leases" (README, Close). Right after Close
// the kept leases' keys and the closed Client's queue places are gone
// (not left to expire); once the holder releases, nothing is handed to the
// closed Client and the keyspace drains within a tombstone's life.
func TestAdversary75a_CloseDuringWaitsAndKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	holder, _ := newClient(t, srv.Client(t), lease.WithCounterTTL(time.Second))
	w, wrec := newClient(t, srv.Client(t), lease.WithCounterTTL(time.Second))

	var rels []chan struct{}
	var hdones []<-chan error
	for i := range 3 {
		rel := make(chan struct{})
		rels = append(rels, rel)
		hdones = append(hdones, hold(t, holder, fmt.Sprintf("a75-cw-%d", i), lease.Spec{TTL: 5 * time.Second, Deadline: 8 * time.Second, Fence: i == 0}, rel))
	}
	// Kept leases, fenced and not.
	for i := range 3 {
		k := fmt.Sprintf("a75-ck-%d", i)
		if err := w.Do(ctx, k, lease.Spec{TTL: 2 * time.Second, Deadline: 2 * time.Second, Keep: 5 * time.Second, Fence: i%2 == 0}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Six waiters on the held keys.
	done := make(chan error, 6)
	for i := range 6 {
		go func() {
			done <- w.Do(ctx, fmt.Sprintf("a75-cw-%d", i%3), lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 5 * time.Second, Fence: i%2 == 0}, func(context.Context) error { return nil })
		}()
	}
	a75WaitEvent(t, wrec, lease.EventWaiting, 6, 5*time.Second)
	before, _ := a75Scan(ctx, admin)
	t.Logf("before Close:%v", before)
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ks, err := a75Scan(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	a75NoPersistent(t, "right after Close", ks)
	for k := range ks {
		switch a75Kind(k) {
		case "queue", "qexp":
			t.Errorf("right after Close: the closed Client's queue places left: %q (ZCARD %d)", k, admin.ZCard(ctx, k).Val())
		case "lock":
			for i := range 3 {
				if k == fmt.Sprintf("lease:{a75-ck-%d}:l", i) {
					t.Errorf("right after Close: kept lease %q still held (PTTL %v)", k, ks[k])
				}
			}
		}
	}
	for range 6 {
		if err := <-done; !errors.Is(err, lease.ErrClosed) {
			t.Errorf("a waiter ended by Close: %v, want ErrClosed", err)
		}
	}
	for i, rel := range rels {
		close(rel)
		if err := <-hdones[i]; err != nil {
			t.Errorf("holder %d: %v", i, err)
		}
	}
	ks, _ = a75Scan(ctx, admin)
	for i := range 3 {
		if _, ok := ks[fmt.Sprintf("lease:{a75-cw-%d}:l", i)]; ok {
			t.Errorf("the holder's release handed a key to the closed Client:%v", ks)
		}
	}
	// Tombstones 1s, counters 1s.
	a75Drain(t, "after Close and the holders' releases", 1200*time.Millisecond, admin)
}
