package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// fn starts background work with its own context; after fn returned in
// time (no renewal refused, validity left, released cleanly or kept), that
// work calls Do on another key with the context it was given. The call is
// not attempted (its context ended), but its error claims a lost lease.
//
// errors.go, ErrLost: "the lease ended while the function ran (renewal
// refused, its validity ran out, the function returned after it, or the
// release found the key no longer ours). The function's context was
// cancelled with a cause wrapping this error; its side effects may have
// run partly unprotected." None of that happened here.
//
// observer.go, Event.Lost: "An ErrLost in Err without Lost is not this
// call's lease's: the function returned it (a nested call on another
// key), or the call was not started because its context had ended with a
// loss (its caller's)." The caller's context ended with no loss.
//
// lease.go, Lease.Err: "Err returns why the lease was lost (an error
// wrapping ErrLost), an error saying it was released once its call has
// returned, or nil while it is held." With Keep the lease was not even
// released, yet the cause says "returned and released it".
func TestAdversary63a_EscapedCtxAfterCleanReturnIsNotLost(t *testing.T) {
	c, rec := sharedClient(t)
	ctx := context.Background()
	for _, keep := range []time.Duration{0, 5 * time.Second} {
		key := uniqueKey(t)
		s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Keep: keep}
		var escaped context.Context
		if err := c.Do(ctx, key, s, func(f context.Context) error { escaped = f; return nil }); err != nil {
			t.Fatal(err)
		}
		if n := rec.Count(lease.EventLost); n != 0 {
			t.Fatalf("keep=%v: %d EventLost: the first call's lease was lost, the test means a clean return", keep, n)
		}
		entered := false
		err := c.Do(escaped, key+"-other", s, func(context.Context) error { entered = true; return nil })
		if entered {
			t.Fatalf("keep=%v: entered under an ended context", keep)
		}
		if err == nil {
			t.Fatalf("keep=%v: nil error for a call not attempted", keep)
		}
		if errors.Is(err, lease.ErrLost) {
			t.Errorf("keep=%v: Do on the context of a call that returned in time and lost nothing, its own fn never called, returned an error wrapping ErrLost: %v", keep, err)
		}
		if l, ok := lease.FromContext(escaped); ok && errors.Is(l.Err(), lease.ErrLost) {
			t.Errorf("keep=%v: Lease.Err() of a lease released (or kept) after a clean return wraps ErrLost: %v", keep, l.Err())
		}
	}
}

// fn closes the Client (or another part of the service does while fn
// runs), then makes a nested call on its own key. README, Runtime
// semantics, Close: "Close makes later calls and current waiters return
// ErrClosed at once; calls already in their function keep their leases
// until they return." Client.Close's doc: "later calls (Do, Lead, ...)
// return ErrClosed". The nested call on another key does; the one on the
// same key enters its function and returns nil.
func TestAdversary63a_NestedSameKeyAfterCloseReturnsErrClosed(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second}
	var same, other error
	entered := false
	err := c.Do(context.Background(), key, s, func(fctx context.Context) error {
		c.Close()
		other = c.Do(fctx, key+"-other", s, func(context.Context) error { return nil })
		same = c.Do(fctx, key, s, func(context.Context) error { entered = true; return nil })
		return nil
	})
	if err != nil {
		t.Fatalf("outer call (in its function at Close, keeps its lease): %v", err)
	}
	mustIs(t, other, lease.ErrClosed)
	if entered || !errors.Is(same, lease.ErrClosed) {
		t.Errorf("nested Do on the same key started after Close: entered=%v, Do = %v; want ErrClosed (as the nested call on another key: %v)", entered, same, other)
	}
}
