package leasetest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// An ACL user may do what its rules allow and nothing else, also after a
// Restart.
func TestACLUser(t *testing.T) {
	t.Parallel()
	s := leasetest.StartRedis(t)
	rdb := s.ACLUser(t, "app", "secret", "~lease:*", "+get", "+set")
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		if err := rdb.Set(ctx, "lease:a", "1", 0).Err(); err != nil {
			t.Fatalf("%s: SET on an allowed key: %v", when, err)
		}
		if err := rdb.Set(ctx, "other", "1", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("%s: SET on a key outside ~lease:*: %v, want NOPERM", when, err)
		}
		if err := rdb.Del(ctx, "lease:a").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("%s: DEL without +del: %v, want NOPERM", when, err)
		}
	}
	check("before Restart")
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	check("after Restart")
	// The default user is untouched.
	if err := s.Client(t).Del(ctx, "lease:a").Err(); err != nil {
		t.Fatalf("default user: %v", err)
	}
}

// SetConfig applies at once and again after a Restart.
func TestSetConfig(t *testing.T) {
	t.Parallel()
	s := leasetest.StartRedis(t)
	ctx := context.Background()
	if err := s.SetConfig(ctx, "min-replicas-to-write", "1"); err != nil {
		t.Fatal(err)
	}
	rdb := s.Client(t)
	for _, when := range []string{"before Restart", "after Restart"} {
		if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOREPLICAS") {
			t.Fatalf("%s: SET with min-replicas-to-write 1 and no replica: %v, want NOREPLICAS", when, err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
}
