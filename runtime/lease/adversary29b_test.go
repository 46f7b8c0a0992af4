package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// adv29bWatch runs Watch and records its changes.
type adv29bWatch struct {
	mu      sync.Mutex
	changes []lease.Change
}

func adv29bStartWatch(t *testing.T, c *lease.Client, pattern string, every time.Duration) *adv29bWatch {
	t.Helper()
	w := &adv29bWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, pattern, every, func(ch lease.Change) {
			w.mu.Lock()
			w.changes = append(w.changes, ch)
			w.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return w
}

func (w *adv29bWatch) find(kind lease.ChangeKind) []lease.Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []lease.Change
	for _, ch := range w.changes {
		if ch.Kind == kind {
			out = append(out, ch)
		}
	}
	return out
}

// A leader's lease that vanishes from the server before its TTL ran out,
// without any release by its holder (deleted by hand; what a restart
// without persistence or a failover that lost it looks like), must not be
// reported by Watch as "released" (by its holder): the doc names that
// "expired", or "" when it ended unseen between looks more than a second
// apart. With a listing interval over a second, Watch inferred "released"
// from the TTL last seen.
func TestAdversary29b_WatchVanishedLeaseNotReleased(t *testing.T) {
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	watcher, _ := sharedClient(t, lease.WithPrefix(prefix))
	key := "leader"
	w := adv29bStartWatch(t, watcher, key, 1200*time.Millisecond)
	term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "A"})
	defer term.stop(t)
	term.waitEntered(t)
	if !waitFor(5*time.Second, func() bool { return len(w.find(lease.ChangeGranted))+len(w.find(lease.ChangeHeld)) > 0 }) {
		t.Fatal("the watch saw no grant within 5s")
	}
	time.Sleep(100 * time.Millisecond)
	if err := c.Redis().Del(context.Background(), prefix+"{"+key+"}:l").Err(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return len(w.find(lease.ChangeEnded)) > 0 }) {
		t.Fatal("the watch saw no end within 5s")
	}
	how := w.find(lease.ChangeEnded)[0].How
	t.Logf("How %q", how)
	if how == "released" || how == "handed over" || how == "force-released" {
		t.Errorf("a lease deleted under its holder: Watch says How %q, which claims a release nobody made", how)
	}
}

// Watch stamps what it read with the time it got round to it, not the
// time it read it: a callback (or a long listing) in between makes a
// release's tombstone look younger than it is. A lease released by its
// holder right after the listing read it, while Watch's callback for
// another lease was busy, is later found gone with no tombstone and less
// than a second after the (late) stamp: Watch says "expired" for a
// release by its holder.
func TestAdversary29b_WatchSlowCallbackStampsLate(t *testing.T) {
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	watcher, _ := sharedClient(t, lease.WithPrefix(prefix))
	long := lease.Spec{TTL: 30 * time.Second, Deadline: time.Minute}
	hs := map[string]*holding{"a": holdUntil(t, c, "a", long), "b": holdUntil(t, c, "b", long)}
	var mu sync.Mutex
	var changes []lease.Change
	first := ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watcher.Watch(ctx, "*", 700*time.Millisecond, func(ch lease.Change) {
			mu.Lock()
			changes = append(changes, ch)
			slow := first == "" && ch.Kind == lease.ChangeHeld
			if slow {
				first = ch.Info.Key
			}
			mu.Unlock()
			if slow {
				// The other lease is released by its holder now, while
				// this callback runs (a slow consumer, or a long listing).
				other := "a"
				if ch.Info.Key == "a" {
					other = "b"
				}
				close(hs[other].release)
				if err := <-hs[other].done; err != nil {
					t.Errorf("release of %q: %v", other, err)
				}
				time.Sleep(900 * time.Millisecond)
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	var ended []lease.Change
	if !waitFor(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		ended = ended[:0]
		for _, ch := range changes {
			if ch.Kind == lease.ChangeEnded {
				ended = append(ended, ch)
			}
		}
		return len(ended) > 0
	}) {
		t.Fatal("the watch saw no end within 5s")
	}
	for _, ch := range ended {
		t.Logf("%q ended, How %q", ch.Info.Key, ch.How)
		if ch.How == "expired" || ch.How == "force-released" || ch.How == "hold ran out" {
			t.Errorf("%q was released by its holder: Watch says How %q", ch.Info.Key, ch.How)
		}
	}
}

// Close ends a Client's watches: WatchLeader's channel closes, and Watch
// must return too (with an error wrapping ErrClosed, as Lead does), not
// go on listing and subscribing through the go-redis client until its ctx
// ends. A Watch started on a closed Client returns ErrClosed at once.
func TestAdversary29b_CloseEndsWatch(t *testing.T) {
	prefix := fmt.Sprintf("adv29b-%s:", uniqueKey(t))
	c, err := lease.New(shared.Client(t), lease.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, "*", 50*time.Millisecond, func(lease.Change) {}) }()
	leaders := c.WatchLeader(ctx, "k")
	<-leaders
	time.Sleep(100 * time.Millisecond) // the watch is listing
	c.Close()
	select {
	case _, ok := <-leaders:
		if ok {
			if _, ok := <-leaders; ok {
				t.Error("WatchLeader's channel still open after Close")
			}
		}
	case <-time.After(time.Second):
		t.Error("WatchLeader's channel not closed within 1s of Close")
	}
	select {
	case err := <-done:
		mustIs(t, err, lease.ErrClosed)
	case <-time.After(time.Second):
		cancel()
		<-done
		t.Fatal("Watch still running 1s after Close")
	}
	werr := make(chan error, 1)
	go func() { werr <- c.Watch(ctx, "*", 50*time.Millisecond, func(lease.Change) {}) }()
	select {
	case err := <-werr:
		mustIs(t, err, lease.ErrClosed)
	case <-time.After(time.Second):
		cancel()
		<-werr
		t.Fatal("Watch on a closed Client still running after 1s")
	}
}
