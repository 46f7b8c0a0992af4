package fence_test

// Adversarial tests, round 73: database/sql writes whose context ends
// before the send, driver.ErrBadConn retries, and sent writes whose answer
// is lost.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
)

// adv73State drives adv73Connector's connections: the next bad
// ExecContext calls answer driver.ErrBadConn without sending anything (as
// a driver does for a connection it finds broken); connections made
// before staleGen do the same for every call (connections that went bad
// while idle); hook runs at each call before the send.
type adv73State struct {
	mu       sync.Mutex
	calls    int
	bad      int
	gen      int
	staleGen int
	hook     func(n int)
}

type adv73Connector struct {
	driver.Connector
	st *adv73State
}

func (c adv73Connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c.st.mu.Lock()
	g := c.st.gen
	c.st.gen++
	c.st.mu.Unlock()
	return &adv73DriverConn{conn.(*stdlib.Conn), c.st, g}, nil
}

type adv73DriverConn struct {
	*stdlib.Conn
	st  *adv73State
	gen int
}

func (c *adv73DriverConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	st := c.st
	st.mu.Lock()
	st.calls++
	n := st.calls
	stale := c.gen < st.staleGen
	bad := !stale && st.bad > 0
	if bad {
		st.bad--
	}
	hook := st.hook
	st.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	if stale || bad {
		return nil, driver.ErrBadConn
	}
	return c.Conn.ExecContext(ctx, q, args)
}

func (st *adv73State) set(f func(st *adv73State)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f(st)
}

func (st *adv73State) callCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.calls
}

func adv73OpenDB(t *testing.T) (*sql.DB, *adv73State) {
	t.Helper()
	cfg, err := pgx.ParseConfig(adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	st := &adv73State{}
	db := sql.OpenDB(adv73Connector{stdlib.GetConnector(*cfg), st})
	db.SetMaxIdleConns(10)
	t.Cleanup(func() { db.Close() })
	return db, st
}

func adv73SafeToRetry(err error) bool {
	var r interface{ SafeToRetry() bool }
	return errors.As(err, &r) && r.SafeToRetry()
}

// driver.ErrBadConn without an ended context: two are retried (the third
// try carries the write out, once); three in a row end the write with
// driver.ErrBadConn after exactly three tries, never ErrUnknown, the row
// unchanged; a *sql.Conn is not retried. A first ErrBadConn, then the
// context ending before the retry's send: the context's error wrapping
// ErrBadConn, marked not sent, row unchanged.
func TestAdversary73_SQLBadConnRetries(t *testing.T) {
	t.Parallel()
	pdb, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	if _, err := pdb.Exec("INSERT INTO " + table + " (id, balance, fence_token, fence_owner) VALUES ('k', 7, 5, 'a')"); err != nil {
		t.Fatal(err)
	}
	db, st := adv73OpenDB(t)
	ctx := context.Background()
	row := func() (int64, int64) {
		bal, tok, _, _ := adv14Row(t, pdb, table, "k")
		return bal, tok
	}

	st.set(func(st *adv73State) { st.bad = 2 })
	c0 := st.callCount()
	if err := tbl.Update(ctx, fence.SQL(db), stamp(6, "b"), "k", fence.Set("balance", 10)); err != nil {
		t.Fatalf("two ErrBadConn then a good connection: %v", err)
	}
	if n := st.callCount() - c0; n != 3 {
		t.Fatalf("%d tries, want 3", n)
	}
	if bal, tok := row(); bal != 10 || tok != 6 {
		t.Fatalf("row %d @%d, want 10 @6", bal, tok)
	}

	for _, op := range []string{"update", "upsert", "delete"} {
		st.set(func(st *adv73State) { st.bad = 100 })
		c0 = st.callCount()
		var err error
		switch op {
		case "update":
			err = tbl.Update(ctx, fence.SQL(db), stamp(7, "b"), "k", fence.Set("balance", 20))
		case "upsert":
			err = tbl.Upsert(ctx, fence.SQL(db), stamp(7, "b"), "k", fence.Set("balance", 20))
		case "delete":
			err = tbl.Delete(ctx, fence.SQL(db), stamp(7, "b"), "k")
		}
		t.Logf("%s, ErrBadConn on every try: %v", op, err)
		if n := st.callCount() - c0; n != 3 {
			t.Fatalf("%s: %d tries, want 3", op, n)
		}
		if !errors.Is(err, driver.ErrBadConn) || errors.Is(err, lease.ErrUnknown) || errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s: ErrBadConn on every try = %v", op, err)
		}
		if bal, tok := row(); bal != 10 || tok != 6 {
			t.Fatalf("%s: row %d @%d", op, bal, tok)
		}
	}

	sconn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()
	st.set(func(st *adv73State) { st.bad = 100 })
	c0 = st.callCount()
	err = tbl.Update(ctx, fence.SQL(sconn), stamp(7, "b"), "k", fence.Set("balance", 30))
	if n := st.callCount() - c0; n != 1 || !errors.Is(err, driver.ErrBadConn) || errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("*sql.Conn, ErrBadConn: %d tries, %v", n, err)
	}

	st.set(func(st *adv73State) { st.bad = 0 })
	for i := 0; i < 3; i++ {
		cctx, cancel := context.WithCancel(ctx)
		st.set(func(st *adv73State) {
			st.bad = 1
			first := st.calls + 1
			st.hook = func(n int) {
				if n == first+1 {
					cancel()
				}
			}
		})
		err := tbl.Update(cctx, fence.SQL(db), stamp(8, "b"), "k", fence.Set("balance", 40))
		cancel()
		st.set(func(st *adv73State) { st.hook = nil; st.bad = 0 })
		t.Logf("ErrBadConn, then the context ends before the retry's send: %v", err)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, driver.ErrBadConn) || errors.Is(err, lease.ErrUnknown) || !adv73SafeToRetry(err) {
			t.Fatalf("ErrBadConn, then the context ends before the retry's send = %v (safe to retry %v)", err, adv73SafeToRetry(err))
		}
		if bal, tok := row(); bal != 10 || tok != 6 {
			t.Fatalf("row %d @%d after an unsent write", bal, tok)
		}
	}
}

// adv73Idle leaves n idle connections in db's pool (all made before the
// call returns) and marks every connection made so far bad: as after a
// database restart or a failover, each answers driver.ErrBadConn.
func adv73Idle(t *testing.T, db *sql.DB, st *adv73State, n int) {
	t.Helper()
	var conns []*sql.Conn
	for i := 0; i < n; i++ {
		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	st.set(func(st *adv73State) { st.staleGen = st.gen })
}

// database/sql's own rule for driver.ErrBadConn is two tries with pooled
// connections, then one with a new connection (DB.retry's alwaysNewConn),
// so a pool whose idle connections all went bad still carries a write
// out. The fenced write says it keeps that rule ("a new connection, twice
// at most, as it does"): with three bad idle connections it must succeed
// as db.ExecContext does.
func TestAdversary73_SQLBadConnLastRetryOnNewConnection(t *testing.T) {
	t.Parallel()
	pdb, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	if _, err := pdb.Exec("INSERT INTO " + table + " (id, balance, fence_token, fence_owner) VALUES ('k', 7, 5, 'a')"); err != nil {
		t.Fatal(err)
	}
	db, st := adv73OpenDB(t)
	ctx := context.Background()

	adv73Idle(t, db, st, 3)
	c0 := st.callCount()
	if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET balance = balance + 1 WHERE id = 'k'"); err != nil {
		t.Fatalf("control: database/sql's own ExecContext with three bad idle connections: %v", err)
	}
	t.Logf("control: db.ExecContext carried the write out after %d tries", st.callCount()-c0)

	adv73Idle(t, db, st, 3)
	c0 = st.callCount()
	err := tbl.Update(ctx, fence.SQL(db), stamp(6, "b"), "k", fence.Set("balance", 10))
	bal, tok, _, _ := adv14Row(t, pdb, table, "k")
	t.Logf("fenced Update with three bad idle connections: %v after %d tries (row %d @%d)", err, st.callCount()-c0, bal, tok)
	if errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("ErrBadConn reported unknown: %v", err)
	}
	if err != nil {
		t.Fatalf("the fenced write failed where database/sql's rule (its last try on a new connection) carries it out: %v", err)
	}
	if bal != 10 || tok != 6 {
		t.Fatalf("row %d @%d", bal, tok)
	}
}

// adv73EndsAfterFirstCheck is a context that ends right after the first
// time anyone asks whether it has ended (that check answers no): a
// cancellation (the lease lost) landing between the fenced write's own
// check and database/sql's.
type adv73EndsAfterFirstCheck struct {
	context.Context
	once  sync.Once
	ended atomic.Bool
	done  chan struct{}
}

func (c *adv73EndsAfterFirstCheck) Done() <-chan struct{} { return c.done }
func (c *adv73EndsAfterFirstCheck) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	c.once.Do(func() { c.ended.Store(true); close(c.done) })
	return nil
}

// A write whose context ends after the fenced write's own check and
// before database/sql's. Nothing was sent and the row is unchanged. From
// a *sql.DB (the store takes the connection itself) and a *sql.Conn (the
// driver answers driver.ErrBadConn), the error is the context's, marked
// not sent, never lease.ErrUnknown. A *sql.Tx's check (Tx.grabConn)
// returns the bare ctx.Err(), which a driver that was cancelled after
// sending may return too: the store cannot tell them apart, and reports
// the safe answer, ErrUnknown wrapping the context's error (the round
// found this; sql.go's endedUnsent says so).
func TestAdversary73_SQLTxContextEndsBeforeDatabaseSQLCheck(t *testing.T) {
	t.Parallel()
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	if _, err := db.Exec("INSERT INTO " + table + " (id, balance, fence_token, fence_owner) VALUES ('k', 7, 5, 'a')"); err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	sconn, err := db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()
	tx, err := db.BeginTx(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var failures []string
	for _, e := range []struct {
		name string
		x    fence.Execer
	}{{"sql.DB", fence.SQL(db)}, {"sql.Conn", fence.SQL(sconn)}, {"sql.Tx", fence.SQL(tx)}} {
		ctx := &adv73EndsAfterFirstCheck{Context: bg, done: make(chan struct{})}
		err := tbl.Update(ctx, e.x, stamp(6, "b"), "k", fence.Set("balance", 10))
		t.Logf("%s: %v", e.name, err)
		if !ctx.ended.Load() {
			t.Fatalf("%s: the context never ended", e.name)
		}
		if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow) {
			t.Fatalf("%s: = %v", e.name, err)
		}
		if e.name == "sql.Tx" {
			if !errors.Is(err, lease.ErrUnknown) || !errors.Is(err, context.Canceled) {
				failures = append(failures, fmt.Sprintf("%s: want ErrUnknown wrapping context.Canceled, got %q", e.name, err))
			}
			continue
		}
		if errors.Is(err, lease.ErrUnknown) || !errors.Is(err, context.Canceled) || !adv73SafeToRetry(err) {
			failures = append(failures, fmt.Sprintf("%s: not sent, got %q (unknown %v, wraps context.Canceled %v, marked not sent %v)", e.name, err, errors.Is(err, lease.ErrUnknown), errors.Is(err, context.Canceled), adv73SafeToRetry(err)))
		}
	}
	var bal int64
	if err := tx.QueryRow("SELECT balance FROM " + table + " WHERE id = 'k'").Scan(&bal); err != nil {
		t.Fatal(err)
	}
	if b, tok, _, _ := adv14Row(t, db, table, "k"); b != 7 || tok != 5 || bal != 7 {
		t.Fatalf("row %d @%d (in the tx %d): an unsent write changed it", b, tok, bal)
	}
	if len(failures) > 0 {
		t.Fatalf("unsent writes misclassified:\n%v", failures)
	}
}

// Sent, then the answer lost: the write waits on a row lock held by
// another transaction and its context ends (pgx closes the connection).
// It must be ErrUnknown, not marked not sent; once the lock is released
// PostgreSQL may still carry it out (logged).
func TestAdversary73_SQLSentThenContextEndsIsUnknown(t *testing.T) {
	t.Parallel()
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	bg := context.Background()
	sconn, err := db.Conn(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()
	for i, e := range []struct {
		name string
		x    fence.Execer
	}{{"sql.DB", fence.SQL(db)}, {"sql.Conn", fence.SQL(sconn)}} {
		id := fmt.Sprint("k", i)
		if _, err := db.Exec("INSERT INTO "+table+" (id, balance, fence_token, fence_owner) VALUES ($1, 7, 5, 'a')", id); err != nil {
			t.Fatal(err)
		}
		lock, err := db.BeginTx(bg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.Exec("SELECT 1 FROM "+table+" WHERE id = $1 FOR UPDATE", id); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
		err = tbl.Update(ctx, e.x, stamp(6, "b"), id, fence.Set("balance", 50))
		cancel()
		t.Logf("%s: %v", e.name, err)
		if !errors.Is(err, lease.ErrUnknown) || adv73SafeToRetry(err) {
			lock.Rollback()
			t.Fatalf("%s: sent, answer lost = %v (marked not sent %v), want ErrUnknown", e.name, err, adv73SafeToRetry(err))
		}
		if b, _, _, _ := adv14Row(t, db, table, id); b != 7 {
			t.Fatalf("%s: row changed while locked: %d", e.name, b)
		}
		lock.Commit()
		landed := false
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, tok, _, _ := adv14Row(t, db, table, id); b == 50 && tok == 6 {
				landed = true
				break
			}
		}
		t.Logf("%s: the write reported unknown was carried out after the lock was released: %v", e.name, landed)
	}
}
