package main

import (
	"context"
	"testing"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The example checks its own story (one charge, skips, a rejected late
// write, a cut-off export) and fails on any deviation; run it against a
// real redis-server and against the embedded default.
func TestExampleOnRealRedis(t *testing.T) {
	srv := leasetest.StartRedis(t)
	if err := run(context.Background(), "redis://"+srv.Addr()+"/0"); err != nil {
		t.Fatal(err)
	}
}

func TestExampleOnEmbeddedRedis(t *testing.T) {
	if err := run(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
}

func TestLedgerRejectsStaleTokens(t *testing.T) {
	l := NewLedger()
	if err := l.Write("k", 5, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Write("k", 4, 1); err == nil || l.Rejects != 1 || l.values["k"] != 1 {
		t.Fatalf("stale write: err %v rejects %d value %d", err, l.Rejects, l.values["k"])
	}
	if err := l.Write("k", 6, 1); err != nil || l.values["k"] != 2 {
		t.Fatalf("newer write: %v, value %d", err, l.values["k"])
	}
}
