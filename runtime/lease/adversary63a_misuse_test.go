package lease_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// fn calls runtime.Goexit (t.FailNow inside fn), on a fresh grant and on a
// kept lease it reused: the lease is released at once (not left to its
// TTL or kept), a Lease captured in fn reports nothing left, one EventDone
// per call, and the Client stays usable.
func TestAdversary63a_GoexitInFnReleases(t *testing.T) {
	admin := shared.Client(t)
	ctx := context.Background()
	for _, keep := range []time.Duration{0, 5 * time.Second} {
		c, rec := sharedClient(t)
		key := uniqueKey(t)
		s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Keep: keep}
		calls := 0
		if keep > 0 {
			calls++
			if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var captured *lease.Lease
		wg.Add(1)
		calls++
		go func() {
			defer wg.Done()
			_ = c.Do(ctx, key, s, func(fctx context.Context) error {
				captured, _ = lease.FromContext(fctx)
				runtime.Goexit()
				return nil
			})
			t.Error("Do returned after Goexit")
		}()
		wg.Wait()
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Errorf("keep=%v: key still held after Goexit (PTTL %v)", keep, admin.PTTL(ctx, lockKey(key)).Val())
		}
		if r := captured.Remaining(); r != 0 {
			t.Errorf("keep=%v: captured lease Remaining %v after its call ended by Goexit", keep, r)
		}
		calls++
		if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
			t.Errorf("keep=%v: next call: %v", keep, err)
		}
		if n := rec.Count(lease.EventDone); n != calls {
			t.Errorf("keep=%v: %d EventDone for %d calls", keep, n, calls)
		}
	}
}

// A panic in a reentered nested fn, recovered by the enclosing fn: the
// enclosing lease is intact and still reusable (same token), the call
// returns nil, the key is released, one EventDone per call.
func TestAdversary63a_PanicInNestedRecovered(t *testing.T) {
	admin := shared.Client(t)
	ctx := context.Background()
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Fence: true}
	var tokOuter, tokAfter lease.Token
	err := c.Do(ctx, key, s, func(fctx context.Context) error {
		tokOuter, _ = lease.TokenFrom(fctx)
		func() {
			defer func() { _ = recover() }()
			_ = c.Do(fctx, key, s, func(context.Context) error { panic("boom") })
		}()
		return c.Do(fctx, key, s, func(ictx context.Context) error {
			tokAfter, _ = lease.TokenFrom(ictx)
			if l, _ := lease.FromContext(ictx); l.Remaining() <= 0 {
				t.Error("no validity left after the nested panic")
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if tokOuter == 0 || tokOuter != tokAfter {
		t.Errorf("token %d, after the nested panic %d", tokOuter, tokAfter)
	}
	if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
		t.Error("key still held")
	}
	if d := rec.Count(lease.EventDone); d != 3 {
		t.Errorf("EventDone count %d, want 3", d)
	}
}

// A second Client on the same key inside the first's function must not
// enter (with and without Wait); Goexit in a reentered nested fn unwinds
// the enclosing call too and releases the (kept, fenced) lease, which the
// other Client then gets.
func TestAdversary63a_SecondClientNestedAndGoexitNested(t *testing.T) {
	admin := shared.Client(t)
	c, _ := sharedClient(t)
	c2, _ := sharedClient(t)
	key := uniqueKey(t)
	ctx := context.Background()
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Keep: 5 * time.Second, Fence: true}
	err := c.Do(ctx, key, s, func(f context.Context) error {
		e1 := c2.Do(f, key, s, func(context.Context) error { t.Error("second client entered"); return nil })
		mustIs(t, e1, lease.ErrBusy)
		e2 := c2.Do(f, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Second, Wait: 300 * time.Millisecond, MinValidity: 100 * time.Millisecond}, func(context.Context) error { t.Error("second client entered"); return nil })
		mustIs(t, e2, lease.ErrBusy)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Do(ctx, key, s, func(f context.Context) error {
			return c.Do(f, key, s, func(context.Context) error { runtime.Goexit(); return nil })
		})
	}()
	wg.Wait()
	if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
		t.Errorf("key still held after Goexit in a nested fn")
	}
	if err := c2.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Errorf("other client after Goexit: %v", err)
	}
}

// Contexts ended before Do, and a waiter cancelled: the documented
// classes (README §8 Results: "The caller's ctx cancelled while waiting →
// error wrapping ctx.Err()"), also with BusySkip (a cancel is not a skip).
func TestAdversary63a_CtxEndedBeforeAndWhileWaiting(t *testing.T) {
	c, _ := sharedClient(t)
	b, _ := sharedClient(t)
	admin := shared.Client(t)
	bg := context.Background()
	key := uniqueKey(t)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second}
	cctx, cancel := context.WithCancel(bg)
	cancel()
	err := c.Do(cctx, key, s, func(context.Context) error { t.Error("entered"); return nil })
	mustIs(t, err, context.Canceled)
	mustNotIs(t, err, lease.ErrDeadline, lease.ErrUnknown, lease.ErrBusy)
	dctx, dcancel := context.WithDeadline(bg, time.Now().Add(-time.Second))
	defer dcancel()
	err = c.Do(dctx, key, s, func(context.Context) error { t.Error("entered"); return nil })
	mustIs(t, err, lease.ErrDeadline, context.DeadlineExceeded)
	if admin.Exists(bg, lockKey(key)).Val() != 0 {
		t.Error("something was sent")
	}
	release := make(chan struct{})
	held := hold(t, c, key, s, release)
	for _, busy := range []lease.BusyPolicy{lease.BusyError, lease.BusySkip} {
		wctx, wcancel := context.WithCancel(bg)
		time.AfterFunc(100*time.Millisecond, wcancel)
		err = b.Do(wctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second, Busy: busy}, func(context.Context) error { t.Error("entered"); return nil })
		mustIs(t, err, context.Canceled)
		mustNotIs(t, err, lease.ErrUnknown, lease.ErrDeadline)
	}
	close(release)
	if err := <-held; err != nil {
		t.Error(err)
	}
}
