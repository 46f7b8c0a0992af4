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
// the two fence columns; each write is one conditional statement.
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

// Add reads the balance and writes the new one under the stamp; a stale
// stamp is refused by the UPDATE's WHERE clause.
func (l *pgLedger) Add(ctx context.Context, s fence.Stamp, key string, delta int64) error {
	cur, err := l.Value(ctx, key)
	if err != nil {
		return err
	}
	err = l.t.Update(ctx, fence.SQL(l.db), s, key, fence.Set("balance", cur+delta))
	if errors.Is(err, fence.ErrNoRow) {
		return l.t.Upsert(ctx, fence.SQL(l.db), s, key, fence.Set("balance", delta))
	}
	return err
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
