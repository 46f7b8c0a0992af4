package leaseprom_test

// Adversary round 58 on 13d45c1 (EventDone's Entered and Lost; leaseobs
// classifies by them): every path to a call's end, with what EventDone
// says and the outcome leaseprom counts.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

type adv58Rec struct {
	mu   sync.Mutex
	done map[string][]lease.Event
	all  []lease.Event
}

func (r *adv58Rec) Observe(e lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, e)
	if e.Kind == lease.EventDone {
		if r.done == nil {
			r.done = map[string][]lease.Event{}
		}
		r.done[e.Name] = append(r.done[e.Name], e)
	}
}

func (r *adv58Rec) dones(name string) []lease.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lease.Event(nil), r.done[name]...)
}

func (r *adv58Rec) kinds(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, e := range r.all {
		if e.Name == name {
			s = append(s, e.Kind.String())
		}
	}
	return s
}

// adv58New: a Client observed by pre..., the recorder, then leaseprom.
func adv58New(t *testing.T, pre ...lease.Observer) (*prometheus.Registry, *lease.Client, *adv58Rec) {
	t.Helper()
	rec := &adv58Rec{}
	reg, c := adv20New(t, nil, append(pre, rec)...)
	return reg, c, rec
}

// adv58Outcomes: the lease_calls_total outcomes counted for name.
func adv58Outcomes(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fams["lease_calls_total"].GetMetric() {
		if n, o := adv57NameOutcome(m); n == name && m.GetCounter().GetValue() > 0 {
			out[o] += m.GetCounter().GetValue()
		}
	}
	return out
}

func adv58ForceRelease(ctx context.Context, c *lease.Client, key string) error {
	info, err := c.Inspect(ctx, key)
	if err != nil {
		return err
	}
	_, err = c.ForceRelease(ctx, key, info.Holder)
	return err
}

// adv58Check asserts the last EventDone of name and its outcome.
func adv58Check(t *testing.T, reg *prometheus.Registry, rec *adv58Rec, name string, err error, wantEntered, wantLost bool, wantOutcome string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // a late event changes nothing, but let it land
	ds := rec.dones(name)
	if len(ds) == 0 {
		t.Fatalf("%s: no EventDone", name)
	}
	d := ds[len(ds)-1]
	fams := adv20Gather(t, reg)
	outs := adv58Outcomes(fams, name)
	t.Logf("%s: Do = %v", name, err)
	t.Logf("%s: EventDone Entered=%v Lost=%v Reentered=%v errors.Is(Err, ErrLost)=%v; outcomes %v; events %v", name, d.Entered, d.Lost, d.Reentered, errors.Is(d.Err, lease.ErrLost), outs, rec.kinds(name))
	if d.Entered != wantEntered {
		t.Errorf("%s: EventDone.Entered = %v, want %v", name, d.Entered, wantEntered)
	}
	if d.Lost != wantLost {
		t.Errorf("%s: EventDone.Lost = %v, want %v", name, d.Lost, wantLost)
	}
	if d.Lost && !errors.Is(d.Err, lease.ErrLost) {
		t.Errorf("%s: Lost without ErrLost in Err (%v)", name, d.Err)
	}
	if outs[wantOutcome] < 1 {
		t.Errorf("%s: lease_calls_total outcomes %v, want %s", name, outs, wantOutcome)
	}
}

// Renewal finds the key force-released while fn runs.
func TestAdversary58_RenewalRefused(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-rr-%d", time.Now().UnixNano())
	err := c.Do(context.Background(), key, lease.Spec{Name: "rr", TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, HoldMin: 100 * time.Millisecond}, func(ctx context.Context) error {
		if err := adv58ForceRelease(ctx, c, key); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("setup: Do = %v", err)
	}
	adv58Check(t, reg, rec, "rr", err, true, true, "lost")
}

// fn goes past its deadline (renewals stop there) and the validity.
func TestAdversary58_OverrunPastDeadline(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-ov-%d", time.Now().UnixNano())
	err := c.Do(context.Background(), key, lease.Spec{Name: "ov", TTL: 300 * time.Millisecond, Deadline: 400 * time.Millisecond}, func(ctx context.Context) error {
		time.Sleep(900 * time.Millisecond)
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("setup: Do = %v", err)
	}
	adv58Check(t, reg, rec, "ov", err, true, true, "lost")
}

// The key is force-released during fn, which returns before any renewal
// or notice: the release finds it.
func TestAdversary58_LossAtRelease(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-rel-%d", time.Now().UnixNano())
	err := c.Do(context.Background(), key, lease.Spec{Name: "rel", TTL: 10 * time.Second, Deadline: 20 * time.Second}, func(ctx context.Context) error {
		return adv58ForceRelease(ctx, c, key)
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("setup: Do = %v", err)
	}
	adv58Check(t, reg, rec, "rel", err, true, true, "lost")
}

// A nested call on the same key (reentered) while the lease is lost.
func TestAdversary58_ReenteredOuterLost(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-ro-%d", time.Now().UnixNano())
	var inner error
	err := c.Do(context.Background(), key, lease.Spec{Name: "ro-outer", TTL: 600 * time.Millisecond, Deadline: 5 * time.Second}, func(ctx context.Context) error {
		inner = c.Do(ctx, key, lease.Spec{Name: "ro-inner", TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, MinValidity: 10 * time.Millisecond}, func(ctx context.Context) error {
			if err := adv58ForceRelease(ctx, c, key); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		})
		return inner
	})
	if !errors.Is(err, lease.ErrLost) || !errors.Is(inner, lease.ErrLost) {
		t.Fatalf("setup: Do = %v, inner %v", err, inner)
	}
	adv58Check(t, reg, rec, "ro-inner", inner, true, true, "lost")
	adv58Check(t, reg, rec, "ro-outer", err, true, true, "lost")
}

// A reentered call in a goroutine outlives its enclosing call.
func TestAdversary58_ReenteredOuterReturned(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-rr2-%d", time.Now().UnixNano())
	in := make(chan struct{})
	res := make(chan error, 1)
	err := c.Do(context.Background(), key, lease.Spec{Name: "rr2-outer", TTL: 5 * time.Second, Deadline: 10 * time.Second}, func(ctx context.Context) error {
		go func() {
			res <- c.Do(context.WithoutCancel(ctx), key, lease.Spec{Name: "rr2-inner", TTL: 5 * time.Second, Deadline: 10 * time.Second, MinValidity: 10 * time.Millisecond}, func(ctx context.Context) error {
				close(in)
				<-ctx.Done()
				return nil
			})
		}()
		<-in
		return nil
	})
	if err != nil {
		t.Fatalf("setup: outer Do = %v", err)
	}
	inner := <-res
	if !errors.Is(inner, lease.ErrLost) {
		t.Fatalf("setup: inner Do = %v", inner)
	}
	adv58Check(t, reg, rec, "rr2-inner", inner, true, true, "lost")
	adv58Check(t, reg, rec, "rr2-outer", err, true, false, "granted")
}

// A leader term whose lease is force-released.
func TestAdversary58_LeaderTermLost(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-lead-%d", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var termErr error
	err := c.Lead(ctx, key, lease.LeadSpec{Name: "lead", TTL: 600 * time.Millisecond}, func(tctx context.Context) error {
		defer cancel()
		if err := adv58ForceRelease(tctx, c, key); err != nil {
			return err
		}
		<-tctx.Done()
		termErr = context.Cause(tctx)
		return termErr
	})
	if err != nil || !errors.Is(termErr, lease.ErrLost) {
		t.Fatalf("setup: Lead = %v, term ctx cause %v", err, termErr)
	}
	ds := rec.dones("lead")
	adv58Check(t, reg, rec, "lead", ds[0].Err, true, true, "lost")
	if len(ds) != 1 {
		t.Logf("%d terms/campaigns: %v", len(ds), ds)
	}
}

// A kept lease (second call of a keep) lost while its call's fn runs.
func TestAdversary58_KeptLostDuringCall(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-kd-%d", time.Now().UnixNano())
	s := lease.Spec{Name: "kd", TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Keep: 5 * time.Second, MinValidity: 50 * time.Millisecond}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		if err := adv58ForceRelease(ctx, c, key); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("setup: Do = %v", err)
	}
	adv58Check(t, reg, rec, "kd", err, true, true, "lost")
}

// A call takes a lease the Client kept (Spec.Keep), and the key is
// force-released before its entry check: not entered, and Do's error
// wraps both ErrLowValidity and ErrLost (the call's own kept lease, as
// Spec.Keep says). EventDone's Lost is set and the call counts as lost,
// as before 13d45c1 (which counted it low_validity: round 58).
func TestAdversary58_KeptLostBeforeEntry(t *testing.T) {
	var cl *lease.Client
	var once sync.Once
	lostSeen := make(chan struct{})
	var lostOnce sync.Once
	seen := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventLost && e.Name == "kb" {
			lostOnce.Do(func() { close(lostSeen) })
		}
	})
	stall := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Kept && e.Name == "kb" {
			once.Do(func() {
				if err := adv58ForceRelease(context.Background(), cl, e.Key); err != nil {
					panic(err)
				}
				select { // the notice (or a renewal) finds the loss
				case <-lostSeen:
				case <-time.After(10 * time.Second):
				}
			})
		}
	})
	reg, c, rec := adv58New(t, seen, stall)
	cl = c
	key := fmt.Sprintf("adv58-kb-%d", time.Now().UnixNano())
	s := lease.Spec{Name: "kb", TTL: 20 * time.Second, Deadline: 30 * time.Second, Keep: 20 * time.Second, MinValidity: 50 * time.Millisecond}
	if err := c.Do(context.Background(), key, s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	entered := false
	err := c.Do(context.Background(), key, s, func(ctx context.Context) error { entered = true; return nil })
	if entered || !errors.Is(err, lease.ErrLost) || !errors.Is(err, lease.ErrLowValidity) {
		t.Fatalf("setup: Do = %v, entered %v (want ErrLost and ErrLowValidity, not entered)", err, entered)
	}
	adv58Check(t, reg, rec, "kb", err, false, true, "lost")
}

// A reentered call refused before its fn (Spec.Fence on an unfenced
// enclosing lease): fn never ran.
func TestAdversary58_ReenteredRefusedCountsError(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-rf-%d", time.Now().UnixNano())
	var inner error
	innerRan := false
	err := c.Do(context.Background(), key, lease.Spec{Name: "rf-outer", TTL: 5 * time.Second, Deadline: 10 * time.Second}, func(ctx context.Context) error {
		inner = c.Do(ctx, key, lease.Spec{Name: "rf-inner", TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}, func(context.Context) error {
			innerRan = true
			return nil
		})
		return nil
	})
	if err != nil || inner == nil || innerRan {
		t.Fatalf("setup: Do = %v, inner %v, ran %v", err, inner, innerRan)
	}
	adv58Check(t, reg, rec, "rf-inner", inner, false, false, "error")
}

// A reentered call that starts after its enclosing budget ended, on a
// context that hides it: ErrDeadline, not entered.
func TestAdversary58_ReenteredNoTimeCountsDeadline(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-nt-%d", time.Now().UnixNano())
	var inner error
	innerRan := false
	_ = c.Do(context.Background(), key, lease.Spec{Name: "nt-outer", TTL: 5 * time.Second, Deadline: 300 * time.Millisecond}, func(ctx context.Context) error {
		time.Sleep(350 * time.Millisecond) // past its budget, within validity
		inner = c.Do(context.WithoutCancel(ctx), key, lease.Spec{Name: "nt-inner", TTL: 5 * time.Second, Deadline: 10 * time.Second, MinValidity: 10 * time.Millisecond}, func(context.Context) error {
			innerRan = true
			return nil
		})
		return nil
	})
	if !errors.Is(inner, lease.ErrDeadline) || innerRan {
		t.Fatalf("setup: inner %v, ran %v", inner, innerRan)
	}
	ds := rec.dones("nt-inner")
	if len(ds) == 0 || !ds[0].Reentered {
		t.Fatalf("setup: inner not reentered: %v", ds)
	}
	adv58Check(t, reg, rec, "nt-inner", inner, false, false, "deadline")
}

// Outcomes that were right before: busy, skipped, deadline.
func TestAdversary58_UnchangedOutcomes(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-un-%d", time.Now().UnixNano())
	err := c.Do(context.Background(), key, lease.Spec{Name: "holder", TTL: 5 * time.Second, Deadline: 10 * time.Second}, func(ctx context.Context) error {
		busy := c.Do(context.WithoutCancel(context.Background()), key, lease.Spec{Name: "busy", TTL: 5 * time.Second, Deadline: 2 * time.Second}, func(context.Context) error { return nil })
		skip := c.Do(context.Background(), key, lease.Spec{Name: "skip", TTL: 5 * time.Second, Deadline: 2 * time.Second, Busy: lease.BusySkip}, func(context.Context) error { return nil })
		adv58Check(t, reg, rec, "busy", busy, false, false, "busy")
		adv58Check(t, reg, rec, "skip", skip, false, false, "skipped")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dl := c.Do(context.Background(), key, lease.Spec{Name: "dl", TTL: 5 * time.Second, Deadline: 200 * time.Millisecond}, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	adv58Check(t, reg, rec, "dl", dl, true, false, "deadline")
}

// A nested Do on the same key with the enclosing fn's context after the
// enclosing lease was lost: not attempted, its error wraps ErrLost (the
// context's cause); fn never ran.
func TestAdversary58_NestedAfterOuterLossNotStarted(t *testing.T) {
	reg, c, rec := adv58New(t)
	key := fmt.Sprintf("adv58-ns-%d", time.Now().UnixNano())
	var inner error
	err := c.Do(context.Background(), key, lease.Spec{Name: "ns-outer", TTL: 600 * time.Millisecond, Deadline: 5 * time.Second}, func(ctx context.Context) error {
		if err := adv58ForceRelease(ctx, c, key); err != nil {
			return err
		}
		<-ctx.Done()
		inner = c.Do(ctx, key, lease.Spec{Name: "ns-inner", TTL: 600 * time.Millisecond, Deadline: 5 * time.Second}, func(context.Context) error { return nil })
		return nil
	})
	if !errors.Is(err, lease.ErrLost) || !errors.Is(inner, lease.ErrLost) {
		t.Fatalf("setup: Do = %v, inner %v", err, inner)
	}
	adv58Check(t, reg, rec, "ns-inner", inner, false, false, "lost")
}

// A Redis restart (no persistence) under a running call: the renewal
// finds the key gone.
func TestAdversary58_RestartLost(t *testing.T) {
	s := leasetest.StartRedis(t)
	rec := &adv58Rec{}
	reg, c := adv20New(t, s.Client(t), rec)
	key := fmt.Sprintf("adv58-rs-%d", time.Now().UnixNano())
	err := c.Do(context.Background(), key, lease.Spec{Name: "rs", TTL: 900 * time.Millisecond, Deadline: 10 * time.Second}, func(ctx context.Context) error {
		if err := s.Restart(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("setup: Do = %v", err)
	}
	adv58Check(t, reg, rec, "rs", err, true, true, "lost")
}
