package fence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Table is a SQL table whose rows carry the stamp of their last write in
// two columns (PostgreSQL syntax):
//
//	fence_token bigint NOT NULL,
//	fence_owner text   NOT NULL
//
// Every write compares stamps in its WHERE clause, so the check and the
// write are one atomic statement. Tokens above math.MaxInt64 (which lease
// tokens, server time in microseconds, never reach) are refused with an
// error rather than stored as negative bigints.
//
// A write whose statement was sent but whose answer was not read (a
// dropped connection, a timeout, the context ending mid-way) returns an
// error wrapping lease.ErrUnknown: it may have been carried out, even
// after the error was returned (the server runs a statement whose client
// has gone), and it is checked against the row's stamp whenever it runs.
//
// A write that changed no row is explained by a second statement that
// reads the row's stamp, so the table must not drop writes by itself (a
// BEFORE trigger that returns NULL, a DO INSTEAD NOTHING rule): a write
// dropped that way would be reported as refused.
type Table struct {
	Name  string // table name, optionally schema-qualified
	Key   string // the key column: unique (a primary key or a unique constraint)
	Token string // token column; "" means fence_token
	Owner string // owner column; "" means fence_owner
}

// Col is one column to write.
type Col struct {
	Name  string
	Value any
}

// Set is a Col.
func Set(name string, value any) Col { return Col{name, value} }

// Execer runs SQL for Table. SQL adapts database/sql; fencepgx adapts pgx.
type Execer interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryStamp runs a query returning one (bigint, text) row; found is
	// false when it returns none.
	QueryStamp(ctx context.Context, query string, args ...any) (tok int64, owner string, found bool, err error)
}

// DB is what SQL needs: *sql.DB, *sql.Tx and *sql.Conn have it.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL adapts a database/sql handle.
func SQL(db DB) Execer { return sqlExecer{db} }

type sqlExecer struct{ db DB }

func (e sqlExecer) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	db, pooled := e.db.(*sql.DB)
	if !pooled {
		r, err := e.db.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, endedUnsent(ctx, err)
		}
		return r.RowsAffected()
	}
	// From a pool, the connection is taken first, so that a context that
	// ends while the write waits for one (or a connection that cannot be
	// opened) is known to have sent nothing. database/sql's own retry of
	// a connection that turns out bad (driver.ErrBadConn: nothing was
	// carried out, and the connection is discarded) is kept: two tries on
	// pooled connections, the last on a new one. db.Conn prefers idle
	// connections, which may all be bad (closed by the server while idle),
	// so after the second failure there is one more try per idle
	// connection: each bad one is discarded, and the last is new
	// (TestAdversary73_SQLBadConnLastRetryOnNewConnection).
	tries := 3
	for try := 0; ; try++ {
		conn, err := db.Conn(ctx)
		if err != nil {
			return 0, NotSent(err)
		}
		r, err := conn.ExecContext(ctx, q, args...)
		conn.Close()
		if errors.Is(err, driver.ErrBadConn) && ctx.Err() == nil {
			if try == 1 {
				tries += db.Stats().Idle
			}
			if try+1 < tries {
				continue
			}
		}
		if err != nil {
			return 0, endedUnsent(ctx, err)
		}
		return r.RowsAffected()
	}
}

// endedUnsent is err, unless the driver sent nothing (database/sql's
// driver.ErrBadConn) because the context had ended (pgx's stdlib driver
// answers so for a context that ended before the send): then the
// context's error, as for a write whose context ended before it was
// made, marked as not sent (TestAdversary72a_SQLContextEndsBeforeSend).
// A *sql.Tx checks the context itself before the driver and returns the
// bare ctx.Err(), which a driver cancelled after the send may return too:
// that stays an unknown outcome, the safe answer for a window between the
// store's check and database/sql's
// (TestAdversary73_SQLTxContextEndsBeforeDatabaseSQLCheck).
func endedUnsent(ctx context.Context, err error) error {
	if ctx.Err() == nil || !errors.Is(err, driver.ErrBadConn) {
		return err
	}
	return unsent{fmt.Errorf("%w (the driver sent nothing: %w)", ctx.Err(), err)}
}

// unsent marks the error of a write that was certainly not sent.
type unsent struct{ err error }

func (e unsent) Error() string     { return e.err.Error() }
func (e unsent) Unwrap() error     { return e.err }
func (e unsent) SafeToRetry() bool { return true }

// NotSent marks err as the error of a write that was certainly not sent
// (no connection could be had for it): an Execer returns it so that the
// write is reported as not carried out, with err, rather than as an
// unknown outcome. It is nil for a nil err.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return notSent{err}
}

type notSent struct{ err error }

func (e notSent) Error() string     { return "no connection for the write: " + e.err.Error() }
func (e notSent) Unwrap() error     { return e.err }
func (e notSent) SafeToRetry() bool { return true }

func (e sqlExecer) QueryStamp(ctx context.Context, q string, args ...any) (int64, string, bool, error) {
	var tok int64
	var owner string
	err := e.db.QueryRowContext(ctx, q, args...).Scan(&tok, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	return tok, owner, err == nil, err
}

// exec runs a write statement. A statement that may have been carried
// out without its answer being read (the connection failed or the
// context ended after it was sent) is an error wrapping lease.ErrUnknown;
// one the context had ended before is the context's error.
func exec(ctx context.Context, db Execer, q string, args ...any) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	rows, err := db.Exec(ctx, q, args...)
	if err != nil && sentNoAnswer(err) {
		return 0, fmt.Errorf("%w: the write was sent and its answer not read: %w", lease.ErrUnknown, err)
	}
	return rows, err
}

// sentNoAnswer reports whether err is a connection failure or an ended
// context, and not one the driver says came before anything was sent
// (pgconn's SafeToRetry, NotSent's). A server's error answer (a PgError)
// is none.
func sentNoAnswer(err error) bool {
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		return false
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ErrNoRow is returned by Update for a key with no row.
var ErrNoRow = errors.New("fence: no row with that key")

func (t Table) cols() (token, owner string) {
	token, owner = t.Token, t.Owner
	if token == "" {
		token = "fence_token"
	}
	if owner == "" {
		owner = "fence_owner"
	}
	return quote(token), quote(owner)
}

// quote quotes an identifier, part by part for schema.table.
func quote(id string) string {
	parts := strings.Split(id, ".")
	for i, p := range parts {
		parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
	}
	return strings.Join(parts, ".")
}

// sqlToken is s's token as the bigint the columns hold: a token above
// math.MaxInt64 would wrap to a negative one and compare as older than
// every other.
func (s Stamp) sqlToken() (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if s.Token > math.MaxInt64 {
		return 0, fmt.Errorf("fence: token %d does not fit the table's bigint column", s.Token)
	}
	return int64(s.Token), nil
}

// admits is the stamp comparison as SQL, with the new stamp in $tok, $own.
func admits(col, tokCol, ownCol, tok, own string) string {
	return fmt.Sprintf("(%s%s < %s OR (%s%s = %s AND %s%s = %s))", col, tokCol, tok, col, tokCol, tok, col, ownCol, own)
}

// Update sets cols on the row with key if s admits the row's stamp:
//
//	UPDATE t SET c1 = $1, …, fence_token = $n, fence_owner = $n+1
//	WHERE key = $k AND (fence_token < $n OR (fence_token = $n AND fence_owner = $n+1))
//
// It returns ErrStale (reported to the lease's observer) or ErrNoRow when
// nothing was written.
func (t Table) Update(ctx context.Context, db Execer, s Stamp, key any, cols ...Col) error {
	tok64, err := s.sqlToken()
	if err != nil {
		return err
	}
	tokCol, ownCol := t.cols()
	var set []string
	var args []any
	for _, c := range cols {
		args = append(args, c.Value)
		set = append(set, fmt.Sprintf("%s = $%d", quote(c.Name), len(args)))
	}
	args = append(args, tok64, s.Owner, key)
	n := len(args)
	tok, own := fmt.Sprintf("$%d", n-2), fmt.Sprintf("$%d", n-1)
	set = append(set, tokCol+" = "+tok, ownCol+" = "+own)
	q := fmt.Sprintf("UPDATE %s SET %s WHERE %s = $%d AND %s", quote(t.Name), strings.Join(set, ", "), quote(t.Key), n, admits("", tokCol, ownCol, tok, own))
	rows, err := exec(ctx, db, q, args...)
	if err != nil || rows > 0 {
		return err
	}
	return t.refused(ctx, db, s, key, ErrNoRow, false)
}

// refused explains a write that changed no row, by reading the row's
// stamp in a statement of its own: the row may have changed in between.
// For Update and Delete no row changed because the row was absent (then
// refused returns absent) or its stamp refused s (ErrStale). A row read
// now whose stamp admits s was absent at the write, or was deleted since
// (a deleted row forgets its stamp, see Delete) and written again with an
// older one: it is reported as absent, never as a stale write it does not
// explain. For Upsert (refusedByRow) a row's stamp did refuse s, since an
// absent row is inserted: ErrStale whatever the row is now, deleted
// included, and even when it cannot be read.
func (t Table) refused(ctx context.Context, db Execer, s Stamp, key any, absent error, refusedByRow bool) error {
	tokCol, ownCol := t.cols()
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = $1", tokCol, ownCol, quote(t.Name), quote(t.Key))
	tok, owner, found, err := db.QueryStamp(ctx, q, key)
	res := fmt.Sprintf("%s[%v]", t.Name, key)
	if err != nil {
		if refusedByRow {
			// Refused all the same: only the explanation is missing.
			return s.staleSince(res, fmt.Sprintf("its stamp could not be read: %v", err))
		}
		return err
	}
	cur := Stamp{Token: tokenOf(tok), Owner: owner}
	switch {
	case !refusedByRow && (!found || s.Admits(cur)):
		return absent
	case !found:
		return s.staleSince(res, "the row has been deleted since")
	case s.Admits(cur):
		return s.staleSince(res, fmt.Sprintf("the row's stamp has changed since (now token %d)", cur.Token))
	}
	return s.stale(res, cur)
}

// Upsert inserts the row, or updates it if s admits its stamp:
//
//	INSERT INTO t (key, c1, …, fence_token, fence_owner) VALUES (…)
//	ON CONFLICT (key) DO UPDATE SET c1 = EXCLUDED.c1, …
//	WHERE t.fence_token < EXCLUDED.fence_token OR (… = … AND t.fence_owner = EXCLUDED.fence_owner)
//
// It returns ErrStale (reported to the lease's observer) when the row's
// stamp refused s, even if the row has changed or been deleted since.
func (t Table) Upsert(ctx context.Context, db Execer, s Stamp, key any, cols ...Col) error {
	tok64, err := s.sqlToken()
	if err != nil {
		return err
	}
	tokCol, ownCol := t.cols()
	names := []string{quote(t.Key)}
	args := []any{key}
	var set []string
	for _, c := range cols {
		names = append(names, quote(c.Name))
		args = append(args, c.Value)
		set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", quote(c.Name), quote(c.Name)))
	}
	names = append(names, tokCol, ownCol)
	args = append(args, tok64, s.Owner)
	set = append(set, tokCol+" = EXCLUDED."+tokCol, ownCol+" = EXCLUDED."+ownCol)
	ph := make([]string, len(args))
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	tbl := quote(t.Name)
	q := fmt.Sprintf("INSERT INTO %s AS cur (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s WHERE %s",
		tbl, strings.Join(names, ", "), strings.Join(ph, ", "), quote(t.Key), strings.Join(set, ", "),
		admits("cur.", tokCol, ownCol, "EXCLUDED."+tokCol, "EXCLUDED."+ownCol))
	rows, err := exec(ctx, db, q, args...)
	if err != nil || rows > 0 {
		return err
	}
	// No row changed: an absent row would have been inserted, so a row's
	// stamp refused s.
	return t.refused(ctx, db, s, key, nil, true)
}

// Delete removes the row with key if s admits its stamp; a missing row is
// not an error. A deleted row forgets its stamp: a later Upsert with an
// older token can recreate it. Prefer a "deleted" column written with
// Update when that matters.
func (t Table) Delete(ctx context.Context, db Execer, s Stamp, key any) error {
	tok64, err := s.sqlToken()
	if err != nil {
		return err
	}
	tokCol, ownCol := t.cols()
	q := fmt.Sprintf("DELETE FROM %s WHERE %s = $1 AND %s", quote(t.Name), quote(t.Key), admits("", tokCol, ownCol, "$2", "$3"))
	rows, err := exec(ctx, db, q, key, tok64, s.Owner)
	if err != nil || rows > 0 {
		return err
	}
	return t.refused(ctx, db, s, key, nil, false)
}
