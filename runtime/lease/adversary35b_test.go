package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 35, claims that held: loss on time on the clock, kept leases,
// nothing left after Close.

// Three Clients, each on its own proxy, each with leases of several TTLs
// (the clock's queue holds watchers, deadlines and calls that come and go,
// short calls started and cancelled meanwhile): every proxy's replies are
// blackholed while the long calls are in fn; each fn's context is
// cancelled with a cause wrapping ErrLost by its validity's end (slack for
// a loaded 2-core machine under -race), never before it.
func TestAdversary35_LossOnTimeManyClients(t *testing.T) {
	srv := shared
	type client struct {
		c *lease.Client
		p *leasetest.Proxy
	}
	var cs []client
	for range 3 {
		p := leasetest.StartProxy(t, srv.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		c, _ := newClient(t, rdb, lease.WithReleaseTimeout(200*time.Millisecond))
		cs = append(cs, client{c, p})
	}
	ttls := []time.Duration{600 * time.Millisecond, 900 * time.Millisecond, 1200 * time.Millisecond}
	type result struct {
		valid, done time.Time
		cause       error
		err         error
	}
	var mu sync.Mutex
	var results []result
	var in, out sync.WaitGroup
	blackholed := make(chan struct{})
	stopNoise := make(chan struct{})
	for ci, cl := range cs {
		for i := range 6 {
			ttl := ttls[(ci+i)%len(ttls)]
			in.Add(1)
			out.Add(1)
			go func() {
				defer out.Done()
				var r result
				entered := false
				r.err = cl.c.Do(context.Background(), uniqueKey(t), spec(ttl, 5*time.Second), func(ctx context.Context) error {
					entered = true
					in.Done()
					<-blackholed
					l, _ := lease.FromContext(ctx)
					r.valid = time.Now().Add(l.Remaining())
					<-ctx.Done()
					r.done = time.Now()
					r.cause = context.Cause(ctx)
					return nil
				})
				if !entered {
					in.Done()
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}()
		}
		// Noise on the same clock: short calls whose deadlines, watchers
		// and release deadlines are set and taken off.
		out.Add(1)
		go func() {
			defer out.Done()
			for {
				select {
				case <-stopNoise:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				_ = cl.c.Do(ctx, uniqueKey(t), spec(time.Second, time.Second), func(ctx context.Context) error {
					time.Sleep(time.Millisecond)
					return nil
				})
				cancel()
			}
		}()
	}
	in.Wait()
	for _, cl := range cs {
		cl.p.Set(leasetest.Blackhole)
	}
	close(blackholed)
	time.Sleep(2 * time.Second)
	close(stopNoise)
	for _, cl := range cs {
		cl.p.Set(leasetest.Pass)
	}
	out.Wait()
	if len(results) != 18 {
		t.Fatalf("%d results; want 18", len(results))
	}
	const slack = 150 * time.Millisecond
	for i, r := range results {
		if r.valid.IsZero() {
			t.Errorf("call %d did not enter fn: %v", i, r.err)
			continue
		}
		if !errors.Is(r.cause, lease.ErrLost) {
			t.Errorf("call %d: fn's cause %v; want ErrLost", i, r.cause)
		}
		if late := r.done.Sub(r.valid); late > slack {
			t.Errorf("call %d: fn's context ended %v after the lease's validity", i, late)
		}
		mustIs(t, r.err, lease.ErrLost)
	}
}

// A kept lease (the watcher reused by every call of the episode) taken by
// many short calls, then its key deleted from outside while a call is in
// fn: that call's fn is cancelled with ErrLost by valid-until at the
// latest (the renewals fail: the key is gone); a lease kept and not used
// ends at its keep and is released.
func TestAdversary35_KeptLeaseWatcherReusedAndKeepEnds(t *testing.T) {
	st := watchStalls(t, 5*time.Millisecond)
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	key := uniqueKey(t)
	s := spec(600*time.Millisecond, 5*time.Second)
	s.Keep = 400 * time.Millisecond
	var tok lease.Token
	for i := range 20 {
		if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			l, _ := lease.FromContext(ctx)
			if i == 0 {
				tok = l.Token()
			} else if l.Token() != tok {
				t.Errorf("call %d: token %v; want the kept lease's %v", i, l.Token(), tok)
			}
			time.Sleep(10 * time.Millisecond)
			return nil
		}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// Past a TTL in fn: the reused watcher keeps renewing it.
	var valid, done time.Time
	var cause error
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		time.Sleep(700 * time.Millisecond)
		if ctx.Err() != nil {
			t.Errorf("a kept lease's call was cancelled while renewals went through: %v", context.Cause(ctx))
		}
		if err := rdb.Del(context.Background(), lockKey(key)).Err(); err != nil {
			t.Error(err)
		}
		l, _ := lease.FromContext(ctx)
		valid = time.Now().Add(l.Remaining())
		<-ctx.Done()
		done, cause = time.Now(), context.Cause(ctx)
		return nil
	})
	mustIs(t, err, lease.ErrLost)
	if !errors.Is(cause, lease.ErrLost) {
		t.Errorf("fn's cause %v; want ErrLost", cause)
	}
	if late := done.Sub(valid); late-st.lost(valid, done) > 150*time.Millisecond {
		t.Errorf("fn's context ended %v after validity", late)
	}
	// A fresh episode, kept and left: released at its keep's end.
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 1 {
		t.Fatalf("the kept lease's key is gone right after the call (exists %d)", n)
	}
	time.Sleep(s.Keep + 300*time.Millisecond)
	if n, _ := rdb.Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Errorf("the kept lease was not released at its keep's end (key still exists)")
	}
}

// After a mix of calls (deadline hit, caller cancel, loss, kept, nested)
// and Close, nothing of the Client is left running, its clock's timer
// firing included.
func TestAdversary35_NothingLeftAfterClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	_ = c.Do(ctx, key, spec(300*time.Millisecond, 200*time.Millisecond), func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	cctx, cancel := context.WithCancelCause(ctx)
	_ = c.Do(cctx, key, spec(300*time.Millisecond, time.Minute), func(ctx context.Context) error {
		cancel(errors.New("gone"))
		<-ctx.Done()
		return nil
	})
	_ = c.Do(ctx, key, spec(300*time.Millisecond, time.Minute), func(fctx context.Context) error {
		rdb.Del(ctx, lockKey(key))
		<-fctx.Done()
		return nil
	})
	ks := spec(300*time.Millisecond, time.Minute)
	ks.Keep = time.Hour
	for range 3 {
		_ = c.Do(ctx, key, ks, func(fctx context.Context) error {
			return c.Do(fctx, key+"-inner", spec(300*time.Millisecond, time.Hour), func(context.Context) error { return nil })
		})
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("left after Close: %v", err)
	}
	if n, _ := shared.Client(t).Exists(ctx, lockKey(key)).Result(); n != 0 {
		t.Errorf("the kept lease was not released by Close")
	}
}

type adv35Key struct{}

// derivedView is what fn sees of its context and of contexts derived from
// it once its context ends.
type derivedView struct {
	deadline           time.Time
	err, cause         error
	child, childCause  error
	longer, shorterSet error
	afterFuncRan       bool
	withoutCancelErr   error
	withoutCancelValue any
	value              any
}

func viewOf(t *testing.T, fctx context.Context, end func()) derivedView {
	var v derivedView
	v.deadline, _ = fctx.Deadline()
	child, cc := context.WithCancelCause(fctx)
	defer cc(nil)
	longer, c2 := context.WithTimeout(fctx, time.Hour)
	defer c2()
	ran := make(chan struct{})
	stop := context.AfterFunc(fctx, func() { close(ran) })
	defer stop()
	wc := context.WithoutCancel(fctx)
	end()
	<-fctx.Done()
	<-child.Done()
	<-longer.Done()
	select {
	case <-ran:
		v.afterFuncRan = true
	case <-time.After(time.Second):
	}
	// A context derived after the end is done at once.
	later, c3 := context.WithDeadline(fctx, time.Now().Add(time.Hour))
	defer c3()
	v.shorterSet = later.Err()
	v.err, v.cause = fctx.Err(), context.Cause(fctx)
	v.child, v.childCause = child.Err(), context.Cause(child)
	v.longer = longer.Err()
	v.withoutCancelErr, v.withoutCancelValue = wc.Err(), wc.Value(adv35Key{})
	v.value = fctx.Value(adv35Key{})
	return v
}

// fn's context and the contexts derived from it show what the pre-clock
// chain (WithDeadlineCause under WithCancelCause) shows, at the deadline
// and at a loss: Deadline, Err, Cause, derived contexts' Err and Cause,
// AfterFunc, WithoutCancel, values.
func TestAdversary35_FnContextParityWithReferenceChain(t *testing.T) {
	c, _ := sharedClient(t)
	rdb := shared.Client(t)
	base := context.WithValue(context.Background(), adv35Key{}, "v")

	check := func(t *testing.T, got, want derivedView) {
		t.Helper()
		if got.err != want.err || !errors.Is(got.cause, want.cause) && got.cause != want.cause ||
			got.child != want.child || !errors.Is(got.childCause, want.childCause) ||
			got.longer != want.longer || got.shorterSet != want.shorterSet ||
			got.afterFuncRan != want.afterFuncRan || got.withoutCancelErr != want.withoutCancelErr ||
			got.withoutCancelValue != want.withoutCancelValue || got.value != want.value {
			t.Errorf("fn's context:\n got  %+v\n want %+v", got, want)
		}
	}

	t.Run("deadline", func(t *testing.T) {
		var got derivedView
		start := time.Now()
		err := c.Do(base, uniqueKey(t), spec(2*time.Second, 300*time.Millisecond), func(fctx context.Context) error {
			got = viewOf(t, fctx, func() {})
			return nil
		})
		mustIs(t, err, lease.ErrDeadline)
		ref, stop := refChain(base, got.deadline)
		defer stop()
		want := viewOf(t, ref, func() {})
		want.cause, want.childCause = lease.ErrDeadline, lease.ErrDeadline
		check(t, got, want)
		if got.deadline.Before(start) || got.deadline.After(start.Add(300*time.Millisecond)) {
			t.Errorf("Deadline %v not within the budget", got.deadline.Sub(start))
		}
	})

	t.Run("loss", func(t *testing.T) {
		key := uniqueKey(t)
		var got derivedView
		err := c.Do(base, key, spec(300*time.Millisecond, time.Minute), func(fctx context.Context) error {
			got = viewOf(t, fctx, func() { rdb.Del(context.Background(), lockKey(key)) })
			return nil
		})
		mustIs(t, err, lease.ErrLost)
		rctx, rcancel := context.WithCancelCause(base)
		ref, stop := refChain(rctx, got.deadline)
		defer stop()
		lost := errors.New("lost")
		want := viewOf(t, ref, func() { rcancel(fmt.Errorf("%w: %w", lease.ErrLost, lost)) })
		want.cause, want.childCause = lease.ErrLost, lease.ErrLost
		check(t, got, want)
	})
}

// A nested Do on the same key inside fn reuses the lease (same token) and
// its fn's context ends with the outer deadline's Err and Cause.
func TestAdversary35_ReentryUnderTheClocksDeadline(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	var outerTok, innerTok lease.Token
	var innerErr, innerCause error
	err := c.Do(context.Background(), key, spec(2*time.Second, 300*time.Millisecond), func(octx context.Context) error {
		l, _ := lease.FromContext(octx)
		outerTok = l.Token()
		return c.Do(octx, key, spec(2*time.Second, time.Minute), func(ictx context.Context) error {
			il, _ := lease.FromContext(ictx)
			innerTok = il.Token()
			<-ictx.Done()
			innerErr, innerCause = ictx.Err(), context.Cause(ictx)
			return nil
		})
	})
	mustIs(t, err, lease.ErrDeadline)
	if innerTok != outerTok {
		t.Errorf("nested call's token %v; want the outer's %v", innerTok, outerTok)
	}
	if innerErr != context.DeadlineExceeded || !errors.Is(innerCause, lease.ErrDeadline) {
		t.Errorf("nested fn's context: %v, %v; want DeadlineExceeded, ErrDeadline", innerErr, innerCause)
	}
}
