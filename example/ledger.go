package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver for DATABASE_URL

	"github.com/leasegen/leasegen/runtime/fence"
)

// Ledger is the protected resource: balances keyed by account or SKU.
// Every write carries the writer's fence.Stamp and is refused with
// fence.ErrStale when a newer lease holder has already written.
type Ledger interface {
	Add(ctx context.Context, s fence.Stamp, key string, delta int64) error
	Value(ctx context.Context, key string) (int64, error)
}

// memLedger keeps balances in memory (the embedded default).
type memLedger struct{ m *fence.Memory[int64] }

func newMemLedger() *memLedger { return &memLedger{m: fence.NewMemory[int64]()} }

func (l *memLedger) Add(_ context.Context, s fence.Stamp, key string, delta int64) error {
	return l.m.Update(s, key, func(old int64, _ bool) int64 { return old + delta })
}

func (l *memLedger) Value(_ context.Context, key string) (int64, error) {
	v, _, _ := l.m.Get(key)
	return v, nil
}

// pgLedger keeps balances in PostgreSQL (DATABASE_URL), in a table with
// the two fence columns; each write is a fenced UPDATE (see Add).
type pgLedger struct {
	db *sql.DB
	t  fence.Table
}

func newPGLedger(ctx context.Context, url, table string) (*pgLedger, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
		id text PRIMARY KEY,
		balance bigint NOT NULL,
		fence_token bigint NOT NULL,
		fence_owner text NOT NULL)`, table))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return &pgLedger{db: db, t: fence.Table{Name: table, Key: "id"}}, nil
}

// Add adds delta to the balance under the stamp, in one transaction:
// the row is made if missing (with the lowest stamp, which every writer's
// admits), read and locked (FOR UPDATE), and written by the fenced UPDATE.
// A holder that lost its lease and writes meanwhile waits for the lock,
// then is refused by the stamp written here (fence.ErrStale); one that
// wrote before the read is counted in the sum. A read and a separate
// conditional write would overwrite such an accepted stale write with a
// sum from before it (TestPGLedgerLosesNoUpdateToAStaleWriter).
func (l *pgLedger) Add(ctx context.Context, s fence.Stamp, key string, delta int64) (err error) {
	// READ COMMITTED whatever the server's default: a write that waited
	// for the row's lock then sees the stamp written here (fence.ErrStale),
	// where REPEATABLE READ and SERIALIZABLE fail it with a serialization
	// error instead.
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
			return
		}
		err = tx.Commit()
	}()
	_, err = tx.ExecContext(ctx, "INSERT INTO "+l.t.Name+" (id, balance, fence_token, fence_owner) VALUES ($1, 0, 0, '') ON CONFLICT (id) DO NOTHING", key)
	if err != nil {
		return err
	}
	var cur int64
	err = tx.QueryRowContext(ctx, "SELECT balance FROM "+l.t.Name+" WHERE id = $1 FOR UPDATE", key).Scan(&cur)
	if err != nil {
		return err
	}
	return l.t.Update(ctx, fence.SQL(tx), s, key, fence.Set("balance", cur+delta))
}

func (l *pgLedger) Value(ctx context.Context, key string) (int64, error) {
	var v int64
	err := l.db.QueryRowContext(ctx, "SELECT balance FROM "+l.t.Name+" WHERE id = $1", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

func (l *pgLedger) Close() error {
	_, err := l.db.Exec("DROP TABLE IF EXISTS " + l.t.Name)
	return errors.Join(err, l.db.Close())
}
