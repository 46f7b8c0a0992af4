package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
)

// Adversary round 14: attacks on the round-13 fix (a refused SQL write is
// explained by a second statement; tokens above MaxInt64 are refused).

func adv14Pgx(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// adv14Row reads the row's balance and stamp; found false when absent.
func adv14Row(t *testing.T, db *sql.DB, table, key string) (bal, tok int64, owner string, found bool) {
	t.Helper()
	err := db.QueryRow("SELECT balance, fence_token, fence_owner FROM "+table+" WHERE id = $1", key).Scan(&bal, &tok, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return bal, tok, owner, true
}

// Through fencepgx (a connection and a caller's transaction), every
// refused write explained after the row changed: Upsert is ErrStale
// whatever happened, Update is ErrNoRow once the row is gone and ErrStale
// (naming the newer token) once it moved on, Delete is nil once the row is
// gone and ErrStale once it moved on. The stale writer never changes the
// row.
func TestAdversary14PgxRefusedThenRowChanged(t *testing.T) {
	db, table := postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := adv14Pgx(t)
	tbl := fence.Table{Name: table, Key: "id"}
	other := fence.SQL(db)
	seed := func(key string) {
		t.Helper()
		if err := tbl.Upsert(ctx, other, stamp(10, "newer"), key, fence.Set("balance", 10)); err != nil {
			t.Fatal(err)
		}
	}
	deleted := func(key string) func() {
		return func() {
			if err := tbl.Delete(ctx, other, stamp(10, "newer"), key); err != nil {
				t.Error(err)
			}
		}
	}
	advanced := func(key string) func() {
		return func() {
			if err := tbl.Update(ctx, other, stamp(12, "newest"), key, fence.Set("balance", 12)); err != nil {
				t.Error(err)
			}
		}
	}
	recreatedOlder := func(key string) func() {
		return func() {
			deleted(key)()
			if err := tbl.Upsert(ctx, other, stamp(2, "older"), key, fence.Set("balance", 2)); err != nil {
				t.Error(err)
			}
		}
	}
	type tc struct {
		name   string
		change func(string) func()
		write  func(fence.Execer, string) error
		check  func(error) bool
		bal    int64 // balance after; -1: no row
	}
	up := func(x fence.Execer, k string) error {
		return tbl.Upsert(ctx, x, stamp(5, "stale"), k, fence.Set("balance", 555))
	}
	upd := func(x fence.Execer, k string) error {
		return tbl.Update(ctx, x, stamp(5, "stale"), k, fence.Set("balance", 555))
	}
	del := func(x fence.Execer, k string) error { return tbl.Delete(ctx, x, stamp(5, "stale"), k) }
	isStale := func(err error) bool { return errors.Is(err, fence.ErrStale) }
	isNoRow := func(err error) bool { return errors.Is(err, fence.ErrNoRow) && !errors.Is(err, fence.ErrStale) }
	isNil := func(err error) bool { return err == nil }
	staleNewer := func(err error) bool {
		return isStale(err) && strings.Contains(err.Error(), "older than the accepted 12")
	}
	cases := []tc{
		{"upsert/deleted", deleted, up, isStale, -1},
		{"upsert/advanced", advanced, up, staleNewer, 12},
		{"upsert/recreated-older", recreatedOlder, up, isStale, 2},
		{"update/deleted", deleted, upd, isNoRow, -1},
		{"update/advanced", advanced, upd, staleNewer, 12},
		{"update/recreated-older", recreatedOlder, upd, isNoRow, 2},
		{"delete/deleted", deleted, del, isNil, -1},
		{"delete/advanced", advanced, del, staleNewer, 12},
		{"delete/recreated-older", recreatedOlder, del, isNil, 2},
	}
	for i, c := range cases {
		for _, inTx := range []bool{false, true} {
			if inTx && strings.HasPrefix(c.name, "upsert") {
				// A refused ON CONFLICT DO UPDATE locks the row until
				// the transaction ends: no other writer can change it
				// before the read.
				continue
			}
			key := fmt.Sprintf("%s-%d-%v", c.name, i, inTx)
			seed(key)
			var x fence.Execer = fencepgx.Wrap(conn)
			var tx pgx.Tx
			if inTx {
				var err error
				if tx, err = conn.Begin(ctx); err != nil {
					t.Fatal(err)
				}
				x = fencepgx.Wrap(tx)
			}
			err := c.write(adv13Hook{x, c.change(key)}, key)
			if tx != nil {
				if cerr := tx.Commit(ctx); cerr != nil {
					t.Fatal(cerr)
				}
			}
			if !c.check(err) {
				t.Errorf("%s (tx %v): %v", c.name, inTx, err)
			}
			bal, _, _, found := adv14Row(t, db, table, key)
			if (c.bal < 0) == found || (found && bal != c.bal) {
				t.Errorf("%s (tx %v): row found %v balance %d; want %d", c.name, inTx, found, bal, c.bal)
			}
		}
	}
}

// Stamps above MaxInt64 through pgx, on an absent row, on a row, and in
// a caller's transaction (which stays usable): an error of their own,
// nothing written. MaxInt64 itself is stored and compared exactly.
func TestAdversary14HugeTokensPgx(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	conn := adv14Pgx(t)
	tbl := fence.Table{Name: table, Key: "id"}
	if err := tbl.Upsert(ctx, fence.SQL(db), stamp(7, "a"), "present", fence.Set("balance", 7)); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []lease.Token{1 << 63, 1<<63 + 1, math.MaxUint64} {
		for _, x := range []fence.Execer{fencepgx.Wrap(conn), fencepgx.Wrap(tx), fence.SQL(db)} {
			for _, key := range []string{"absent", "present"} {
				s := stamp(tok, "huge")
				for _, err := range []error{
					tbl.Upsert(ctx, x, s, key, fence.Set("balance", 1)),
					tbl.Update(ctx, x, s, key, fence.Set("balance", 1)),
					tbl.Delete(ctx, x, s, key),
				} {
					if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow) {
						t.Errorf("token %d on %s: %v; want an error of its own", tok, key, err)
					}
				}
			}
		}
	}
	// The transaction was not aborted by the refusals: nothing was sent.
	if err := tbl.Update(ctx, fencepgx.Wrap(tx), stamp(8, "a"), "present", fence.Set("balance", 8)); err != nil {
		t.Fatalf("Update in the transaction after the refusals: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if bal, tok, _, _ := adv14Row(t, db, table, "present"); bal != 8 || tok != 8 {
		t.Fatalf("present row: balance %d token %d; want 8, 8", bal, tok)
	}
	if _, _, _, found := adv14Row(t, db, table, "absent"); found {
		t.Fatal("a huge token created a row")
	}
	x := fencepgx.Wrap(conn)
	if err := tbl.Upsert(ctx, x, stamp(math.MaxInt64, "max"), "m", fence.Set("balance", 1)); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, x, stamp(math.MaxInt64-1, "b"), "m", fence.Set("balance", 2)); !strings.Contains(fmt.Sprint(err), "older than the accepted 9223372036854775807") {
		t.Fatalf("MaxInt64-1 after MaxInt64: %v", err)
	}
	if err := tbl.Update(ctx, x, stamp(math.MaxInt64, "other"), "m", fence.Set("balance", 2)); !strings.Contains(fmt.Sprint(err), "granted to another owner") {
		t.Fatalf("MaxInt64 by another owner: %v", err)
	}
	if err := tbl.Delete(ctx, x, stamp(math.MaxInt64, "max"), "m"); err != nil {
		t.Fatal(err)
	}
}

// Plain concurrency, database/sql and pgx: a newer writer creates,
// updates and deletes the row in a loop with growing tokens while two
// stale writers (token 1, each its own owner) Update, Delete and Upsert
// it. Per row life (insert to delete) the audit log never shows a token
// going back or an equal token from another owner; every write that
// returned nil is in the log exactly once, every refused one is not; an
// ErrStale text never names an accepted token older than the writer's.
func TestAdversary14StaleWritersRaceDeleteRecreate(t *testing.T) {
	db, table := postgres(t)
	db.SetMaxOpenConns(8)
	audit := adv13Audit(t, db, table)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	var tok atomic.Int64
	tok.Store(100)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			n := lease.Token(tok.Add(1))
			if err := tbl.Upsert(ctx, fence.SQL(db), stamp(n, "newer"), "r", fence.Set("writer", fmt.Sprint("newer-u-", i))); err != nil {
				t.Error(err)
			}
			if err := tbl.Delete(ctx, fence.SQL(db), stamp(n, "newer"), "r"); err != nil {
				t.Error(err)
			}
		}
	}()
	var stale, norow, nilDel, applied atomic.Int64
	var mu sync.Mutex
	accepted, refused := map[string]bool{}, map[string]bool{}
	olderRE := "older than the accepted "
	var sw sync.WaitGroup
	for w := 0; w < 2; w++ {
		var x fence.Execer = fence.SQL(db)
		if w == 1 {
			x = fencepgx.Wrap(adv14Pgx(t))
		}
		sw.Add(1)
		go func(w int, x fence.Execer) {
			defer sw.Done()
			s := stamp(1, fmt.Sprint("stale", w))
			for i := 0; i < 120; i++ {
				mu2 := fmt.Sprintf("stale-%d-%d-u", w, i)
				mu3 := fmt.Sprintf("stale-%d-%d-i", w, i)
				for op, m := range []string{mu2, "", mu3} {
					var err error
					switch op {
					case 0:
						err = tbl.Update(ctx, x, s, "r", fence.Set("writer", m))
					case 1:
						err = tbl.Delete(ctx, x, s, "r")
					case 2:
						err = tbl.Upsert(ctx, x, s, "r", fence.Set("writer", m))
					}
					switch {
					case errors.Is(err, fence.ErrStale):
						stale.Add(1)
						if j := strings.Index(err.Error(), olderRE); j >= 0 {
							var n int64
							fmt.Sscan(err.Error()[j+len(olderRE):], &n)
							if n <= 1 {
								t.Errorf("op %d: %v", op, err)
							}
						}
					case errors.Is(err, fence.ErrNoRow) && op == 0:
						norow.Add(1)
					case err == nil && op == 1:
						nilDel.Add(1)
						continue
					case err == nil:
						applied.Add(1)
						mu.Lock()
						accepted[m] = true
						mu.Unlock()
						continue
					default:
						t.Errorf("op %d: %v", op, err)
					}
					if m != "" {
						mu.Lock()
						refused[m] = true
						mu.Unlock()
					}
				}
			}
		}(w, x)
	}
	sw.Wait()
	close(stop)
	wg.Wait()

	adv13CheckHistory(t, db, audit, accepted, refused)
	t.Logf("stale writers: %d ErrStale, %d ErrNoRow, %d Delete nil, %d applied", stale.Load(), norow.Load(), nilDel.Load(), applied.Load())
	if stale.Load() == 0 || norow.Load() == 0 {
		t.Fatal("the race was not exercised")
	}
}
