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

// ACLUser may give the default user a password (passed again on every
// Restart, as a "user" line): Restart then checks the restarted server
// with that password, and the helpers and Client use it. Restart used to
// ask with no password, got NOAUTH until its 10 s were up, and killed the
// server it had started.
func TestAdversary32_DefaultUserPasswordSurvivesRestart(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	if err := srv.ACLUser(t, "default", "adv32default", "~*", "&*", "+@all").Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart after ACLUser default: %v (after %v)", err, time.Since(start))
	}
	if err := srv.SetConfig(ctx, "maxmemory", "50mb"); err != nil {
		t.Errorf("SetConfig after the Restart: %v", err)
	}
	if err := srv.Client(t).Ping(ctx).Err(); err != nil {
		t.Errorf("Client after the Restart: %v", err)
	}
}

// A Cluster whose nodes run with --requirepass (ClusterOptions.Args)
// forms, and its Client authenticates as a single server's does: it used
// to get NOAUTH on every command.
func TestAdversary32_ClusterRequirepassClient(t *testing.T) {
	cl := leasetest.StartCluster(t, 3, func(o *leasetest.ClusterOptions) { o.Args = []string{"--requirepass", "adv32pw"} })
	ctx := context.Background()
	rdb := cl.Client(t)
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := rdb.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Errorf("SET %s through the Cluster's Client: %v", k, err)
		}
	}
}
