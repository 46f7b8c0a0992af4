package leasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// A proxy that delays replies (SetDelay) simulates a slow server; a test
// that sets a long delay and ends must not wait that long for the
// proxy's Close (its Cleanup). Before, Close waited for every delayed
// chunk's sleep to end: 20 s here.
func TestAdversary31c_ProxyCloseDoesNotWaitForDelay(t *testing.T) {
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("a reply delayed by 20s arrived within 100ms")
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // the reply is now in the proxy, being delayed
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Proxy.Close took %v with a reply being delayed: it must stop at once", took)
	}
}
