package fence_test

// Adversarial tests, round 66: the fencing stores' error classes.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
)

// A write whose context ends while it waits for a pooled connection was
// never sent: it is the context's error ("one the context had ended
// before is the context's error"; only "a write sent whose answer was not
// read" is lease.ErrUnknown), and nothing is written.
func TestAdversary66_PoolWaitIsNotUnknown(t *testing.T) {
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	db.SetMaxOpenConns(1)
	// Hold the only connection.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()

	pool, err := pgxpool.New(context.Background(), adv13PGURL()+"&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	held, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()

	for name, x := range map[string]fence.Execer{"database/sql": fence.SQL(db), "pgxpool": fencepgx.Wrap(pool)} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := tbl.Upsert(ctx, x, stamp(5, "a"), "k", fence.Set("balance", 5))
		cancel()
		t.Logf("%s: %v", name, err)
		if err == nil {
			t.Fatalf("%s: upsert without a connection succeeded", name)
		}
		if errors.Is(err, lease.ErrUnknown) {
			t.Errorf("%s: a write that never left the pool (no connection free) = %v: reported as an unknown outcome", name, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v: want the context's error", name, err)
		}
	}
}
