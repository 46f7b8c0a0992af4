package lease_test

// Adversarial tests, round 20 (observability): the Observer/CallObserver
// contract of runtime/lease against real redis-server processes and fault
// proxies.
// Run: go test ./runtime/lease -run Adversary20 -race -count=1 -v

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

type adv20CallID struct{}

type adv20Call struct {
	id     int64
	key    string
	spec   lease.Spec
	events []lease.Event
	doneAt int // index of EventDone, -1 before
	dones  int
}

// adv20Obs is a CallObserver that files each event under its call.
type adv20Obs struct {
	mu     sync.Mutex
	next   int64
	calls  map[int64]*adv20Call
	orphan []lease.Event // events whose ctx names no call (subscription failures)
	total  atomic.Int64
}

func newAdv20Obs() *adv20Obs { return &adv20Obs{calls: map[int64]*adv20Call{}} }

func (o *adv20Obs) StartCall(ctx context.Context, key string, spec lease.Spec) context.Context {
	o.mu.Lock()
	o.next++
	id := o.next
	o.calls[id] = &adv20Call{id: id, key: key, spec: spec, doneAt: -1}
	o.mu.Unlock()
	return context.WithValue(ctx, adv20CallID{}, id)
}

func (o *adv20Obs) Observe(e lease.Event) {
	o.total.Add(1)
	if e.Ctx == nil {
		panic("event with nil Ctx")
	}
	id, _ := e.Ctx.Value(adv20CallID{}).(int64)
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.calls[id]
	if c == nil {
		o.orphan = append(o.orphan, e)
		return
	}
	if e.Kind == lease.EventDone {
		c.dones++
		if c.doneAt < 0 {
			c.doneAt = len(c.events)
		}
	}
	c.events = append(c.events, e)
}

func (o *adv20Obs) byCtx(ctx context.Context) *adv20Call {
	id, _ := ctx.Value(adv20CallID{}).(int64)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[id]
}

// check verifies each call: one EventDone; EventLost before it (except a
// kept lease's, which may come after); after it only renewal events, and
// for a kept lease its loss and release.
func (o *adv20Obs) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.calls {
		if c.dones != 1 {
			t.Errorf("call %d (%s) has %d EventDone: %v", c.id, c.key, c.dones, adv20Kinds(c.events))
			continue
		}
		for i, e := range c.events {
			if e.Key != c.key || e.Name != c.spec.Name {
				t.Errorf("call %d: event %v carries key %q name %q, want %q %q", c.id, e.Kind, e.Key, e.Name, c.key, c.spec.Name)
			}
			if i <= c.doneAt {
				continue
			}
			switch e.Kind {
			case lease.EventRenewed, lease.EventRenewFailed:
			case lease.EventLost, lease.EventReleased, lease.EventReleaseUnconfirmed:
				if c.spec.Keep == 0 {
					t.Errorf("call %d (%s, not kept): %v after EventDone: %v", c.id, c.key, e.Kind, adv20Kinds(c.events))
				}
			default:
				t.Errorf("call %d (%s): %v after EventDone: %v", c.id, c.key, e.Kind, adv20Kinds(c.events))
			}
		}
	}
}

func adv20Kinds(es []lease.Event) []string {
	var s []string
	for _, e := range es {
		s = append(s, e.Kind.String())
	}
	return s
}

// Many goroutines, contention, losses, fn panics and errors, nested calls,
// kept leases, BusySkip, a proxy delaying then blackholing then passing
// replies: each call gets one EventDone with the error Do returned, its
// EventLost (if any) before it, and Do's ErrLost implies an EventLost.
// After Close and all calls returned, no more events come.
func TestAdversary20EventContractUnderFaults(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	obs := newAdv20Obs()
	c, err := lease.New(srv.Client(t, func(o *redis.Options) { o.Addr = p.Addr() }), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	direct := srv.Client(t)
	type ret struct {
		ctx context.Context
		err error
	}
	var mu sync.Mutex
	var rets []ret
	record := func(ctx context.Context, err error) {
		mu.Lock()
		rets = append(rets, ret{ctx, err})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("adv20-ev-%d", i%10)
			s := lease.Spec{Name: fmt.Sprintf("n%d", i%3), TTL: 300 * time.Millisecond, Deadline: 1500 * time.Millisecond, Wait: time.Duration(i%3) * 150 * time.Millisecond}
			if i%5 == 0 {
				s.Keep = time.Second
			}
			if i%7 == 0 {
				s.Busy = lease.BusySkip
			}
			var fnCtx context.Context
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						err = errors.New("panicked")
					}
				}()
				err = c.Do(context.Background(), key, s, func(ctx context.Context) error {
					fnCtx = ctx
					switch i % 6 {
					case 1:
						panic("fn panics")
					case 2:
						return errors.New("fn failed")
					case 3:
						_ = direct.Del(context.Background(), "lease:{"+key+"}:l").Err()
						select {
						case <-ctx.Done():
						case <-time.After(time.Second):
						}
					case 4:
						err := c.Do(ctx, key, lease.Spec{Name: "nested", TTL: time.Second, Deadline: time.Second}, func(ictx context.Context) error {
							return nil
						})
						_ = err
					default:
						time.Sleep(30 * time.Millisecond)
					}
					return nil
				})
			}()
			if fnCtx != nil && err != nil && err.Error() != "panicked" {
				record(fnCtx, err)
			}
		}()
		switch i {
		case 25:
			p.SetDelay(120 * time.Millisecond)
		case 50:
			p.Set(leasetest.Blackhole)
			time.AfterFunc(400*time.Millisecond, func() { p.Set(leasetest.Pass) })
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	c.Close()
	time.Sleep(200 * time.Millisecond)
	n0 := obs.total.Load()
	time.Sleep(700 * time.Millisecond)
	if n1 := obs.total.Load(); n1 != n0 {
		t.Errorf("%d events after Close and every call returned", n1-n0)
	}
	obs.check(t)
	obs.mu.Lock()
	var nLost, nKept, nDone int
	for _, call := range obs.calls {
		for _, e := range call.events {
			switch {
			case e.Kind == lease.EventLost:
				nLost++
			case e.Kind == lease.EventAcquired && e.Kept:
				nKept++
			case e.Kind == lease.EventDone:
				nDone++
			}
		}
	}
	obs.mu.Unlock()
	t.Logf("%d calls, %d EventDone, %d EventLost, %d kept acquires, %d failing returns checked", len(obs.calls), nDone, nLost, nKept, len(rets))

	// Do's error is EventDone's; ErrLost implies an EventLost before EventDone.
	for _, r := range rets {
		call := obs.byCtx(r.ctx)
		if call == nil {
			t.Errorf("fn's ctx names no call")
			continue
		}
		obs.mu.Lock()
		done := call.events[call.doneAt]
		lostBefore := false
		for _, e := range call.events[:call.doneAt] {
			lostBefore = lostBefore || e.Kind == lease.EventLost
		}
		obs.mu.Unlock()
		if done.Err != r.err {
			t.Errorf("call %d: EventDone.Err %v, Do returned %v", call.id, done.Err, r.err)
		}
		if errors.Is(r.err, lease.ErrLost) && !lostBefore {
			t.Errorf("call %d: Do returned ErrLost without an EventLost before EventDone: %v", call.id, adv20Kinds(call.events))
		}
	}
}

// An Observer that calls Close from Observe (documented as allowed): no
// deadlock, every call still ends with EventDone.
func TestAdversary20ObserverClosesClient(t *testing.T) {
	obs := newAdv20Obs()
	var c *lease.Client
	var closed atomic.Bool
	closer := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && closed.CompareAndSwap(false, true) {
			c.Close()
		}
	})
	var err error
	c, err = lease.New(shared.Client(t), lease.WithObserver(lease.Observers{obs, closer}))
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), key, lease.Spec{Name: "x", TTL: time.Second, Deadline: 2 * time.Second, Keep: time.Second}, func(context.Context) error { return nil })
	}()
	select {
	case err := <-done:
		// Close at EventAcquired takes the grant before fn is entered and
		// releases it itself: the call returns ErrClosed (round 34,
		// TestAdversary34_CloseFromObserverAtHandoverGrant).
		if !errors.Is(err, lease.ErrClosed) {
			t.Errorf("Do: %v, want ErrClosed (Close came before fn was entered)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do with an Observer calling Close did not return")
	}
	if err := c.Do(context.Background(), key, lease.Spec{Name: "x", TTL: time.Second, Deadline: 2 * time.Second}, func(context.Context) error { return nil }); !errors.Is(err, lease.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	obs.check(t)
	// The kept lease must not be left: Close released it or the call did.
	if n, _ := shared.Client(t).Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Errorf("lease left on the server after Close from the Observer")
	}
}

// An Observer that panics on EventAcquired: the runtime promises nothing
// (Observer's doc says nothing of panics). Observed: the panic reaches Do's
// caller, an EventDone (errPanicked) is still delivered, and the grant is
// left to its TTL. This test asserts that the key frees within the TTL
// and the EventDone arrives, i.e. no worse than a crashed holder.
func TestAdversary20ObserverPanicsOnAcquired(t *testing.T) {
	obs := newAdv20Obs()
	var once atomic.Bool
	panicky := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && once.CompareAndSwap(false, true) {
			panic("observer panics")
		}
	})
	c, err := lease.New(shared.Client(t), lease.WithObserver(lease.Observers{obs, panicky}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := uniqueKey(t)
	var rec any
	func() {
		defer func() { rec = recover() }()
		_ = c.Do(context.Background(), key, lease.Spec{Name: "p", TTL: 300 * time.Millisecond, Deadline: time.Second}, func(context.Context) error {
			t.Error("fn entered")
			return nil
		})
	}()
	if rec == nil {
		t.Fatal("the Observer's panic did not reach the caller")
	}
	obs.check(t)
	time.Sleep(400 * time.Millisecond)
	if n, _ := shared.Client(t).Exists(context.Background(), lockKey(key)).Result(); n != 0 {
		t.Errorf("lease still on the server after its TTL: renewed after a panicking Observer")
	}
	// The Client still works.
	if err := c.Do(context.Background(), key, lease.Spec{Name: "p2", TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after the Observer's panic: %v", err)
	}
}

// The same with a kept lease: an Observer that panics on the EventAcquired
// of a call that took the lease its Client kept. The panic reaches the
// caller and the lease is left as a crashed holder's would be: it is not
// renewed for longer than it would have been kept, so the key frees
// within Keep + TTL, and the Client goes on working.
func TestAdversary20ObserverPanicsOnKeptAcquired(t *testing.T) {
	var armed atomic.Bool
	panicky := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Kept && armed.CompareAndSwap(true, false) {
			panic("observer panics")
		}
	})
	c, err := lease.New(shared.Client(t), lease.WithObserver(panicky))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := uniqueKey(t)
	ctx := context.Background()
	sp := lease.Spec{TTL: 300 * time.Millisecond, Deadline: time.Second, Keep: 500 * time.Millisecond}
	if err := c.Do(ctx, key, sp, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	var rec any
	func() {
		defer func() { rec = recover() }()
		_ = c.Do(ctx, key, sp, func(context.Context) error {
			t.Error("fn entered")
			return nil
		})
	}()
	if rec == nil {
		t.Fatal("the Observer's panic did not reach the caller (was the kept lease not taken?)")
	}
	panicked := time.Now()
	admin := shared.Client(t)
	for admin.Exists(ctx, lockKey(key)).Val() != 0 {
		if time.Since(panicked) > sp.Keep+sp.TTL+500*time.Millisecond {
			t.Fatalf("key still held %v after the panic: renewed past Keep + TTL", time.Since(panicked).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Do(ctx, key, sp, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after the Observer's panic: %v", err)
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v after the panic", d)
	}
}
