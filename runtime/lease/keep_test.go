package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// kept is a spec that keeps its lease for a while after each call.
func keptSpec(keep time.Duration) lease.Spec {
	return lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Keep: keep, Fence: true}
}

// A kept lease is entered again without a round trip, with the same token,
// and released when the keep runs out unused.
func TestKeptLeaseIsReusedThenReleased(t *testing.T) {
	rdb := shared.Client(t)
	hook := &countHook{}
	rdb.AddHook(hook)
	c, rec := newClient(t, rdb)
	key := uniqueKey(t)
	s := keptSpec(300 * time.Millisecond)
	var tokens []lease.Token
	for i := range 5 {
		before := hook.n.Load()
		err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			tokens = append(tokens, tok)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The first reuse may ask Redis (the Client's subscription to the
		// key's channel is not live yet); later ones send nothing.
		if sent := hook.n.Load() - before; i > 1 && sent != 0 {
			t.Fatalf("call %d on a kept lease sent %d commands", i, sent)
		}
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // the subscription becomes live
		}
	}
	for _, tok := range tokens[1:] {
		if tok != tokens[0] || tok == 0 {
			t.Fatalf("tokens %v: a kept lease keeps its token", tokens)
		}
	}
	kept := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventAcquired && e.Kept {
			kept++
		}
	}
	if kept != 4 {
		t.Fatalf("%d calls took the kept lease, want 4", kept)
	}
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 1 {
		t.Fatal("the kept lease is not held between calls")
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, _ := rdb.Exists(context.Background(), lockKey(key)).Result()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the kept lease was not released when its keep ran out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kept longer than its TTL: renewals keep it valid between calls.
func TestKeptLeaseIsRenewedBetweenCalls(t *testing.T) {
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	// MinValidity 100ms of a 600ms TTL: a reuse does not depend on the
	// renewals being on time to within tens of milliseconds (a 300ms TTL
	// with its default MinValidity did, on a loaded machine).
	s := lease.Spec{TTL: 600 * time.Millisecond, MinValidity: 100 * time.Millisecond, Deadline: 5 * time.Second, Keep: 2 * time.Second}
	for range 2 {
		if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1400 * time.Millisecond) // more than two TTLs
	}
	if n := rec.Count(lease.EventAcquired); n != 2 {
		t.Fatalf("acquired %d times", n)
	}
	kept := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventAcquired && e.Kept {
			kept++
		}
	}
	if kept != 1 || rec.Count(lease.EventRenewed) == 0 {
		t.Fatalf("kept reuses %d, renewals %d: the lease should have been renewed between calls and reused", kept, rec.Count(lease.EventRenewed))
	}
}

// A waiter in another process gets a kept lease within a few round trips
// when no call uses it, and right after the call when one does: 100ms
// allowed for each, measured from the waiter's start and from the end of
// the keeper's call, not counting the time the process did not run then
// (on two busy cores under -race a waiter was seen 103ms after a 100ms
// call). Re-checks are 10s apart and the kept lease's TTL is 30s: only a
// release for the waiter hands it over within the 3s wait.
func TestKeptLeaseIsReleasedToAWaiter(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	keeper, _ := sharedClient(t)
	other, _ := sharedClient(t, lease.WithRecheck(10*time.Second)) // notifications only
	key := uniqueKey(t)
	s := keptSpec(30 * time.Second)
	if err := keeper.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wait := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second}
	if err := other.Do(context.Background(), key, wait, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	idle := time.Since(start)
	idleLost := st.lost(start, start.Add(idle))

	// Now the keeper is in a call when the waiter arrives.
	if err := keeper.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	inCall := make(chan struct{})
	done := make(chan error, 1)
	var callEnd time.Time
	go func() {
		done <- keeper.Do(context.Background(), key, s, func(context.Context) error {
			close(inCall)
			time.Sleep(100 * time.Millisecond)
			callEnd = time.Now()
			return nil
		})
	}()
	<-inCall
	start = time.Now()
	var entered time.Time
	if err := other.Do(context.Background(), key, wait, func(context.Context) error { entered = time.Now(); return nil }); err != nil {
		t.Fatal(err)
	}
	busy := time.Since(start)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := entered.Sub(callEnd)
	afterLost := st.lost(callEnd, entered)
	t.Logf("waiter got the kept lease after %v (idle keeper; the process stalled for %v of it), %v (keeper in a 100ms call; entered %v after the call's fn returned, the process stalled for %v of it)",
		idle.Round(time.Millisecond), idleLost.Round(time.Millisecond), busy.Round(time.Millisecond), after.Round(time.Millisecond), afterLost.Round(time.Millisecond))
	if idle-idleLost > 100*time.Millisecond {
		t.Errorf("a waiter waited %v for an idle kept lease (the process stalled for %v of it)", idle, idleLost)
	}
	if after <= 0 {
		t.Errorf("the waiter entered %v before the keeper's call returned", -after)
	}
	if after-afterLost > 100*time.Millisecond {
		t.Errorf("a waiter entered %v after the keeper's 100ms call returned (the process stalled for %v of it)", after, afterLost)
	}
}

// A kept lease that is lost is forgotten: the next call acquires afresh
// (here: busy, another owner took the key).
func TestKeptLeaseLostIsForgotten(t *testing.T) {
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second, Keep: 10 * time.Second}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rdb.Set(context.Background(), lockKey(key), "other-owner:0", 5*time.Second)
	deadline := time.Now().Add(2 * time.Second)
	for rec.Count(lease.EventLost) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the kept lease's loss was not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := c.Do(context.Background(), key, s, func(context.Context) error {
		t.Error("entered a lost kept lease")
		return nil
	})
	mustIs(t, err, lease.ErrBusy)
}

// Close releases kept leases.
func TestCloseReleasesKeptLeases(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	if err := c.Do(context.Background(), key, keptSpec(30*time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline := time.Now().Add(time.Second)
	for {
		n, _ := rdb.Exists(context.Background(), lockKey(key)).Result()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not release the kept lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A call whose spec the kept lease does not suit (it wants fencing, the
// kept lease has none) releases it and acquires afresh.
func TestKeptLeaseMustSuitTheCall(t *testing.T) {
	c, rec := sharedClient(t)
	key := uniqueKey(t)
	unfenced := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Keep: 10 * time.Second}
	if err := c.Do(context.Background(), key, unfenced, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	fenced := unfenced
	fenced.Fence = true
	err := c.Do(context.Background(), key, fenced, func(ctx context.Context) error {
		if tok, ok := lease.TokenFrom(ctx); !ok || tok == 0 {
			t.Error("a fenced call got no token")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.Events() {
		if e.Kind == lease.EventAcquired && e.Kept {
			t.Fatal("the unfenced kept lease was reused by a fenced call")
		}
	}
}

// Calls of one Client on a kept key, concurrently: one uses the kept lease,
// the others wait in the queue; everyone runs, never two at once.
func TestKeptLeaseConcurrentCallsOfOneClient(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	s := lease.Spec{TTL: time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second, Keep: time.Second}
	var mu sync.Mutex
	inside, maxInside, runs := 0, 0, 0
	var wg sync.WaitGroup
	var firstErr error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				err := c.Do(context.Background(), key, s, func(context.Context) error {
					mu.Lock()
					inside++
					runs++
					maxInside = max(maxInside, inside)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
					return nil
				})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil && !errors.Is(firstErr, lease.ErrBusy) {
		t.Fatal(firstErr)
	}
	if maxInside != 1 || runs < 30 {
		t.Fatalf("max %d calls inside at once, %d runs", maxInside, runs)
	}
}

// A notice on the key's channel naming another holder may be old (a
// handoff of an earlier lease on the key, read late): a kept lease that
// the key still holds is not lost by it. One the key no longer holds is
// lost at once, its running call cancelled.
func TestKeptLeaseStaleNoticeIsChecked(t *testing.T) {
	c, rec := sharedClient(t)
	rdb := shared.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	s := keptSpec(30 * time.Second)
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	channel := "lease:{" + key + "}:c"
	time.Sleep(50 * time.Millisecond) // the Client's subscription to the key is live
	if err := rdb.Publish(ctx, channel, "0123456789abcdef0123456789abcdef").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := rec.Count(lease.EventLost); n != 0 {
		t.Fatalf("a stale notice lost a kept lease the key still holds (%d losses)", n)
	}
	if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("the kept lease after a stale notice: %v", err)
	}

	// Now the key really changes hands while a call uses the kept lease.
	cancelled := make(chan error, 1)
	entered := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, key, s, func(ctx context.Context) error {
			close(entered)
			select {
			case <-ctx.Done():
				cancelled <- context.Cause(ctx)
			case <-time.After(5 * time.Second):
				cancelled <- nil
			}
			return nil
		})
	}()
	<-entered
	if err := rdb.Set(ctx, lockKey(key), "0123456789abcdef0123456789abcdef:0", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := rdb.Publish(ctx, channel, "0123456789abcdef0123456789abcdef").Err(); err != nil {
		t.Fatal(err)
	}
	cause := <-cancelled
	if !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("the call on a kept lease whose key changed hands ended with %v, want ErrLost", cause)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the loss was noticed %v after the notice", took)
	}
	mustIs(t, <-done, lease.ErrLost)
}

// A call with Keep is made without the parts only an acquire uses (its
// first acquire's arguments, a lease and a watcher: a third of a call),
// since it usually takes the lease kept by the call before. One that finds
// nothing kept gets them when it acquires after all: the first call of an
// episode, a call on another key while one is kept, a nested call on
// another key, a call after the keep ended. Each such call holds its lease
// and can keep it in turn.
func TestKeptCallIsMadeWithoutTheAcquirePart(t *testing.T) {
	rdb := shared.Client(t)
	c, _ := newClient(t, rdb)
	key, other := uniqueKey(t), uniqueKey(t)+":other"
	s := keptSpec(200 * time.Millisecond)
	type seen struct{ has, ok, holds bool }
	call := func(key string, inner func(ctx context.Context) error) seen {
		t.Helper()
		var got seen
		err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			got.has, got.ok = lease.CallHasGrantPart(ctx)
			l, _ := lease.FromContext(ctx)
			v, _ := rdb.Get(ctx, lockKey(key)).Result()
			got.holds = l != nil && l.Remaining() > 0 && v != ""
			if inner != nil {
				return inner(ctx)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	check := func(what string, got seen, wantPart bool) {
		t.Helper()
		if !got.ok || !got.holds {
			t.Fatalf("%s: the function ran without a lease it holds (%+v)", what, got)
		}
		if got.has != wantPart {
			t.Fatalf("%s: made with the acquire's part %v, want %v", what, got.has, wantPart)
		}
	}
	check("first call of the episode (acquires)", call(key, nil), true)
	for i := range 3 {
		check(fmt.Sprintf("call %d on the kept lease", i+2), call(key, nil), false)
	}
	check("a call on another key while one is kept", call(other, nil), true)
	var nested seen
	check("a call whose function nests one on a third key", call(key, func(ctx context.Context) error {
		err := c.Do(ctx, key+":nested", s, func(ctx context.Context) error {
			nested.has, nested.ok = lease.CallHasGrantPart(ctx)
			nested.holds = true
			return nil
		})
		return err
	}), false)
	check("the nested call (acquires)", nested, true)
	time.Sleep(400 * time.Millisecond) // the keep runs out: released
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Fatal("the kept lease was not released when its keep ran out")
	}
	check("a call after the keep ended (acquires afresh)", call(key, nil), true)
	check("and the next one takes what it kept", call(key, nil), false)
}
