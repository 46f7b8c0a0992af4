package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv29aObs records events and lets a test hold up a kept call on its
// EventAcquired (Kept), as a slow Observer would.
type adv29aObs struct {
	leasetest.Recorder
	block    atomic.Bool
	atKept   chan struct{} // a kept EventAcquired arrived (blocked)
	resume   chan struct{}
	lost     chan struct{}
	lostOnce sync.Once
}

func newAdv29aObs() *adv29aObs {
	return &adv29aObs{atKept: make(chan struct{}, 1), resume: make(chan struct{}), lost: make(chan struct{})}
}

func (o *adv29aObs) Observe(e lease.Event) {
	o.Recorder.Observe(e)
	if e.Kind == lease.EventLost {
		o.lostOnce.Do(func() { close(o.lost) })
	}
	if e.Kind == lease.EventAcquired && e.Kept && o.block.Load() {
		select {
		case o.atKept <- struct{}{}:
		default:
		}
		select {
		case <-o.resume:
		case <-time.After(5 * time.Second):
		}
	}
}

// A kept lease found lost (renewal: not the owner) after takeKept handed it
// to a call but before the call entered fn (here: a slow Observer on
// EventAcquired; a GC pause or a descheduled goroutine does the same) must
// not be entered: its key is another holder's by then. The entry check
// looks at the validity clock only, which a loss does not move.
// (Failed on a606aab: fn was entered, Do returned ErrLost afterwards.)
func TestAdversary29a_KeptLostBeforeEntryIsNotEntered(t *testing.T) {
	obs := newAdv29aObs()
	a, err := lease.New(shared.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, _ := sharedClient(t)
	admin := shared.Client(t)
	key := uniqueKey(t)
	ctx := context.Background()
	s := lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, MinValidity: 100 * time.Millisecond, Keep: 20 * time.Second}
	if err := a.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("first call: %v", err)
	}
	obs.block.Store(true)
	var entered atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- a.Do(ctx, key, s, func(ctx context.Context) error {
			entered.Store(true)
			return nil
		})
	}()
	select {
	case <-obs.atKept:
	case err := <-done:
		t.Fatalf("second call did not take the kept lease: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no kept EventAcquired")
	}
	// The key is deleted from outside and B takes it; A's next renewal
	// (within TTL/3) finds it is not the owner: the lease is lost.
	if err := admin.Del(ctx, lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := hold(t, b, key, spec(5*time.Second, 8*time.Second), release)
	select {
	case <-obs.lost:
	case <-time.After(3 * time.Second):
		t.Fatal("A's kept lease was not found lost")
	}
	close(obs.resume)
	err = <-done
	close(release)
	if herr := <-held; herr != nil {
		t.Errorf("B: %v", herr)
	}
	t.Logf("A's second call: entered=%v err=%v", entered.Load(), err)
	if entered.Load() {
		t.Fatalf("A entered fn on a kept lease already found lost while B held the key (Do = %v)", err)
	}
	// fn was not called: the call reports that it could not enter (it
	// had no validity left), not nil.
	mustIs(t, err, lease.ErrLowValidity)
}
