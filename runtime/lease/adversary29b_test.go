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
