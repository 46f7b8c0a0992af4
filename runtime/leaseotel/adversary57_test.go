package leaseotel_test

// Adversary round 57 (observability): a finding, failing before its fix.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// An outer call whose lease held to the end returns the ErrLost of a
// nested call on another key. leaseotel.go:39-41: ""granted" means the
// function ran under a lease that held to the end: a call whose function
// returned an error is still "granted" (the lease did its job), with
// status Error and the error's error.type." The outer span gets
// lease.outcome=lost, error.type=lost and a made-up "lease.lost" event,
// and lease.calls counts it lost.
func TestAdversary57_NestedOtherKeyLostLeavesOuterSpanGranted(t *testing.T) {
	h := newHarness(t, nil)
	c := h.c
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
	if !errors.Is(outerErr, lease.ErrLost) {
		t.Fatalf("setup: outer Do = %v", outerErr)
	}
	outer := h.call("outer")
	wantAttrs(t, outer, "lease.outcome=granted")
	if slices.Contains(eventNames(outer), "lease.lost") {
		t.Errorf("outer span has a lease.lost event (events %v), but its lease was never lost", eventNames(outer))
	}
	h.wantValue("lease.calls", 1, "lease.name=outer", "lease.outcome=granted")
	h.wantValue("lease.calls", 0, "lease.name=outer", "lease.outcome=lost")
}
