package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A renewal whose GET an ACL refuses is refused (the user lacks +get),
// not a key "overwritten from outside": the renewal scripts took every
// error of GET for a value of another type. The refusal names GET (Redis's
// answer to a script's pcall does not).
func TestRenewalRefusedGetIsARefusal(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, rec := newClient(t, aclClient(t, srv, "noget", without(leastPrivilege, "+get")...))
	err := c.Do(context.Background(), uniqueKey(t), lease.Spec{TTL: 600 * time.Millisecond, Deadline: 3 * time.Second}, func(ctx context.Context) error {
		<-ctx.Done() // lost: no renewal can be confirmed
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Do: %v, want ErrLost (no renewal can be made)", err)
	}
	var fails []lease.Event
	for _, e := range rec.Events() {
		if e.Kind == lease.EventRenewFailed {
			fails = append(fails, e)
		}
	}
	if len(fails) == 0 {
		t.Fatal("no renew_failed event")
	}
	for _, e := range fails {
		if !errors.Is(e.Err, lease.ErrRefused) || strings.Contains(e.Err.Error(), "another type") || !permissionError(e.Err) || !strings.Contains(e.Err.Error(), "calls GET") {
			t.Errorf("renew_failed: %v: want a refusal naming the permission, not a key of another type", e.Err)
		}
	}
}
