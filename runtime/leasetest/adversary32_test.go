package leasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A password set at run time (SetConfig "requirepass", passed again on
// every Restart) is a server started with --requirepass from then on:
// Restart comes back, and the helpers' own connection and Client
// authenticate with it.
func TestAdversary32_RequirepassSetAtRunTime(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	if err := srv.SetConfig(ctx, "requirepass", "adv32pw"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart after SetConfig requirepass: %v (after %v)", err, time.Since(start))
	}
	if err := srv.SetConfig(ctx, "maxmemory", "50mb"); err != nil {
		t.Errorf("SetConfig after the Restart: %v", err)
	}
	if err := srv.Client(t).Ping(ctx).Err(); err != nil {
		t.Errorf("Client after the Restart: %v", err)
	}
}
