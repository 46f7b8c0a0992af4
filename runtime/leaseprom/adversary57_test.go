package leaseprom_test

// Adversary round 57 (observability): findings, each failing before its
// fix.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseprom"
)

// An outer call on key A whose lease held to the end runs a nested call on
// another key B; B's lease is force-released, so the nested Do returns
// ErrLost, and fn returns that error (wrapped). The outer lease was never
// lost (no EventLost for the outer call).
//
// leaseprom.go:26-27: "A call whose function returned an error under a
// lease that held is "granted": the outcome describes the lease."
// internal/leaseobs/leaseobs.go:285-287: "A granted call is otherwise
// Granted whatever fn returned (even an error wrapping ErrBusy from a
// nested call on another key)".
func TestAdversary57_NestedOtherKeyLostCountsOuterGranted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := leaseprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var outerLostEvents int
	watch := lease.ObserverFunc(func(e lease.Event) {
		if e.Name == "outer" && e.Kind == lease.EventLost {
			outerLostEvents++
		}
	})
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.Observers{watch, obs}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uniq := time.Now().UnixNano()
	outerKey, innerKey := fmt.Sprintf("adv57-outer-%d", uniq), fmt.Sprintf("adv57-inner-%d", uniq)
	outerErr := c.Do(context.Background(), outerKey, lease.Spec{Name: "outer", TTL: 10 * time.Second, Deadline: 20 * time.Second}, func(ctx context.Context) error {
		innerErr := c.Do(ctx, innerKey, lease.Spec{Name: "inner", TTL: 600 * time.Millisecond, Deadline: 10 * time.Second}, func(ictx context.Context) error {
			info, err := c.Inspect(ictx, innerKey)
			if err != nil {
				return err
			}
			if _, err := c.ForceRelease(ictx, innerKey, info.Holder); err != nil {
				return err
			}
			<-ictx.Done()
			return nil
		})
		if !errors.Is(innerErr, lease.ErrLost) {
			return fmt.Errorf("setup: inner Do = %v, want ErrLost", innerErr)
		}
		return fmt.Errorf("charging order: %w", innerErr)
	})
	if !errors.Is(outerErr, lease.ErrLost) || outerLostEvents != 0 {
		t.Fatalf("setup: outer Do = %v, outer EventLost %d (want the inner's ErrLost, no outer loss)", outerErr, outerLostEvents)
	}
	fams := adv20Gather(t, reg)
	wantCounter(t, fams, "lease_calls_total", 1, "lease_name=inner", "lease_outcome=lost")
	wantCounter(t, fams, "lease_calls_total", 1, "lease_name=outer", "lease_outcome=granted")
	wantCounter(t, fams, "lease_calls_total", 0, "lease_name=outer", "lease_outcome=lost")
	wantHistogramCount(t, fams, "lease_hold_duration_seconds", 0, "lease_name=outer", "lease_outcome=lost")
}

// The service shuts down (Close) while a call has been granted but has not
// entered fn yet: observer.go:14 documents the sequence "EventAcquired
// granted, fn entered next (unless ... or the Client was closed first:
// EventDone with ErrClosed)", and Do returns ErrClosed ("the Client was
// closed before the function was entered (Close released the lease)"); fn
// never runs. Here the Close comes from an Observer on EventAcquired
// (observer.go:84-85: "it may call any method of the Client, Close
// included").
//
// README "Observe it": "granted" is a call whose function ran under a
// lease that held; internal/leaseobs/leaseobs.go:32: Error is "any other
// failure: ... the Client closed". leaseprom counts the call granted and
// records a granted hold for a function that never ran.
func TestAdversary57_CloseBeforeEntryCountsError(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := leaseprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var c *lease.Client
	closer := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Name == "shutdown" {
			c.Close()
		}
	})
	c, err = lease.New(srv.Client(t), lease.WithObserver(lease.Observers{closer, obs}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var entered atomic.Bool
	key := fmt.Sprintf("adv57-shutdown-%d", time.Now().UnixNano())
	err = c.Do(context.Background(), key, lease.Spec{Name: "shutdown", TTL: 5 * time.Second, Deadline: 10 * time.Second},
		func(context.Context) error { entered.Store(true); return nil })
	if !errors.Is(err, lease.ErrClosed) || entered.Load() {
		t.Fatalf("setup: Do = %v, entered %v; want ErrClosed, not entered", err, entered.Load())
	}
	t.Logf("Do = %v", err)
	fams := adv20Gather(t, reg)
	wantCounter(t, fams, "lease_calls_total", 0, "lease_name=shutdown", "lease_outcome=granted")
	wantCounter(t, fams, "lease_calls_total", 1, "lease_name=shutdown", "lease_outcome=error")
	adv57NoGrantedHold(t, fams, "shutdown")
	wantCounter(t, fams, "lease_active", 0, "lease_name=shutdown")
}

// The same with Close from another goroutine (a service shutting down)
// while a slow Observer delays entry after EventAcquired.
func TestAdversary57_ConcurrentCloseBeforeEntryCountsError(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := leaseprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan struct{}, 1)
	slow := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired && e.Name == "shutdown2" {
			acquired <- struct{}{}
			time.Sleep(300 * time.Millisecond)
		}
	})
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.Observers{slow, obs}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { <-acquired; c.Close() }()
	var entered atomic.Bool
	key := fmt.Sprintf("adv57-shutdown2-%d", time.Now().UnixNano())
	err = c.Do(context.Background(), key, lease.Spec{Name: "shutdown2", TTL: 5 * time.Second, Deadline: 10 * time.Second},
		func(context.Context) error { entered.Store(true); return nil })
	if !errors.Is(err, lease.ErrClosed) || entered.Load() {
		t.Fatalf("setup: Do = %v, entered %v; want ErrClosed, not entered", err, entered.Load())
	}
	t.Logf("Do = %v", err)
	fams := adv20Gather(t, reg)
	wantCounter(t, fams, "lease_calls_total", 0, "lease_name=shutdown2", "lease_outcome=granted")
	wantCounter(t, fams, "lease_calls_total", 1, "lease_name=shutdown2", "lease_outcome=error")
	adv57NoGrantedHold(t, fams, "shutdown2")
}

// adv57NoGrantedHold checks that no granted hold was recorded for name
// (the histogram may have no series at all).
func adv57NoGrantedHold(t *testing.T, fams map[string]*dto.MetricFamily, name string) {
	t.Helper()
	for _, m := range fams["lease_hold_duration_seconds"].GetMetric() {
		if n, o := adv57NameOutcome(m); n == name && o == "granted" && m.GetHistogram().GetSampleCount() > 0 {
			t.Errorf("a granted hold of %s recorded (%d samples) for a function that never ran", name, m.GetHistogram().GetSampleCount())
		}
	}
}

// adv57NameOutcome returns m's lease_name and lease_outcome labels.
func adv57NameOutcome(m *dto.Metric) (name, outcome string) {
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "lease_name":
			name = l.GetValue()
		case "lease_outcome":
			outcome = l.GetValue()
		}
	}
	return name, outcome
}
