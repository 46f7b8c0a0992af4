package main

import (
	"context"
	"os"
	"testing"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The example checks its own story (one charge, skips, a rejected late
// write, a cut-off export) and fails on any deviation; run it against a
// real redis-server and against the embedded default.
func TestExampleOnRealRedis(t *testing.T) {
	srv := leasetest.StartRedis(t)
	if err := run(context.Background(), "redis://"+srv.Addr()+"/0", ""); err != nil {
		t.Fatal(err)
	}
}

func TestExampleOnEmbeddedRedis(t *testing.T) {
	if err := run(context.Background(), "", ""); err != nil {
		t.Fatal(err)
	}
}

func TestExampleWithPostgresLedger(t *testing.T) {
	srv := leasetest.StartRedis(t)
	url := os.Getenv("LEASETEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if err := run(context.Background(), "redis://"+srv.Addr(), url); err != nil {
		t.Fatal(err)
	}
}
