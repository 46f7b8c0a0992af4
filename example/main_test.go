package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The example checks its own story (one charge, skips, a rejected late
// write, a cut-off export) and fails on any deviation; run it against a
// real redis-server and against the embedded default.
func TestExampleOnRealRedis(t *testing.T) {
	srv := leasetest.StartRedis(t)
	if err := run(context.Background(), config{redisURL: "redis://" + srv.Addr() + "/0"}); err != nil {
		t.Fatal(err)
	}
	// The run deleted its keys, fence counters included.
	if n := srv.Client(t).DBSize(context.Background()).Val(); n != 0 {
		keys := srv.Client(t).Keys(context.Background(), "*").Val()
		t.Fatalf("%d keys left in Redis after the run: %q", n, keys)
	}
}

func TestExampleOnEmbeddedRedis(t *testing.T) {
	if err := run(context.Background(), config{}); err != nil {
		t.Fatal(err)
	}
}

// cleanup deletes the keys under the prefix and no others, also when the
// prefix holds glob characters.
func TestCleanupDeletesOnlyThePrefix(t *testing.T) {
	ctx := context.Background()
	rdb := leasetest.StartRedis(t).Client(t)
	prefix := `run[1]*?\:`
	var mine []string
	for i := range 1200 { // more than one SCAN batch and one UNLINK batch
		mine = append(mine, fmt.Sprintf("%s{orders:%d}:f", prefix, i))
	}
	others := []string{"run1:{orders:1}:f", `run[1]x?\:{a}:l`, "lease:{orders:1}:l", "other"}
	for _, k := range append(append([]string{}, mine...), others...) {
		if err := rdb.Set(ctx, k, "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cleanup(ctx, rdb, prefix)
	if err != nil || n != len(mine) {
		t.Fatalf("cleanup = %d, %v; want %d deleted", n, err, len(mine))
	}
	left := rdb.Keys(ctx, "*").Val()
	sort.Strings(left)
	sort.Strings(others)
	if !slices.Equal(left, others) {
		t.Fatalf("keys left: %q, want %q", left, others)
	}
}

func TestExampleWithPostgresLedger(t *testing.T) {
	srv := leasetest.StartRedis(t)
	url := os.Getenv("LEASETEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if err := run(context.Background(), config{redisURL: "redis://" + srv.Addr(), dbURL: url}); err != nil {
		t.Fatal(err)
	}
}
