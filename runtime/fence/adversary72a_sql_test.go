package fence_test

// Adversarial tests, round 72a: how the SQL store classifies errors.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
)

// adv72aConnector wraps pgx's database/sql connector so that a test can
// run a hook when a statement reaches the driver: after database/sql
// handed out the connection, before pgx sends anything.
type adv72aConnector struct {
	driver.Connector
	hook *atomic.Pointer[func()]
}

func (c adv72aConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return adv72aDriverConn{conn.(*stdlib.Conn), c.hook}, nil
}

type adv72aDriverConn struct {
	*stdlib.Conn
	hook *atomic.Pointer[func()]
}

func (c adv72aDriverConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if h := c.hook.Swap(nil); h != nil {
		(*h)()
	}
	return c.Conn.ExecContext(ctx, q, args)
}

// adv72aPgxHook is a fencepgx.DB that runs a hook before each Exec.
type adv72aPgxHook struct {
	*pgx.Conn
	hook *atomic.Pointer[func()]
}

func (c adv72aPgxHook) Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error) {
	if h := c.hook.Swap(nil); h != nil {
		(*h)()
	}
	return c.Conn.Exec(ctx, q, args...)
}

// The work's context ends (its lease was lost) after the write got its
// connection and before anything was sent. The write was not sent: the
// error must not be lease.ErrUnknown, nothing is written, and (exec's
// doc: "one the context had ended before is the context's error") it is
// the context's error, so that the caller can tell the cancellation from
// a broken database connection.
func TestAdversary72a_SQLContextEndsBeforeSend(t *testing.T) {
	t.Parallel()
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	if _, err := db.Exec("INSERT INTO " + table + " (id, balance, fence_token, fence_owner) VALUES ('k', 7, 5, 'a')"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	var hook atomic.Pointer[func()]
	hdb := sql.OpenDB(adv72aConnector{stdlib.GetConnector(*cfg), &hook})
	t.Cleanup(func() { hdb.Close() })
	pconn := adv31aPgx(t)
	// A fresh *sql.Conn for each write: one whose driver connection was
	// found bad is closed for good.
	sqlConn := func() fence.Execer {
		sconn, err := hdb.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sconn.Close() })
		return fence.SQL(sconn)
	}
	execers := map[string]func() fence.Execer{
		"sql.DB":   func() fence.Execer { return fence.SQL(hdb) },
		"sql.Conn": sqlConn,
		"pgx.Conn": func() fence.Execer { return fencepgx.Wrap(adv72aPgxHook{pconn, &hook}) },
	}
	var failures []string
	for name, mk := range execers {
		for _, op := range []string{"update", "upsert", "delete"} {
			x := mk()
			ctx, cancel := context.WithCancel(context.Background())
			f := func() { cancel() }
			hook.Store(&f)
			s := stamp(10, "b")
			switch op {
			case "update":
				err = tbl.Update(ctx, x, s, "k", fence.Set("balance", 10))
			case "upsert":
				err = tbl.Upsert(ctx, x, s, "k", fence.Set("balance", 10))
			case "delete":
				err = tbl.Delete(ctx, x, s, "k")
			}
			cancel()
			if hook.Load() != nil {
				t.Fatalf("%s %s: the hook did not run", name, op)
			}
			bal, tok, _, found := adv14Row(t, db, table, "k")
			if !found || bal != 7 || tok != 5 {
				t.Fatalf("%s %s: row %d @%d (found %v): a write not sent changed it", name, op, bal, tok, found)
			}
			t.Logf("%s %s: %v", name, op, err)
			switch {
			case err == nil, errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrNoRow):
				t.Fatalf("%s %s: a write whose context ended before it was sent = %v", name, op, err)
			case errors.Is(err, lease.ErrUnknown):
				failures = append(failures, fmt.Sprintf("%s %s: not sent, reported unknown: %v", name, op, err))
			case !errors.Is(err, context.Canceled):
				failures = append(failures, fmt.Sprintf("%s %s: context ended before the send: %q does not wrap context.Canceled", name, op, err))
			}
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d writes misclassified:\n%s", len(failures), 3*len(execers), strings.Join(failures, "\n"))
	}
}

// adv72aCommitTrigger adds a deferred constraint trigger to table: it runs
// at COMMIT, after the statement's CommandComplete; for writer 'boom' it
// fails the commit, for writer 'sleep' it sleeps there (a window to kill
// the connection around COMMIT).
func adv72aCommitTrigger(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	for _, q := range []string{
		`CREATE FUNCTION ` + table + `_c() RETURNS trigger AS $$ BEGIN
		   IF NEW.writer = 'boom' THEN RAISE EXCEPTION 'adv72a: refused at commit'; END IF;
		   IF NEW.writer = 'sleep' THEN PERFORM pg_sleep(3); END IF;
		   RETURN NULL; END $$ LANGUAGE plpgsql`,
		`CREATE CONSTRAINT TRIGGER ` + table + `_ct AFTER INSERT OR UPDATE ON ` + table + ` DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ` + table + `_c()`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.Exec("DROP FUNCTION " + table + "_c() CASCADE") })
}

// A write whose statement ran but whose (implicit) commit failed was not
// carried out: it must not be reported done (nil), nor as refused by the
// fence (ErrStale/ErrNoRow), and the row keeps its old stamp, through
// pgx (extended and simple protocol) and database/sql.
func TestAdversary72a_SQLCommitFailsAfterStatement(t *testing.T) {
	t.Parallel()
	db, table := postgres(t)
	adv72aCommitTrigger(t, db, table)
	tbl := fence.Table{Name: table, Key: "id"}
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { simple.Close(context.Background()) })
	execers := []struct {
		name string
		x    fence.Execer
	}{
		{"database/sql", fence.SQL(db)},
		{"pgx", fencepgx.Wrap(adv31aPgx(t))},
		{"pgx-simple", fencepgx.Wrap(simple)},
	}
	for i, e := range execers {
		id := fmt.Sprint("row", i)
		if _, err := db.Exec("INSERT INTO "+table+" (id, balance, writer, fence_token, fence_owner) VALUES ($1, 1, 'init', 5, 'a')", id); err != nil {
			t.Fatal(err)
		}
		for _, upsert := range []bool{false, true} {
			s := stamp(lease.Token(10+i), "b")
			var err error
			if upsert {
				err = tbl.Upsert(ctx, e.x, s, id, fence.Set("writer", "boom"), fence.Set("balance", 99))
			} else {
				err = tbl.Update(ctx, e.x, s, id, fence.Set("writer", "boom"), fence.Set("balance", 99))
			}
			bal, tok, _, _ := adv14Row(t, db, table, id)
			t.Logf("%s upsert=%v: %v (row %d @%d)", e.name, upsert, err, bal, tok)
			if bal != 1 || tok != 5 {
				t.Fatalf("%s: the commit failed but the row is %d @%d", e.name, bal, tok)
			}
			if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow) {
				t.Fatalf("%s upsert=%v: a write whose commit failed = %v", e.name, upsert, err)
			}
		}
	}
}

// The connection is killed (pg_terminate_backend) while the write's
// implicit COMMIT runs (a deferred trigger sleeping there): PostgreSQL
// rolls it back. Never reported done or stale; the row is unchanged.
func TestAdversary72a_SQLConnectionKilledAtCommit(t *testing.T) {
	t.Parallel()
	db, table := postgres(t)
	adv72aCommitTrigger(t, db, table)
	tbl := fence.Table{Name: table, Key: "id"}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	execers := []struct {
		name string
		x    fence.Execer
	}{
		{"database/sql", fence.SQL(db)},
		{"pgx", fencepgx.Wrap(adv31aPgx(t))},
		{"pgxpool", fencepgx.Wrap(pool)},
	}
	for i, e := range execers {
		id := fmt.Sprint("row", i)
		if _, err := db.Exec("INSERT INTO "+table+" (id, balance, writer, fence_token, fence_owner) VALUES ($1, 1, 'init', 5, 'a')", id); err != nil {
			t.Fatal(err)
		}
		killed := make(chan int, 1)
		go func() {
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				var pid int
				err := db.QueryRow("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'", table).Scan(&pid)
				if err == nil {
					db.Exec("SELECT pg_terminate_backend($1)", pid)
					killed <- pid
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			killed <- 0
		}()
		wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		err := tbl.Update(wctx, e.x, stamp(lease.Token(10+i), "b"), id, fence.Set("writer", "sleep"), fence.Set("balance", 99))
		cancel()
		if pid := <-killed; pid == 0 {
			t.Fatalf("%s: never saw the commit sleeping (write: %v)", e.name, err)
		}
		bal, tok, _, _ := adv14Row(t, db, table, id)
		t.Logf("%s: %v (unknown %v; row %d @%d)", e.name, err, errors.Is(err, lease.ErrUnknown), bal, tok)
		if bal != 1 || tok != 5 {
			t.Fatalf("%s: killed at commit but the row is %d @%d", e.name, bal, tok)
		}
		if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow) {
			t.Fatalf("%s: a write killed at commit = %v", e.name, err)
		}
	}
}

// Custom stamp columns (mixed case), a schema-qualified table with a
// mixed-case name and an integer key: the rule holds, the refusal names
// the stored stamp read from the custom columns, and a refused Update of
// an absent key is ErrNoRow.
func TestAdversary72a_SQLCustomColumnsAndSchema(t *testing.T) {
	t.Parallel()
	db, table := postgres(t)
	ctx := context.Background()
	schema := table + "_s"
	name := schema + `.Acc"ts`
	q := fmt.Sprintf(`CREATE SCHEMA %s; CREATE TABLE %s."Acc""ts" ("Id" bigint PRIMARY KEY, "Bal" bigint NOT NULL DEFAULT 0, "Tok" bigint NOT NULL, "Own" text NOT NULL)`, schema, schema)
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP SCHEMA " + schema + " CASCADE") })
	tbl := fence.Table{Name: name, Key: "Id", Token: "Tok", Owner: "Own"}
	for _, x := range []fence.Execer{fence.SQL(db), fencepgx.Wrap(adv31aPgx(t))} {
		db.Exec(fmt.Sprintf(`DELETE FROM %s."Acc""ts"`, schema))
		steps := []struct {
			op   string
			tok  lease.Token
			own  string
			want error
		}{
			{"update", 5, "a", fence.ErrNoRow},
			{"upsert", 5, "a", nil},
			{"update", 5, "a", nil},
			{"update", 5, "b", fence.ErrStale},
			{"upsert", 4, "c", fence.ErrStale},
			{"delete", 4, "c", fence.ErrStale},
			{"update", 6, "c", nil},
		}
		for i, s := range steps {
			var err error
			st := stamp(s.tok, s.own)
			switch s.op {
			case "update":
				err = tbl.Update(ctx, x, st, int64(42), fence.Set("Bal", int64(i)))
			case "upsert":
				err = tbl.Upsert(ctx, x, st, int64(42), fence.Set("Bal", int64(i)))
			case "delete":
				err = tbl.Delete(ctx, x, st, int64(42))
			}
			if (s.want == nil) != (err == nil) || (s.want != nil && !errors.Is(err, s.want)) {
				t.Fatalf("%T step %d %s %d/%s = %v, want %v", x, i, s.op, s.tok, s.own, err, s.want)
			}
			if errors.Is(err, fence.ErrStale) && s.tok < 5 && !strings.Contains(err.Error(), "accepted 5") {
				t.Fatalf("%T step %d: refusal %q does not name the stored token 5", x, i, err)
			}
		}
		var bal, tok int64
		var own string
		db.QueryRow(fmt.Sprintf(`SELECT "Bal", "Tok", "Own" FROM %s."Acc""ts" WHERE "Id" = 42`, schema)).Scan(&bal, &tok, &own)
		if bal != 6 || tok != 6 || own != "c" {
			t.Fatalf("%T: row %d @%d/%s", x, bal, tok, own)
		}
	}
}
