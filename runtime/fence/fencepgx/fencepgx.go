// Package fencepgx adapts pgx connections, pools and transactions to
// fence.Execer, for fence.Table.
package fencepgx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasegen/leasegen/runtime/fence"
)

// DB is what *pgx.Conn, *pgxpool.Pool and pgx.Tx have in common.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Wrap adapts db.
func Wrap(db DB) fence.Execer { return execer{db} }

type execer struct{ db DB }

func (e execer) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	db := e.db
	if p, ok := db.(*pgxpool.Pool); ok {
		// The connection is taken first, so that a context that ends while
		// the write waits for one (or a connection that cannot be opened)
		// is known to have sent nothing (fence.NotSent).
		c, err := p.Acquire(ctx)
		if err != nil {
			return 0, fence.NotSent(err)
		}
		defer c.Release()
		db = c
	}
	tag, err := db.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (e execer) QueryStamp(ctx context.Context, q string, args ...any) (int64, string, bool, error) {
	var tok int64
	var owner string
	err := e.db.QueryRow(ctx, q, args...).Scan(&tok, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", false, nil
	}
	return tok, owner, err == nil, err
}
