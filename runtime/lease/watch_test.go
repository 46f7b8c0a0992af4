package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// watching runs Watch on its own prefix and hands its changes over one by
// one.
type watching struct {
	t       *testing.T
	changes chan lease.Change
}

func startWatch(t *testing.T, c *lease.Client, pattern string, every time.Duration) *watching {
	t.Helper()
	w := &watching{t: t, changes: make(chan lease.Change, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, pattern, every, func(ch lease.Change) { w.changes <- ch }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return w
}

// next returns the next change, failing after 5s.
func (w *watching) next(kind lease.ChangeKind, key string) lease.Change {
	w.t.Helper()
	select {
	case ch := <-w.changes:
		if ch.Kind != kind || ch.Info.Key != key {
			w.t.Fatalf("change %v %q (how %q), want %v %q", ch.Kind, ch.Info.Key, ch.How, kind, key)
		}
		return ch
	case <-time.After(5 * time.Second):
		w.t.Fatalf("no change in 5s, want %v %q", kind, key)
	}
	return lease.Change{}
}

func (w *watching) ended(key, how string) {
	w.t.Helper()
	if ch := w.next(lease.ChangeEnded, key); ch.How != how {
		w.t.Fatalf("%q ended %q, want %q", key, ch.How, how)
	}
}

// Watch reports the leases held at its start, then grants, hold-min
// releases, and each way a lease ends, named.
func TestWatch(t *testing.T) {
	prefix := fmt.Sprintf("watch-%s:", uniqueKey(t))
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	other, _ := sharedClient(t, lease.WithPrefix(prefix))
	ctx := context.Background()
	long := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true}

	before := holdUntil(t, c, "w:before", long)
	holdUntil(t, c, "x:unwatched", long)
	w := startWatch(t, c, "w:*", 100*time.Millisecond)
	if ch := w.next(lease.ChangeHeld, "w:before"); ch.Info.Token != before.token {
		t.Fatalf("held: %+v", ch.Info)
	}

	// A grant, and the holder's own release (no waiter: nothing published,
	// found by the listing).
	a := holdUntil(t, c, "w:a", long)
	if ch := w.next(lease.ChangeGranted, "w:a"); ch.Info.Token != a.token {
		t.Fatalf("granted: %+v", ch.Info)
	}
	close(a.release)
	<-a.done
	w.ended("w:a", "released")

	// A handover to a waiter. Watch tells it by the releasing identity's
	// tombstone, or by the release's message naming the holder it finds
	// (TestWatchTellsHandoverWithoutItsMessage). The waiter holds the key
	// until Watch has seen its grant, which a look delayed by a loaded
	// machine would otherwise miss.
	b := holdUntil(t, c, "w:b", long)
	w.next(lease.ChangeGranted, "w:b")
	waiter := startHolding(t, other, "w:b", lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second})
	for deadline := time.Now().Add(5 * time.Second); len(inspect(t, c, "w:b").Waiters) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	close(b.release)
	<-b.done
	w.ended("w:b", "handed over")
	w.next(lease.ChangeGranted, "w:b")
	close(waiter.release)
	if err := <-waiter.done; err != nil {
		t.Fatal(err)
	}
	w.ended("w:b", "released")

	// A forced release.
	info := inspect(t, c, "w:before")
	if res, err := c.ForceRelease(ctx, "w:before", info.Holder); err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v", res, err)
	}
	w.ended("w:before", "force-released")

	// A hold-min: it starts, and runs out.
	if err := c.Do(ctx, "w:hold", lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, HoldMin: 1500 * time.Millisecond},
		func(context.Context) error { time.Sleep(800 * time.Millisecond); return nil }); err != nil {
		t.Fatal(err)
	}
	w.next(lease.ChangeGranted, "w:hold")
	w.next(lease.ChangeHoldStarted, "w:hold")
	w.ended("w:hold", "hold ran out")

	// A lease whose TTL runs out (a holder gone without releasing).
	c.Redis().Set(ctx, prefix+"{w:gone}:l", fmt.Sprintf("%032x:0", 7), time.Second)
	w.next(lease.ChangeGranted, "w:gone")
	w.ended("w:gone", "expired")

	select {
	case ch := <-w.changes:
		t.Fatalf("unexpected change %v %q %q", ch.Kind, ch.Info.Key, ch.How)
	case <-time.After(700 * time.Millisecond):
	}
}

// Watch tells a handover from the holder's own release by the releasing
// identity's tombstone, not only by the release's message: the message may
// reach Watch after its next look (its listing, or the Inspect of an
// earlier message such as a waiter's "w", found the new holder first: seen
// in CI under load, reported "released"), or never (here: the releasing
// user may not publish, so the waiter enters at its re-check).
func TestWatchTellsHandoverWithoutItsMessage(t *testing.T) {
	srv := leasetest.StartRedis(t)
	mute, _ := newClient(t, aclClient(t, srv, "mute", without(leastPrivilege, "&lease:*")...))
	waiter, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	watcher, _ := newClient(t, srv.Client(t))
	long := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}

	h := holdUntil(t, mute, "w:k", long)
	w := startWatch(t, watcher, "w:*", 100*time.Millisecond)
	w.next(lease.ChangeHeld, "w:k")
	// The waiter holds the key until Watch saw it do so.
	wh := startHolding(t, waiter, "w:k", lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second})
	for deadline := time.Now().Add(5 * time.Second); len(inspect(t, watcher, "w:k").Waiters) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	close(h.release)
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	w.ended("w:k", "handed over")
	w.next(lease.ChangeGranted, "w:k")
	close(wh.release)
	if err := <-wh.done; err != nil {
		t.Fatal(err)
	}
	w.ended("w:k", "released")
}
