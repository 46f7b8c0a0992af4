package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// Round 33: tests written from DESIGN.md alone (contract conformance).
// Those named after a semantic that held are kept as regression tests.

func TestAdversary33_DeadlineCauseIsErrDeadline(t *testing.T) {
	c, _ := sharedClient(t)
	st := watchStalls(t, 5*time.Millisecond)
	for _, ctxDeadline := range []time.Duration{0, 300 * time.Millisecond} {
		ctx := context.Background()
		if ctxDeadline > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ctxDeadline)
			defer cancel()
		}
		start := time.Now()
		var cause error
		var fnDeadline time.Time
		var hasDL bool
		err := c.Do(ctx, "adv33-dl", lease.Spec{TTL: 2 * time.Second, Deadline: 500 * time.Millisecond}, func(ctx context.Context) error {
			fnDeadline, hasDL = ctx.Deadline()
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		end := time.Now()
		took := end.Sub(start)
		limit := 500 * time.Millisecond
		if ctxDeadline > 0 {
			limit = ctxDeadline
		}
		t.Logf("ctxDeadline %v: err %v after %v, cause %v, fn deadline in %v", ctxDeadline, err, took, cause, fnDeadline.Sub(start))
		if !hasDL || fnDeadline.After(start.Add(limit)) {
			t.Errorf("fn deadline %v (ok %v), want ≤ %v", fnDeadline.Sub(start), hasDL, limit)
		}
		// The caller's deadline comes the release's reserve (30ms) after
		// fn's: its timer runs first only when the process was held up
		// across both (TestAdversary55_BudgetEndsWhileProcessStopped).
		callerFirst := ctxDeadline > 0 && cause == context.DeadlineExceeded &&
			st.during(fnDeadline, start.Add(limit).Add(5*time.Millisecond))
		if cause != lease.ErrDeadline && !callerFirst {
			t.Errorf("cause %v, want ErrDeadline", cause)
		}
		if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v", err)
		}
		if late := took - st.lost(start.Add(limit), end); late > limit+60*time.Millisecond {
			t.Errorf("took %v (%v without the process's stalls)", took, late)
		}
	}
}

func TestAdversary33_NestedSpecApplies(t *testing.T) {
	c, _ := sharedClient(t)
	err := c.Do(context.Background(), "adv33-nest", lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second}, func(ctx context.Context) error {
		called := false
		e := c.Do(ctx, "adv33-nest", lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(context.Context) error { called = true; return nil })
		t.Logf("fence under unfenced: %v called %v", e, called)
		if e == nil || called {
			t.Errorf("fence under unfenced: %v called %v", e, called)
		}
		start := time.Now()
		var cause error
		e = c.Do(ctx, "adv33-nest", lease.Spec{TTL: 3 * time.Second, Deadline: 200 * time.Millisecond}, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		})
		t.Logf("inner deadline: %v after %v cause %v", e, time.Since(start), cause)
		if !errors.Is(e, lease.ErrDeadline) || cause != lease.ErrDeadline || time.Since(start) > 300*time.Millisecond {
			t.Errorf("inner deadline: %v cause %v", e, cause)
		}
		e = c.Do(ctx, "adv33-nest", lease.Spec{TTL: 10 * time.Second, MinValidity: 4 * time.Second, Deadline: time.Second}, func(context.Context) error { called = true; return nil })
		t.Logf("min validity: %v", e)
		if !errors.Is(e, lease.ErrLowValidity) {
			t.Errorf("nested min-validity: %v", e)
		}
		if ctx.Err() != nil {
			t.Errorf("outer ctx ended: %v", context.Cause(ctx))
		}
		return nil
	})
	if err != nil {
		t.Errorf("outer: %v", err)
	}
}

func TestAdversary33_BusyClasses(t *testing.T) {
	c, _ := sharedClient(t)
	c2, _ := sharedClient(t)
	release := make(chan struct{})
	defer close(release)
	hold(t, c2, "adv33-busy", lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}, release)
	err := c.Do(context.Background(), "adv33-busy", lease.Spec{Deadline: time.Second}, func(context.Context) error { return nil })
	if !errors.Is(err, lease.ErrBusy) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait 0: %v", err)
	}
	start := time.Now()
	err = c.Do(context.Background(), "adv33-busy", lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 300 * time.Millisecond}, func(context.Context) error { return nil })
	t.Logf("wait 300ms: %v after %v", err, time.Since(start))
	if !errors.Is(err, lease.ErrBusy) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err = c.Do(ctx, "adv33-busy", lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 2 * time.Second, Busy: lease.BusySkip}, func(context.Context) error { return nil })
	t.Logf("skip+cancel: %v", err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("skip+cancel: %v", err)
	}
	err = c.Do(context.Background(), "adv33-busy", lease.Spec{Deadline: time.Second, Busy: lease.BusySkip}, func(context.Context) error { return errors.New("called") })
	if err != nil {
		t.Errorf("skip: %v", err)
	}
}

func TestAdversary33_SpecChecksAndZeroValues(t *testing.T) {
	c, _ := sharedClient(t)
	bad := []lease.Spec{
		{},
		{Deadline: -1},
		{Deadline: time.Second, TTL: -1},
		{Deadline: time.Second, Wait: -1},
		{Deadline: time.Second, MinValidity: -1},
		{Deadline: time.Second, HoldMin: -1},
		{Deadline: time.Second, Wait: time.Second},
		{Deadline: time.Second, HoldMin: 2 * time.Second},
		{Deadline: time.Second, TTL: time.Second, MinValidity: time.Second},
		{Deadline: time.Second, Busy: 7},
	}
	for _, s := range bad {
		called := false
		err := c.Do(context.Background(), "adv33-spec", s, func(context.Context) error { called = true; return nil })
		if err == nil || called {
			t.Errorf("%+v: %v, called %v", s, err, called)
		}
	}
	err := c.Do(context.Background(), "", lease.Spec{Deadline: time.Second}, func(context.Context) error { return nil })
	if !errors.Is(err, lease.ErrBadKey) {
		t.Errorf("empty key: %v", err)
	}
	err = c.Do(context.Background(), "adv33-spec", lease.Spec{Deadline: time.Second, HoldMin: time.Second}, func(ctx context.Context) error {
		l, ok := lease.FromContext(ctx)
		if !ok || l.Token() != 0 || l.Key() != "adv33-spec" {
			t.Errorf("lease %v %v", ok, l)
		}
		if _, ok := lease.TokenFrom(ctx); ok {
			t.Errorf("TokenFrom without fence reports true")
		}
		if r := l.Remaining(); r < 29*time.Second || r > 30*time.Second {
			t.Errorf("Remaining %v", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAdversary33_HoldMinLongerThanTTL(t *testing.T) {
	t.Parallel()
	c, _ := sharedClient(t)
	c2, _ := sharedClient(t)
	start := time.Now()
	err := c.Do(context.Background(), "adv33-hold", lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, HoldMin: 2 * time.Second}, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	pttl := shared.Client(t).PTTL(context.Background(), lockKey("adv33-hold")).Val()
	t.Logf("after return (%v): PTTL %v", time.Since(start), pttl)
	for {
		err := c2.Do(context.Background(), "adv33-hold", lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil })
		if err == nil {
			t.Logf("taken %v after the first call's start", time.Since(start))
			if time.Since(start) < 2*time.Second-50*time.Millisecond {
				t.Errorf("hold-min 2s: another call took the lease %v after the grant", time.Since(start))
			}
			return
		}
		if time.Since(start) > 4*time.Second {
			t.Fatalf("never free: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DESIGN §4: "Total deadline ... when it passes Do returns an error
// wrapping ErrDeadline (and context.DeadlineExceeded)", and "Loss ... Do
// returns an error wrapping ErrLost". A function that ignores its context
// past the deadline gets no more renewals, so a short TTL then runs out
// too: both happened, and Do must say both. Round 33 found Do returning
// ErrLost alone (no ErrDeadline, no EventDeadlineExceeded), although fn's
// context.Cause was ErrDeadline. The same for a nested call.
func TestAdversary33_DeadlineThenLossWrapsBoth(t *testing.T) {
	c, rec := sharedClient(t)
	check := func(what string, err error, cause error) {
		t.Helper()
		t.Logf("%s: %v; fn's cause %v", what, err, cause)
		if cause != lease.ErrDeadline {
			t.Errorf("%s: fn's context.Cause %v, want ErrDeadline", what, cause)
		}
		if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: the deadline passed: want an error wrapping ErrDeadline and DeadlineExceeded, got %v", what, err)
		}
		if !errors.Is(err, lease.ErrLost) {
			t.Errorf("%s: the lease ran out while fn ran: want an error wrapping ErrLost, got %v", what, err)
		}
	}
	var cause error
	err := c.Do(context.Background(), "adv33-dl-lost", lease.Spec{TTL: 300 * time.Millisecond, Deadline: 500 * time.Millisecond}, func(ctx context.Context) error {
		time.Sleep(time.Second) // ignores ctx
		cause = context.Cause(ctx)
		return nil
	})
	check("Do", err, cause)
	if rec.Count(lease.EventDeadlineExceeded) != 1 || rec.Count(lease.EventLost) != 1 {
		t.Errorf("events: %d deadline exceeded, %d lost; want one each", rec.Count(lease.EventDeadlineExceeded), rec.Count(lease.EventLost))
	}

	// Nested: the inner call's deadline passes, and the inner fn, ignoring
	// it, outlives the lease (the outer fn ignores its context too).
	var inner error
	err = c.Do(context.Background(), "adv33-dl-lost-nested", lease.Spec{TTL: 300 * time.Millisecond, Deadline: 2 * time.Second}, func(ctx context.Context) error {
		inner = c.Do(ctx, "adv33-dl-lost-nested", lease.Spec{TTL: 300 * time.Millisecond, MinValidity: time.Millisecond, Deadline: 100 * time.Millisecond}, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			// Stop the outer lease's renewals: the renewal refused (the key
			// gone) is a loss while this nested fn still runs.
			shared.Client(t).Del(context.Background(), lockKey("adv33-dl-lost-nested"))
			time.Sleep(time.Second)
			return nil
		})
		return nil
	})
	check("nested Do", inner, cause)
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("outer Do: %v, want ErrLost", err)
	}
}

func TestAdversary33_UnreplicatedGrantIsUnknownAndReleased(t *testing.T) {
	c, rec := sharedClient(t, lease.WithReplicas(1, 100*time.Millisecond))
	for _, fence := range []bool{false, true} {
		called := false
		start := time.Now()
		err := c.Do(context.Background(), "adv33-unrepl", lease.Spec{TTL: 10 * time.Second, Deadline: 2 * time.Second, Fence: fence}, func(context.Context) error { called = true; return nil })
		t.Logf("fence %v: %v after %v", fence, err, time.Since(start))
		if !errors.Is(err, lease.ErrUnknown) || called {
			t.Errorf("err %v called %v", err, called)
		}
		if n := shared.Client(t).Exists(context.Background(), lockKey("adv33-unrepl")).Val(); n != 0 {
			t.Errorf("the unreplicated grant was left held")
		}
	}
	if rec.Count(lease.EventUnreplicated) != 2 {
		t.Errorf("EventUnreplicated %d", rec.Count(lease.EventUnreplicated))
	}
}

func TestAdversary33_BlackholedAcquireSaysReleaseUnconfirmed(t *testing.T) {
	p := leasetest.StartProxy(t, shared.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, rec := newClient(t, rdb)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.Blackhole)
	start := time.Now()
	err := c.Do(context.Background(), "adv33-bh", lease.Spec{TTL: 2 * time.Second, Deadline: 400 * time.Millisecond}, func(context.Context) error { return nil })
	t.Logf("%v after %v", err, time.Since(start))
	for _, e := range rec.Events() {
		t.Logf("%v %v", e.Kind, e.Err)
	}
	if !errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrBusy) {
		t.Errorf("err %v", err)
	}
	if !strings.Contains(err.Error(), "unconfirmed") {
		t.Errorf("error does not say the release is unconfirmed: %v", err)
	}
	if time.Since(start) > 460*time.Millisecond {
		t.Errorf("took %v", time.Since(start))
	}
}

// DESIGN §4: "Loss errors carry their cause", and "Renewal stops at the
// total deadline". A function that goes on past its deadline loses its
// lease when the last renewal's validity runs out, because no renewal is
// sent after the deadline, not because one failed. Round 33 found the
// cause saying "its validity ran out before a renewal was confirmed",
// which sends an operator looking for a Redis problem that was not there.
func TestAdversary33_LossAfterDeadlineNamesTheDeadline(t *testing.T) {
	c, rec := sharedClient(t)
	var cause error
	err := c.Do(context.Background(), "adv33-dl-cause", lease.Spec{TTL: 300 * time.Millisecond, Deadline: 500 * time.Millisecond}, func(ctx context.Context) error {
		time.Sleep(time.Second) // ignores ctx
		l, _ := lease.FromContext(ctx)
		cause = l.Err()
		return nil
	})
	t.Logf("Do: %v\nthe lease's cause: %v", err, cause)
	mustIs(t, err, lease.ErrLost)
	mustIs(t, cause, lease.ErrLost)
	if msg := cause.Error(); !strings.Contains(msg, "deadline") || strings.Contains(msg, "before a renewal was confirmed") {
		t.Errorf("the loss's cause does not say renewals stopped at the deadline: %v", cause)
	}
	if rec.Count(lease.EventRenewFailed) != 0 {
		t.Errorf("%d EventRenewFailed: no renewal failed", rec.Count(lease.EventRenewFailed))
	}
}

func TestAdversary33_CloseTwiceAndNewNil(t *testing.T) {
	c, err := lease.New(shared.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	err = c.Do(context.Background(), "adv33-closed", lease.Spec{Deadline: time.Second}, func(context.Context) error { return nil })
	if !errors.Is(err, lease.ErrClosed) {
		t.Errorf("Do after Close: %v", err)
	}
	if _, err := lease.New(nil); err == nil {
		t.Errorf("New(nil) accepted")
	}
}

// The public names DESIGN.md §4 gives, with its signatures: tests outside
// this repository are written against them.
func TestAdversary33_DesignNamesAndSignatures(t *testing.T) {
	var (
		_ func(redis.UniversalClient, ...lease.Option) (*lease.Client, error)                         = lease.New
		_ func(*lease.Client) error                                                                   = (*lease.Client).Close
		_ func(*lease.Client, context.Context, string, lease.Spec, func(context.Context) error) error = (*lease.Client).Do
		_ func(context.Context) (lease.Token, bool)                                                   = lease.TokenFrom
		_ func(context.Context) (*lease.Lease, bool)                                                  = lease.FromContext
		_ func(*lease.Lease) string                                                                   = (*lease.Lease).Key
		_ func(*lease.Lease) lease.Token                                                              = (*lease.Lease).Token
		_ func(*lease.Lease) time.Duration                                                            = (*lease.Lease).Remaining
		_ func(*lease.Lease) <-chan struct{}                                                          = (*lease.Lease).Lost
		_ func(int, time.Duration) lease.Option                                                       = lease.WithReplicas
		_ func(lease.Observer) lease.Option                                                           = lease.WithObserver
		_ func(string) lease.Option                                                                   = lease.WithPrefix
		_ lease.Observer                                                                              = lease.ObserverFunc(nil)
		_ lease.BusyPolicy                                                                            = lease.BusyError
	)
	s := lease.Spec{TTL: 1, Deadline: 2, Wait: 3, MinValidity: 4, HoldMin: 5, Busy: lease.BusySkip, Fence: true, Name: "n"}
	if lease.BusyPolicy(0) != lease.BusyError || s.Busy == lease.BusyError {
		t.Errorf("BusyError must be the zero value, BusySkip another")
	}
	if tok := lease.Token(1<<64 - 1); uint64(tok) != 1<<64-1 {
		t.Errorf("Token is not a uint64")
	}
	classes := []error{lease.ErrBusy, lease.ErrUnknown, lease.ErrLost, lease.ErrDeadline, lease.ErrLowValidity, lease.ErrBadKey}
	for i, a := range classes {
		for j, b := range classes {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, errors.Is(a, b))
			}
		}
	}
	if !errors.Is(lease.ErrDeadline, context.DeadlineExceeded) {
		t.Errorf("ErrDeadline does not wrap context.DeadlineExceeded")
	}
	kinds := []lease.EventKind{lease.EventAcquired, lease.EventBusy, lease.EventAcquireUnknown, lease.EventLowValidity,
		lease.EventRenewed, lease.EventRenewFailed, lease.EventLost, lease.EventDeadlineExceeded, lease.EventReleased,
		lease.EventReleaseUnconfirmed, lease.EventUnreplicated, lease.EventStaleWriteRejected}
	seen := map[string]bool{}
	for _, k := range kinds {
		if k == 0 || seen[k.String()] {
			t.Errorf("event kind %d (%v): zero or a duplicate name", k, k)
		}
		seen[k.String()] = true
	}
}

func TestAdversary33_NoKeyWithoutExpiry(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c1, _ := newClient(t, rdb)
	c2, _ := newClient(t, srv.Client(t))
	done := make(chan error, 40)
	for i := range 40 {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+i*10)*time.Millisecond)
			defer cancel()
			done <- c.Do(ctx, "adv33-exp", lease.Spec{TTL: time.Second, MinValidity: time.Millisecond, Deadline: 2 * time.Second, Wait: time.Second, Fence: i%3 == 0, HoldMin: time.Duration(i%4) * 5 * time.Millisecond},
				func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil })
		}()
	}
	for range 40 {
		<-done
	}
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		// PTTL answers -1 for a key without an expiry and -2 for one that
		// is gone: a hold-min's lock key (at most 15 ms here) can expire
		// between KEYS and PTTL, which is not a fault.
		pttl, err := rdb.Do(ctx, "PTTL", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %dms", k, pttl)
		if pttl == -1 {
			t.Errorf("key %s has no expiry", k)
		}
	}
}

// DESIGN §4: "Total deadline ... when it passes Do returns an error
// wrapping ErrDeadline (and context.DeadlineExceeded)". Round 33 found a
// call with Spec.Keep (keep= in a directive) whose deadline passed while
// fn ran returning nil (or fn's bare context error): the lease was kept
// and the deadline went unreported, no EventDeadlineExceeded either,
// although fn's context.Cause was ErrDeadline.
func TestAdversary33_KeepDoesNotHideTheDeadline(t *testing.T) {
	t.Parallel()
	c, rec := sharedClient(t)
	for i, ret := range []func(ctx context.Context) error{
		func(context.Context) error { return nil },
		func(ctx context.Context) error { return ctx.Err() },
	} {
		var cause error
		start := time.Now()
		err := c.Do(context.Background(), "adv33-keep-dl", lease.Spec{TTL: 2 * time.Second, Deadline: 300 * time.Millisecond, Keep: 5 * time.Second}, func(ctx context.Context) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ret(ctx)
		})
		t.Logf("call %d: %v after %v; fn's cause %v", i, err, time.Since(start).Round(time.Millisecond), cause)
		if cause != lease.ErrDeadline {
			t.Fatalf("call %d: fn's cause %v, want ErrDeadline", i, cause)
		}
		if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call %d: the deadline passed: want an error wrapping ErrDeadline and DeadlineExceeded, got %v", i, err)
		}
		if n := rec.Count(lease.EventDeadlineExceeded); n != i+1 {
			t.Errorf("call %d: %d EventDeadlineExceeded, want %d", i, n, i+1)
		}
	}
	// The lease may still be kept for the next call, which runs.
	if err := c.Do(context.Background(), "adv33-keep-dl", lease.Spec{TTL: 2 * time.Second, Deadline: time.Second, Keep: 5 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("next call: %v", err)
	}
}
