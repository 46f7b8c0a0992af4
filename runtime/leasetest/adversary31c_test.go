package leasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// ACLUser "creates (or replaces)" a user, and "the user survives
// Restart". Replacing a user (a test that narrows an operator's rights
// after setting it up) and then restarting the server must work, with the
// replacement's password and rules. Before, each ACLUser added another
// "user" line for Restart, and redis-server refuses a config that defines
// a user twice: Restart failed (after 50 attempts, about 13 s).
func TestAdversary31c_ACLUserReplacedSurvivesRestart(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	old := srv.ACLUser(t, "app", "one", "~lease:*", "+@all")
	rdb := srv.ACLUser(t, "app", "two", "~lease:*", "-@all", "+ping", "+get")
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart after replacing an ACL user: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Restart took %v", took)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the replaced user cannot log in after Restart: %v", err)
	}
	if err := rdb.Set(ctx, "lease:x", "1", 0).Err(); err == nil {
		t.Error("after Restart the user has the first ACLUser's rules (SET allowed), not the replacement's")
	}
	if err := old.Ping(ctx).Err(); err == nil {
		t.Error("after Restart the user's first password still works")
	}
}
