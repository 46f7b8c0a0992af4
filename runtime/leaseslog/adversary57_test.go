package leaseslog_test

// Adversary round 57 (observability): a finding, failing before its fix.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseslog"
)

// The outer call's lease held to the end; its fn returned the ErrLost of a
// nested call on another key. README "Observe it": the outcome "describes
// the lease, so a call whose function returned an error under a lease that
// held is granted". leaseslog logs the outer call's "lease done" with
// outcome=lost.
func TestAdversary57_NestedOtherKeyLostLogsOuterGranted(t *testing.T) {
	var buf syncBuffer
	obs := leaseslog.New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
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
	if !errors.Is(outerErr, lease.ErrLost) {
		t.Fatalf("setup: outer Do = %v", outerErr)
	}
	found := false
	for _, r := range buf.records(t) {
		if r.Msg == "lease done" && r.Lease.Name == "outer" {
			found = true
			if r.Lease.Outcome != "granted" {
				t.Errorf("outer call's \"lease done\": outcome=%q, want granted (its lease held; only the nested one on %s was lost)", r.Lease.Outcome, innerKey)
			}
		}
		if r.Msg == "lease lost" && r.Lease.Name == "outer" {
			t.Errorf("a \"lease lost\" record for the outer call: %+v", r)
		}
	}
	if !found {
		t.Fatal("no \"lease done\" record for the outer call")
	}
}
