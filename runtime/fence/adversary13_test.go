package fence_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/proc"
	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv13Audit logs every row version written to table (an AFTER trigger,
// which runs while the row lock is held, so per row the log is in commit
// order) into an audit table, whose name it returns.
func adv13Audit(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	a := table + "_audit"
	for _, q := range []string{
		`CREATE TABLE ` + a + ` (seq bigserial PRIMARY KEY, id text, tok bigint, owner text, writer text, op text)`,
		`CREATE FUNCTION ` + a + `_f() RETURNS trigger AS $$ BEGIN
		   IF TG_OP = 'DELETE' THEN
		     INSERT INTO ` + a + `(id, tok, owner, writer, op) VALUES (OLD.id, OLD.fence_token, OLD.fence_owner, OLD.writer, TG_OP);
		     RETURN OLD;
		   END IF;
		   INSERT INTO ` + a + `(id, tok, owner, writer, op) VALUES (NEW.id, NEW.fence_token, NEW.fence_owner, NEW.writer, TG_OP);
		   RETURN NEW; END $$ LANGUAGE plpgsql`,
		`CREATE TRIGGER ` + a + `_t AFTER INSERT OR UPDATE OR DELETE ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION ` + a + `_f()`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		db.Exec("DROP TABLE " + a)
		db.Exec("DROP FUNCTION " + a + "_f() CASCADE")
	})
	return a
}

func adv13PGURL() string {
	if u := os.Getenv("LEASETEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
}

// adv13CheckHistory asserts, from the audit log, that per row every
// accepted write's token is >= the one before, and an equal token comes
// from the same owner (within a row's life: a deleted row forgets its
// stamp); and that each writer marker was written exactly once when its
// call returned nil, never when it returned an error. It returns the
// number of row versions written (deletions not counted).
func adv13CheckHistory(t *testing.T, db *sql.DB, audit string, accepted, refused map[string]bool) int {
	t.Helper()
	rows, err := db.Query("SELECT id, tok, owner, coalesce(writer, ''), op FROM " + audit + " ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type st struct {
		tok   int64
		owner string
	}
	last := map[string]st{}
	seen := map[string]int{}
	n := 0
	for rows.Next() {
		var id, owner, writer, op string
		var tok int64
		if err := rows.Scan(&id, &tok, &owner, &writer, &op); err != nil {
			t.Fatal(err)
		}
		if op == "DELETE" {
			delete(last, id)
			continue
		}
		n++
		seen[writer]++
		if p, ok := last[id]; ok {
			if tok < p.tok || (tok == p.tok && owner != p.owner) {
				t.Errorf("row %s: write %s (token %d, owner %s) accepted after token %d of owner %s", id, writer, tok, owner, p.tok, p.owner)
			}
		}
		last[id] = st{tok, owner}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for m := range accepted {
		if seen[m] != 1 {
			t.Errorf("write %s returned nil but was applied %d times", m, seen[m])
		}
	}
	for m := range refused {
		if seen[m] != 0 {
			t.Errorf("write %s was refused but applied %d times", m, seen[m])
		}
	}
	return n
}

// Many writers, database/sql and pgx connections at once, Update and
// Upsert mixed, tokens handed out in one order and arriving in another,
// equal tokens from different owners, a row created by racing Upserts:
// the audit log never shows an accepted token lower than one accepted
// before it on the row, nor an equal token from another owner, and every
// refused write left no trace.
func TestAdversary13SQLConcurrentHistory(t *testing.T) {
	db, table := postgres(t)
	db.SetMaxOpenConns(8)
	audit := adv13Audit(t, db, table)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	for _, id := range []string{"a", "b"} { // pre-existing rows, stamp 0
		if _, err := db.Exec("INSERT INTO "+table+" (id, writer, fence_token, fence_owner) VALUES ($1, 'init-'||$1, 0, '')", id); err != nil {
			t.Fatal(err)
		}
	}
	var next atomic.Int64
	var mu sync.Mutex
	accepted, refused := map[string]bool{}, map[string]bool{}
	var nStale, nOK, nNoRow int
	const writers, each = 6, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var x fence.Execer = fence.SQL(db)
			if w%2 == 1 {
				conn, err := pgx.Connect(ctx, adv13PGURL())
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close(context.Background())
				x = fencepgx.Wrap(conn)
			}
			owner := fmt.Sprint("owner-", w)
			for i := range each {
				var tok int64
				if i%5 == 4 {
					tok = next.Load() // likely another owner's token: equal tokens
				} else {
					tok = next.Add(1)
				}
				if tok == 0 {
					tok = next.Add(1)
				}
				s := stamp(lease.Token(tok), owner)
				m := fmt.Sprintf("w%d-%d", w, i)
				id := []string{"a", "b", "lazy"}[i%3]
				var err error
				if id == "lazy" || i%2 == 0 {
					err = tbl.Upsert(ctx, x, s, id, fence.Set("writer", m), fence.Set("balance", tok))
				} else {
					err = tbl.Update(ctx, x, s, id, fence.Set("writer", m), fence.Set("balance", tok))
				}
				mu.Lock()
				switch {
				case err == nil:
					nOK++
					accepted[m] = true
				case errors.Is(err, fence.ErrStale):
					nStale++
					refused[m] = true
					if !strings.Contains(err.Error(), fmt.Sprintf("token %d ", tok)) {
						t.Errorf("ErrStale text %q does not name token %d", err, tok)
					}
				case errors.Is(err, fence.ErrNoRow):
					nNoRow++
					refused[m] = true
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	n := adv13CheckHistory(t, db, audit, accepted, refused)
	t.Logf("%d accepted, %d stale, %d no row; %d row versions audited", nOK, nStale, nNoRow, n)
	if nStale == 0 || nOK == 0 || nOK+nStale+nNoRow != writers*each {
		t.Fatalf("accepted %d stale %d no row %d of %d", nOK, nStale, nNoRow, writers*each)
	}
	// The row holds the newest write: its stamp is the greatest audited.
	for _, id := range []string{"a", "b", "lazy"} {
		var tok, maxTok int64
		db.QueryRow("SELECT fence_token FROM "+table+" WHERE id = $1", id).Scan(&tok)
		db.QueryRow("SELECT max(tok) FROM "+audit+" WHERE id = $1", id).Scan(&maxTok)
		if tok != maxTok {
			t.Errorf("row %s: token %d, but %d was accepted", id, tok, maxTok)
		}
	}
}

// The caller passes its own transactions, at REPEATABLE READ and
// SERIALIZABLE: a stale write is refused or the transaction fails, never
// committed; every committed nil write is in the log once.
func TestAdversary13SQLCallerTransactions(t *testing.T) {
	db, table := postgres(t)
	db.SetMaxOpenConns(8)
	audit := adv13Audit(t, db, table)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	var next atomic.Int64
	var mu sync.Mutex
	accepted, refused := map[string]bool{}, map[string]bool{}
	var nOK, nStale, nSer int
	next.Store(1000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			iso := sql.LevelRepeatableRead
			if w%2 == 1 {
				iso = sql.LevelSerializable
			}
			for i := range 30 {
				tok := next.Add(1)
				if w == 0 && i > 0 {
					tok = int64(i) // a stale writer: below every other token
				}
				m := fmt.Sprintf("tx%d-%d", w, i)
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
				if err != nil {
					t.Error(err)
					return
				}
				// Read first, so the snapshot is older than other commits.
				var x int
				tx.QueryRow("SELECT count(*) FROM " + table).Scan(&x)
				err = tbl.Upsert(ctx, fence.SQL(tx), stamp(lease.Token(tok), fmt.Sprint("o", w)), "row", fence.Set("writer", m))
				if err == nil {
					err = tx.Commit()
				} else {
					tx.Rollback()
				}
				mu.Lock()
				switch {
				case err == nil:
					nOK++
					accepted[m] = true
				case errors.Is(err, fence.ErrStale):
					nStale++
					refused[m] = true
				case strings.Contains(err.Error(), "40001") || strings.Contains(err.Error(), "could not serialize"):
					nSer++
					refused[m] = true
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	adv13CheckHistory(t, db, audit, accepted, refused)
	t.Logf("%d committed, %d stale, %d serialization failures", nOK, nStale, nSer)
	if nOK == 0 || nStale == 0 {
		t.Fatal("nothing committed, or no stale write refused")
	}
}

// A zero stamp (no fenced lease) writes nothing on any backend.
func TestAdversary13ZeroStampWritesNothing(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	zero := []fence.Stamp{{}, {Owner: "someone"}}
	for _, s := range zero {
		if err := tbl.Upsert(ctx, fence.SQL(db), s, "z", fence.Set("balance", 1)); err == nil || errors.Is(err, fence.ErrStale) {
			t.Fatalf("Upsert with %+v = %v", s, err)
		}
		if err := tbl.Update(ctx, fence.SQL(db), s, "z", fence.Set("balance", 1)); err == nil {
			t.Fatal("zero Update accepted")
		}
		if err := tbl.Delete(ctx, fence.SQL(db), s, "z"); err == nil {
			t.Fatal("zero Delete accepted")
		}
		if err := fence.NewRedis(rdb).HSet(ctx, s, "z"); err == nil {
			t.Fatal("zero HSet accepted")
		}
		if err := fence.NewMemory[int]().Set(s, "z", 1); err == nil {
			t.Fatal("zero Memory write accepted")
		}
	}
	var n int
	db.QueryRow("SELECT count(*) FROM " + table).Scan(&n)
	if x, _ := rdb.Exists(ctx, "z").Result(); n != 0 || x != 0 {
		t.Fatalf("zero stamps left %d rows, %d Redis keys", n, x)
	}
	// Admits is exactly the documented rule.
	cases := []struct {
		s, cur fence.Stamp
		want   bool
	}{
		{stamp(2, "a"), stamp(1, "b"), true},
		{stamp(1, "a"), stamp(1, "a"), true},
		{stamp(1, "a"), stamp(1, "b"), false},
		{stamp(1, ""), stamp(1, "b"), false},
		{stamp(1, "a"), stamp(2, "a"), false},
		{stamp(1, "a"), fence.Stamp{}, true},
		{stamp(1<<62, "a"), stamp(1<<62-1, "a"), true},
	}
	for _, c := range cases {
		if got := c.s.Admits(c.cur); got != c.want {
			t.Errorf("%+v.Admits(%+v) = %v", c.s, c.cur, got)
		}
	}
}

// Redis: NOSCRIPT after SCRIPT FLUSH, lost replies (go-redis re-sends),
// huge values, look-alike field names, a key of another type.
func TestAdversary13RedisFaults(t *testing.T) {
	srv := leasetest.StartRedis(t)
	px := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	direct := srv.Client(t)
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	stored := func() (string, string, string) {
		h, err := direct.HGetAll(ctx, "rec").Result()
		if err != nil {
			t.Fatal(err)
		}
		return h["value"], h[fence.TokenField], h[fence.OwnerField]
	}

	if err := store.Set(ctx, stamp(100, "a"), "rec", "v1"); err != nil {
		t.Fatal(err)
	}
	// The script cache is flushed between writes: EVALSHA gets NOSCRIPT and
	// falls back to EVAL; the check still runs.
	direct.ScriptFlush(ctx)
	if err := store.Set(ctx, stamp(99, "b"), "rec", "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write after SCRIPT FLUSH = %v", err)
	}
	direct.ScriptFlush(ctx)
	if err := store.Set(ctx, stamp(101, "c"), "rec", "v2"); err != nil {
		t.Fatal(err)
	}
	// A lost reply: the write ran, the reply is cut, go-redis re-sends on a
	// new connection. The replay has the same stamp: accepted again, the
	// record as if written once.
	cut0 := px.Cut()
	px.Set(leasetest.CutNextReply)
	err := store.Set(ctx, stamp(102, "d"), "rec", "v3")
	if v, tok, own := stored(); v != "v3" || tok != "102" || own != "d" {
		t.Fatalf("after a lost reply (err %v): %s @%s/%s", err, v, tok, own)
	}
	if errors.Is(err, fence.ErrStale) {
		t.Fatalf("a replayed accepted write reported stale: %v", err)
	}
	// A stale write whose reply is lost: the replay is refused too.
	px.Set(leasetest.CutNextReply)
	err = store.Set(ctx, stamp(101, "c"), "rec", "late")
	if v, tok, _ := stored(); v != "v3" || tok != "102" {
		t.Fatalf("stale write with a lost reply (err %v) changed the record: %s @%s", err, v, tok)
	}
	if err == nil {
		t.Fatal("stale write with a lost reply returned nil")
	}
	t.Logf("replies cut: %d; stale write with a lost reply: %v", px.Cut()-cut0, err)
	if px.Cut()-cut0 != 2 {
		t.Fatalf("the proxy cut %d replies, want 2", px.Cut()-cut0)
	}

	// Huge values: written whole or not at all.
	big := strings.Repeat("x", 4<<20)
	if err := store.Set(ctx, stamp(200, "e"), "rec", big); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, stamp(199, "f"), "rec", big+"y"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale huge write = %v", err)
	}
	if v, tok, _ := stored(); len(v) != len(big) || tok != "200" {
		t.Fatalf("record after huge writes: %d bytes @%s", len(v), tok)
	}

	// Look-alike field names are data, and do not move the stamp.
	if err := store.HSet(ctx, stamp(200, "e"), "rec", fence.TokenField+" ", "9999", "_FENCE_TOKEN", "9999", "_fence_token\x00", "9999"); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, stamp(150, "g"), "rec", "forged"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write after look-alike fields = %v", err)
	}
	// Another owner with the same token, with no fields at all.
	if err := store.HSet(ctx, stamp(200, "other"), "rec"); !errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "another owner") {
		t.Fatalf("equal token, other owner, no fields = %v", err)
	}
	if _, tok, own := stored(); tok != "200" || own != "e" {
		t.Fatalf("stamp moved to %s/%s", tok, own)
	}

	// A key of another type: an error, nothing written.
	direct.Set(ctx, "str", "plain", 0)
	if err := store.Set(ctx, stamp(300, "h"), "str", "v"); err == nil {
		t.Fatal("write to a string key accepted")
	}
	if v, _ := direct.Get(ctx, "str").Result(); v != "plain" {
		t.Fatalf("string key became %q", v)
	}
}

// adv13Child runs in a child process (the test binary re-executed with
// ADV13_CHILD set): it takes a fenced lease, prints its stamp, waits for a
// line on stdin (the parent stops it meanwhile: a paused holder), then
// writes late with that stamp to Redis and PostgreSQL and prints the
// outcomes and how many stale writes its observer heard of.
func adv13Child() {
	out := func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("ADV13_REDIS"), ContextTimeoutEnabled: true})
	obs := &leasetest.Recorder{}
	c, err := lease.New(rdb, lease.WithObserver(obs))
	if err != nil {
		out("ERR %v", err)
		return
	}
	db, err := sql.Open("pgx", adv13PGURL())
	if err != nil {
		out("ERR %v", err)
		return
	}
	tbl := fence.Table{Name: os.Getenv("ADV13_TABLE"), Key: "id"}
	store := fence.NewRedis(rdb)
	in := bufio.NewReader(os.Stdin)
	err = c.Do(context.Background(), "job", lease.Spec{TTL: 600 * time.Millisecond, Deadline: 20 * time.Second, Fence: true}, func(ctx context.Context) error {
		s, err := fence.From(ctx)
		if err != nil {
			return err
		}
		if err := store.Set(ctx, s, "rec:{job}", "child-first"); err != nil {
			return err
		}
		if err := tbl.Upsert(ctx, fence.SQL(db), s, "job", fence.Set("writer", "child-first")); err != nil {
			return err
		}
		out("STAMP %d", s.Token)
		in.ReadString('\n') // the parent stops this process around here
		// A write already under way: it does not see the cancellation.
		w := context.WithoutCancel(ctx)
		out("REDIS %v", store.Set(w, s, "rec:{job}", "child-late"))
		out("SQL %v", tbl.Upsert(w, fence.SQL(db), s, "job", fence.Set("writer", "child-late")))
		return nil
	})
	out("DO %v", err)
	out("STALE-EVENTS %d", obs.Count(lease.EventStaleWriteRejected))
	c.Close()
	db.Close()
	rdb.Close()
}

func init() {
	if os.Getenv("ADV13_CHILD") == "1" {
		adv13Child()
		os.Exit(0)
	}
}

// A holder process is stopped (SIGSTOP) past its TTL; another takes the
// lease and writes; the first resumes and writes late with its stamp: both
// Redis and PostgreSQL refuse, the records keep the newer write, and the
// child's observer hears of both refusals.
func TestAdversary13PausedProcess(t *testing.T) {
	db, table := postgres(t)
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ADV13_CHILD=1", "ADV13_REDIS="+srv.Addr(), "ADV13_TABLE="+table)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	read := func() string {
		if !lines.Scan() {
			t.Fatalf("child ended early: %v", lines.Err())
		}
		return lines.Text()
	}
	var childTok uint64
	if l := read(); !strings.HasPrefix(l, "STAMP ") {
		t.Fatalf("child: %s", l)
	} else {
		fmt.Sscan(strings.TrimPrefix(l, "STAMP "), &childTok)
	}
	if err := proc.Stop(cmd.Process); err != nil {
		t.Fatal(err)
	}
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := fence.NewRedis(rdb)
	tbl := fence.Table{Name: table, Key: "id"}
	var mine lease.Token
	// Waits out the stopped child's TTL (no renewals while it is stopped).
	err = c.Do(context.Background(), "job", lease.Spec{TTL: 5 * time.Second, Deadline: 8 * time.Second, Wait: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		s, err := fence.From(ctx)
		if err != nil {
			return err
		}
		mine = s.Token
		if err := store.Set(ctx, s, "rec:{job}", "parent"); err != nil {
			return err
		}
		return tbl.Upsert(ctx, fence.SQL(db), s, "job", fence.Set("writer", "parent"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if uint64(mine) <= childTok {
		t.Fatalf("parent token %d not above the child's %d", mine, childTok)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	fmt.Fprintln(stdin, "go")
	got := map[string]string{}
	for lines.Scan() {
		k, v, _ := strings.Cut(lines.Text(), " ")
		got[k] = v
	}
	cmd.Wait()
	t.Logf("child token %d, parent token %d; child: %v", childTok, mine, got)
	for _, k := range []string{"REDIS", "SQL"} {
		if !strings.Contains(got[k], fence.ErrStale.Error()) {
			t.Errorf("late %s write from the resumed holder: %q, want stale", k, got[k])
		}
	}
	if got["STALE-EVENTS"] != "2" {
		t.Errorf("child's observer heard %q stale writes, want 2", got["STALE-EVENTS"])
	}
	if v, _ := store.Get(context.Background(), "rec:{job}"); v != "parent" {
		t.Errorf("Redis record %q", v)
	}
	var w string
	db.QueryRow("SELECT writer FROM " + table + " WHERE id = 'job'").Scan(&w)
	if w != "parent" {
		t.Errorf("SQL row written by %q", w)
	}
}

// Kept leases: the second call writes with the same stamp (accepted);
// then the kept lease is forced away and another client writes; a late
// write from the earlier call is refused everywhere and reported; the
// keeper's next call writes with a token above the other client's.
func TestAdversary13KeptLeaseForcedAway(t *testing.T) {
	db, table := postgres(t)
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	obs := &leasetest.Recorder{}
	c1, err := lease.New(rdb, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx := context.Background()
	store := fence.NewRedis(rdb)
	mem := fence.NewMemory[string]()
	tbl := fence.Table{Name: table, Key: "id"}
	write := func(ctx context.Context, s fence.Stamp, v string) []error {
		return []error{
			store.Set(ctx, s, "rec:{k}", v),
			tbl.Upsert(ctx, fence.SQL(db), s, "k", fence.Set("writer", v)),
			mem.Set(s, "k", v),
		}
	}
	allNil := func(errs []error) bool { return errors.Join(errs...) == nil }
	spec := lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, Fence: true, Keep: 5 * time.Second}
	var s1, s2 fence.Stamp
	var late context.Context
	for i, dst := range []*fence.Stamp{&s1, &s2} {
		err := c1.Do(ctx, "k", spec, func(ctx context.Context) error {
			s, err := fence.From(ctx)
			*dst = s
			if err != nil {
				return err
			}
			late = context.WithoutCancel(ctx)
			return errors.Join(write(ctx, s, fmt.Sprint("keeper-", i))...)
		})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if s1.Token != s2.Token || s1.Owner != s2.Owner {
		t.Fatalf("kept lease: second call's stamp %d/%s, first %d/%s", s2.Token, s2.Owner, s1.Token, s1.Owner)
	}
	if r, err := c2.ForceRelease(ctx, "k", s1.Owner); err != nil || r != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v", r, err)
	}
	var s3 fence.Stamp
	err = c2.Do(ctx, "k", lease.Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		s3, _ = fence.From(ctx)
		return errors.Join(write(ctx, s3, "other")...)
	})
	if err != nil || s3.Token <= s1.Token {
		t.Fatalf("other client: token %d (keeper's %d), %v", s3.Token, s1.Token, err)
	}
	s, _ := fence.From(late)
	errs := write(late, s, "keeper-late")
	for i, err := range errs {
		if !errors.Is(err, fence.ErrStale) {
			t.Errorf("late write %d from the forced-away kept lease = %v", i, err)
		}
	}
	if n := obs.Count(lease.EventStaleWriteRejected); n != 3 { // Redis, SQL, Memory
		t.Errorf("%d stale writes reported, want 3", n)
	}
	var s4 fence.Stamp
	err = c1.Do(ctx, "k", spec, func(ctx context.Context) error {
		s4, _ = fence.From(ctx)
		if errs := write(ctx, s4, "keeper-again"); !allNil(errs) {
			return errors.Join(errs...)
		}
		return nil
	})
	t.Logf("tokens: kept %d, other %d, keeper again %d (%v)", s1.Token, s3.Token, s4.Token, err)
	if err != nil || s4.Token <= s3.Token {
		t.Fatalf("keeper's call after the loss: token %d (other %d): %v", s4.Token, s3.Token, err)
	}
	if v, _ := store.Get(ctx, "rec:{k}"); v != "keeper-again" {
		t.Fatalf("record %q", v)
	}
}

// Leader terms are fenced: a leader that stepped down (or was replaced)
// writes late with its term's stamp and is refused.
func TestAdversary13LeaderTerms(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	store := fence.NewRedis(rdb)
	mem := fence.NewMemory[int]()
	spec := lease.LeadSpec{TTL: 2 * time.Second, Backoff: 50 * time.Millisecond}
	term := func(owner string) (fence.Stamp, *leasetest.Recorder) {
		obs := &leasetest.Recorder{}
		c, err := lease.New(rdb, lease.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got := make(chan fence.Stamp, 1)
		sp := spec
		sp.Owner = owner
		done := make(chan error, 1)
		go func() {
			done <- c.Lead(ctx, "ldr", sp, func(ctx context.Context) error {
				s, err := fence.From(ctx)
				if err != nil {
					return err
				}
				if err := store.Set(ctx, s, "rec:{ldr}", owner); err != nil {
					return err
				}
				if err := mem.Set(s, "ldr", len(owner)); err != nil {
					return err
				}
				got <- s
				<-ctx.Done()
				return nil
			})
		}()
		var s fence.Stamp
		select {
		case s = <-got:
		case err := <-done:
			t.Fatalf("%s: Lead returned %v before a term", owner, err)
		}
		cancel() // step down
		<-done
		return s, obs
	}
	s1, obs1 := term("node-1")
	s2, _ := term("node-22")
	if s2.Token <= s1.Token || !strings.HasSuffix(s1.Owner, "/node-1") {
		t.Fatalf("terms %d (%s) then %d (%s)", s1.Token, s1.Owner, s2.Token, s2.Owner)
	}
	if err := store.Set(context.Background(), s1, "rec:{ldr}", "node-1-late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late write of term 1 = %v", err)
	}
	if err := mem.Set(s1, "ldr", -1); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late memory write of term 1 = %v", err)
	}
	if v, _ := store.Get(context.Background(), "rec:{ldr}"); v != "node-22" {
		t.Fatalf("record %q", v)
	}
	if n := obs1.Count(lease.EventStaleWriteRejected); n != 2 {
		t.Fatalf("term 1's observer heard %d stale writes, want 2", n)
	}
}

// ---- Regressions: a refused SQL write is explained by a second statement,
// and the row may change in between (found by adversary round 13).

// adv13Hook runs before between a Table write and the SELECT that explains
// a write that changed no row: another writer's statement, at the worst
// moment.
type adv13Hook struct {
	fence.Execer
	before func()
}

func (h adv13Hook) QueryStamp(ctx context.Context, q string, args ...any) (int64, string, bool, error) {
	if h.before != nil {
		h.before()
	}
	return h.Execer.QueryStamp(ctx, q, args...)
}

// A stale Upsert the row refused is ErrStale even when the newer holder
// deleted the row before the explaining read (it returned nil: the caller
// was told its data was stored, and nothing was).
func TestAdversary13UpsertRefusedThenDeletedIsStale(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	if err := tbl.Upsert(ctx, fence.SQL(db), stamp(10, "newer"), "r", fence.Set("balance", 10)); err != nil {
		t.Fatal(err)
	}
	x := adv13Hook{fence.SQL(db), func() {
		if err := tbl.Delete(ctx, fence.SQL(db), stamp(11, "newer"), "r"); err != nil {
			t.Error(err)
		}
	}}
	err := tbl.Upsert(ctx, x, stamp(5, "stale"), "r", fence.Set("balance", 555))
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + table + " WHERE id = 'r'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, fence.ErrStale) || n != 0 {
		t.Fatalf("stale Upsert = %v with %d rows after it; want ErrStale and none", err, n)
	}
	t.Logf("%v", err)
	// The row changed to one whose stamp would admit the write (deleted,
	// then recreated by an older writer): still the refusal it was.
	if err := tbl.Upsert(ctx, fence.SQL(db), stamp(10, "newer"), "r", fence.Set("balance", 10)); err != nil {
		t.Fatal(err)
	}
	x.before = func() {
		if err := tbl.Delete(ctx, fence.SQL(db), stamp(10, "newer"), "r"); err != nil {
			t.Error(err)
		}
		if err := tbl.Upsert(ctx, fence.SQL(db), stamp(2, "older"), "r", fence.Set("balance", 2)); err != nil {
			t.Error(err)
		}
	}
	err = tbl.Upsert(ctx, x, stamp(5, "stale"), "r", fence.Set("balance", 555))
	var bal int64
	if err := db.QueryRow("SELECT balance FROM " + table + " WHERE id = 'r'").Scan(&bal); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, fence.ErrStale) || bal != 2 {
		t.Fatalf("stale Upsert = %v, balance %d; want ErrStale and the older writer's 2", err, bal)
	}
}

// Update of an absent row is ErrNoRow when a row that admits the stamp
// appears before the explaining read (it was ErrStale, "token 5 is older
// than the accepted 3", or "granted to another owner" for the same owner).
func TestAdversary13UpdateAbsentRowIsNoRow(t *testing.T) {
	for _, other := range []fence.Stamp{stamp(3, "older"), stamp(5, "me")} {
		db, table := postgres(t)
		ctx := context.Background()
		tbl := fence.Table{Name: table, Key: "id"}
		x := adv13Hook{fence.SQL(db), func() {
			if err := tbl.Upsert(ctx, fence.SQL(db), other, "r", fence.Set("balance", 3)); err != nil {
				t.Error(err)
			}
		}}
		err := tbl.Update(ctx, x, stamp(5, "me"), "r", fence.Set("balance", 5))
		if !errors.Is(err, fence.ErrNoRow) {
			t.Errorf("Update of an absent row, then a row stamped %d/%s appeared: %v; want ErrNoRow", other.Token, other.Owner, err)
		}
		// A Delete in the same spot: the row was absent, which is not an
		// error, whatever appeared after.
		x.before = func() {
			if err := tbl.Upsert(ctx, fence.SQL(db), other, "r2", fence.Set("balance", 3)); err != nil {
				t.Error(err)
			}
		}
		if err := tbl.Delete(ctx, x, stamp(6, "x"), "r2"); err != nil {
			t.Errorf("Delete of an absent row, then a row stamped %d/%s appeared: %v; want nil", other.Token, other.Owner, err)
		}
	}
}

// Tokens above math.MaxInt64 do not wrap to negative bigints (token 5 was
// accepted after token 2^63).
func TestAdversary13HugeTokenRefusedBySQL(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	for _, write := range []func() error{
		func() error { return tbl.Upsert(ctx, fence.SQL(db), stamp(1<<63, "a"), "r", fence.Set("balance", 1)) },
		func() error { return tbl.Update(ctx, fence.SQL(db), stamp(1<<63, "a"), "r", fence.Set("balance", 1)) },
		func() error { return tbl.Delete(ctx, fence.SQL(db), stamp(1<<63, "a"), "r") },
	} {
		if err := write(); err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow) {
			t.Errorf("a token above MaxInt64: %v; want an error of its own", err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows %d (%v); want none", n, err)
	}
	if err := tbl.Upsert(ctx, fence.SQL(db), stamp(1<<63-1, "a"), "r", fence.Set("balance", 1)); err != nil {
		t.Fatalf("MaxInt64: %v", err)
	}
	if err := tbl.Upsert(ctx, fence.SQL(db), stamp(5, "b"), "r", fence.Set("balance", 2)); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 5 after MaxInt64: %v; want ErrStale", err)
	}
}

// Under load: a writer that upserts and deletes the row in a loop with
// growing tokens, and a stale writer upserting with token 1. Every nil
// the stale writer gets must be a write the audit log shows.
func TestAdversary13StaleUpsertNeverNilWithoutWrite(t *testing.T) {
	db, table := postgres(t)
	audit := adv13Audit(t, db, table)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var tok atomic.Int64
	tok.Store(100)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := lease.Token(tok.Add(1))
			if err := tbl.Upsert(ctx, fence.SQL(db), stamp(n, "newer"), "r", fence.Set("writer", "newer")); err != nil {
				t.Error(err)
			}
			if err := tbl.Delete(ctx, fence.SQL(db), stamp(n, "newer"), "r"); err != nil {
				t.Error(err)
			}
		}
	}()
	var ok, stale, lies int
	for i := 0; i < 600; i++ {
		m := fmt.Sprint("stale-", i)
		err := tbl.Upsert(ctx, fence.SQL(db), stamp(1, "stale"), "r", fence.Set("writer", m))
		switch {
		case err == nil:
			ok++
			var n int
			if err := db.QueryRow("SELECT count(*) FROM "+audit+" WHERE writer = $1 AND op <> 'DELETE'", m).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				lies++
			}
		case errors.Is(err, fence.ErrStale):
			stale++
		default:
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("stale writer: %d accepted (row deleted in between), %d ErrStale, %d nil without a write", ok, stale, lies)
	if lies > 0 {
		t.Fatalf("%d stale Upserts returned nil and wrote nothing", lies)
	}
	if stale == 0 {
		t.Fatal("no stale write was refused: the race was not exercised")
	}
}

// An Upsert the row refused is ErrStale even when the explaining read
// fails (it returned the read's error: a caller testing for ErrStale
// would retry, and the observer heard nothing). Found by round 14.
func TestAdversary13UpsertRefusedReadFailsIsStale(t *testing.T) {
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	if err := tbl.Upsert(context.Background(), fence.SQL(db), stamp(10, "newer"), "r"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := adv13Hook{fence.SQL(db), cancel}
	err := tbl.Upsert(ctx, x, stamp(5, "stale"), "r", fence.Set("balance", 5))
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("refused Upsert whose explaining read failed = %v; want ErrStale", err)
	}
	t.Logf("%v", err)
	var tok int64
	if err := db.QueryRow("SELECT fence_token FROM " + table + " WHERE id = 'r'").Scan(&tok); err != nil || tok != 10 {
		t.Fatalf("row token %d (%v); want 10", tok, err)
	}
}
