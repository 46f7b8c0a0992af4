package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// A nested Do given a context that has already ended (the enclosing
// call's deadline passed while its lease is still valid) is not
// attempted, as a top-level Do with that context would not be: fn is not
// entered under a dead context.
func TestNestedDoOnEndedContextNotAttempted(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	var nested error
	entered := false
	err := c.Do(context.Background(), key, lease.Spec{TTL: 10 * time.Second, Deadline: 300 * time.Millisecond}, func(ctx context.Context) error {
		<-ctx.Done()
		nested = c.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Second}, func(context.Context) error {
			entered = true
			return nil
		})
		return nil
	})
	mustIs(t, err, lease.ErrDeadline)
	if entered {
		t.Error("the nested call entered fn under an ended context")
	}
	if !errors.Is(nested, lease.ErrDeadline) {
		t.Errorf("nested Do = %v; want it to wrap ErrDeadline (not attempted)", nested)
	}
}
