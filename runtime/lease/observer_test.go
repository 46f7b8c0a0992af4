package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type callKey struct{}

// callObs marks each call's context and records the events it sees.
type callObs struct {
	mu      sync.Mutex
	starts  int
	events  []lease.Event
	renewed chan struct{} // if set, closed at the first EventRenewed
}

func (o *callObs) StartCall(ctx context.Context, key string, s lease.Spec) context.Context {
	o.mu.Lock()
	o.starts++
	o.mu.Unlock()
	return context.WithValue(ctx, callKey{}, s.Name+"|"+key)
}

func (o *callObs) Observe(e lease.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	if e.Kind == lease.EventRenewed && o.renewed != nil {
		close(o.renewed)
		o.renewed = nil
	}
	o.mu.Unlock()
}

// A CallObserver's context becomes the call's: fn runs under it and every
// event of the call carries it, with the spec's name and the timings.
func TestCallObserverContextReachesFnAndEvents(t *testing.T) {
	t.Parallel()
	renewed := make(chan struct{})
	obs := &callObs{renewed: renewed}
	c, _ := sharedClient(t, lease.WithObserver(lease.Observers{obs, lease.ObserverFunc(func(lease.Event) {})}))
	key := uniqueKey(t)
	// fn runs until a renewal has fallen in (the first is due at TTL/3),
	// not for a fixed time: a fixed sleep close to the TTL lost the lease
	// when the renewal's round trip was slow on a loaded machine. The TTL
	// leaves the renewal two thirds of it to be confirmed.
	s := lease.Spec{TTL: 1500 * time.Millisecond, Deadline: 5 * time.Second, Name: "orders.(*Server).charge"}
	want := s.Name + "|" + key
	var ran time.Duration
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		start := time.Now()
		defer func() { ran = time.Since(start) }()
		if got, _ := ctx.Value(callKey{}).(string); got != want {
			t.Errorf("fn's ctx value %q, want %q", got, want)
		}
		select {
		case <-renewed:
		case <-ctx.Done():
			t.Errorf("fn's ctx ended before a renewal: %v", context.Cause(ctx))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.starts != 1 {
		t.Fatalf("StartCall called %d times", obs.starts)
	}
	kinds := map[lease.EventKind]lease.Event{}
	for _, e := range obs.events {
		if got, _ := e.Ctx.Value(callKey{}).(string); got != want || e.Name != s.Name {
			t.Errorf("%v: ctx value %q name %q", e.Kind, got, e.Name)
		}
		kinds[e.Kind] = e
	}
	for _, k := range []lease.EventKind{lease.EventAcquired, lease.EventRenewed, lease.EventReleased, lease.EventDone} {
		if _, ok := kinds[k]; !ok {
			t.Errorf("no %v event", k)
		}
	}
	// Held runs from entry to the release: at least as long as fn ran.
	if r := kinds[lease.EventReleased]; r.Took <= 0 || r.Held < ran {
		t.Errorf("released: Took %v Held %v (fn ran %v)", r.Took, r.Held, ran)
	}
	if r := kinds[lease.EventRenewed]; r.Took <= 0 {
		t.Errorf("renewed: Took %v", r.Took)
	}
}

// Observers built from a list that holds a nil entry (an optional adapter
// left unset: lease.Observers{prom, otel} with otel nil, or a nil
// ObserverFunc) skip it: a call does not panic inside Do, and the other
// observers still hear every event.
func TestObserversSkipNilEntries(t *testing.T) {
	var nilFunc lease.ObserverFunc
	var nilObs lease.Observer
	obs := &callObs{}
	c, _ := sharedClient(t, lease.WithObserver(lease.Observers{nilObs, nilFunc, obs}))
	key := uniqueKey(t)
	if err := c.Do(context.Background(), key, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second}, nop); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.starts != 1 {
		t.Errorf("StartCall ran %d times, want 1", obs.starts)
	}
	var done int
	for _, e := range obs.events {
		if e.Kind == lease.EventDone {
			done++
		}
	}
	if done != 1 {
		t.Errorf("the observer after the nil entries saw %d EventDone, want 1 (events %v)", done, obs.events)
	}
	// A nil ObserverFunc alone is refused by New, as WithObserver(nil) is.
	if _, err := lease.New(shared.Client(t), lease.WithObserver(nilFunc)); err == nil {
		t.Error("New accepted WithObserver(a nil ObserverFunc)")
	}
}
