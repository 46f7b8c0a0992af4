package fence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func stamp(tok lease.Token, owner string) fence.Stamp { return fence.Stamp{Token: tok, Owner: owner} }

func TestMemory(t *testing.T) {
	m := fence.NewMemory[int]()
	steps := []struct {
		s    fence.Stamp
		v    int
		fail bool
	}{
		{stamp(10, "a"), 1, false},
		{stamp(10, "a"), 2, false}, // same owner, same grant: a second write
		{stamp(10, "b"), 3, true},  // same token, another owner: a re-issued token
		{stamp(9, "c"), 4, true},   // older
		{stamp(11, "d"), 5, false}, // newer
	}
	for i, st := range steps {
		err := m.Set(st.s, "k", st.v)
		if st.fail != errors.Is(err, fence.ErrStale) || (!st.fail && err != nil) {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if v, s, _ := m.Get("k"); v != 5 || s.Token != 11 {
		t.Fatalf("final %d @%d, want 5 @11", v, s.Token)
	}
	if err := m.Set(fence.Stamp{}, "k", 0); err == nil {
		t.Fatal("a zero stamp was accepted")
	}
}

// postgres opens the test database (LEASETEST_POSTGRES_URL, or the local
// server the CI script starts) and creates a fresh table.
func postgres(t *testing.T) (*sql.DB, string) {
	t.Helper()
	url := os.Getenv("LEASETEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL at %s: %v (set LEASETEST_POSTGRES_URL)", url, err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	table := "fence_test_" + hex.EncodeToString(b)
	if _, err := db.Exec(fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0, writer text, fence_token bigint NOT NULL, fence_owner text NOT NULL)`, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + table) })
	return db, table
}

func TestSQLWrites(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	x := fence.SQL(db)

	if err := tbl.Update(ctx, x, stamp(5, "a"), "acct", fence.Set("balance", 1)); !errors.Is(err, fence.ErrNoRow) {
		t.Fatalf("Update of a missing row = %v, want ErrNoRow", err)
	}
	if err := tbl.Upsert(ctx, x, stamp(5, "a"), "acct", fence.Set("balance", 10)); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, x, stamp(5, "a"), "acct", fence.Set("balance", 11)); err != nil {
		t.Fatalf("same owner, same token: %v", err)
	}
	for _, s := range []fence.Stamp{stamp(5, "b"), stamp(4, "a")} {
		if err := tbl.Update(ctx, x, s, "acct", fence.Set("balance", 99)); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Update with %+v = %v, want ErrStale", s, err)
		}
		if err := tbl.Upsert(ctx, x, s, "acct", fence.Set("balance", 99)); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Upsert with %+v = %v, want ErrStale", s, err)
		}
		if err := tbl.Delete(ctx, x, s, "acct"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Delete with %+v = %v, want ErrStale", s, err)
		}
	}
	var bal int64
	db.QueryRow("SELECT balance FROM " + table + " WHERE id = 'acct'").Scan(&bal)
	if bal != 11 {
		t.Fatalf("balance %d: a stale write got through", bal)
	}
	if err := tbl.Delete(ctx, x, stamp(6, "c"), "acct"); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Delete(ctx, x, stamp(6, "c"), "acct"); err != nil {
		t.Fatalf("deleting a missing row: %v", err)
	}
}

// Concurrent writers with interleaved tokens: stale writes are refused,
// the newest token always lands, and nothing else fails.
func TestSQLConcurrentWriters(t *testing.T) {
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	const writers, each = 6, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	stale, ok := 0, 0
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tok := lease.Token(1 + i*writers + w) // interleaved across writers
				err := tbl.Upsert(context.Background(), fence.SQL(db), stamp(tok, fmt.Sprint("w", w)), "row",
					fence.Set("writer", fmt.Sprint(w)), fence.Set("balance", int64(tok)))
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, fence.ErrStale):
					stale++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var tok, bal int64
	db.QueryRow("SELECT fence_token, balance FROM "+table+" WHERE id = 'row'").Scan(&tok, &bal)
	if tok != writers*each || bal != tok {
		t.Fatalf("final token %d balance %d, want both %d (the newest write)", tok, bal, writers*each)
	}
	t.Logf("%d writes accepted, %d stale refused", ok, stale)
	if ok+stale != writers*each || stale == 0 {
		t.Fatalf("accepted %d + stale %d", ok, stale)
	}
}

func TestPgxAdapter(t *testing.T) {
	_, table := postgres(t)
	url := os.Getenv("LEASETEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tbl := fence.Table{Name: table, Key: "id"}
	x := fencepgx.Wrap(conn)
	if err := tbl.Upsert(context.Background(), x, stamp(7, "a"), "k", fence.Set("balance", 1)); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(context.Background(), x, stamp(6, "b"), "k", fence.Set("balance", 2)); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Update through pgx = %v", err)
	}
	if err := tbl.Update(context.Background(), x, stamp(8, "b"), "missing", fence.Set("balance", 2)); !errors.Is(err, fence.ErrNoRow) {
		t.Fatalf("Update of a missing row through pgx = %v", err)
	}
}

// Through real leases: stamps come from the context, a stale holder's write
// to Redis is refused and reported to the observer.
func TestRedisWithLeases(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	obs := &leasetest.Recorder{}
	c, err := lease.New(rdb, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := fence.NewRedis(rdb)
	spec := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}
	var old fence.Stamp
	var oldCtx context.Context
	err = c.Do(context.Background(), "acct", spec, func(ctx context.Context) error {
		s, err := fence.From(ctx)
		if err != nil {
			return err
		}
		old, oldCtx = s, ctx
		if err := store.Set(ctx, s, "rec:{acct}", "v1"); err != nil {
			return err
		}
		return store.HSet(ctx, s, "rec:{acct}", "note", "again") // same grant, second write
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Do(context.Background(), "acct", spec, func(ctx context.Context) error {
		s, _ := fence.From(ctx)
		return store.Set(ctx, s, "rec:{acct}", "v2")
	})
	if err != nil {
		t.Fatal(err)
	}
	// The first holder writes late. Its lease context is cancelled (a write
	// on it fails before reaching Redis); a write on another context, or one
	// already in flight, reaches the resource and must be refused there.
	if err := store.Set(oldCtx, old, "rec:{acct}", "late"); !errors.Is(err, context.Canceled) {
		t.Fatalf("write on the ended lease's context = %v", err)
	}
	err = store.Set(context.Background(), old, "rec:{acct}", "late")
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late write = %v, want ErrStale", err)
	}
	if v, _ := store.Get(context.Background(), "rec:{acct}"); v != "v2" {
		t.Fatalf("value %q, want v2", v)
	}
	n := 0
	for _, e := range obs.Events() {
		if e.Kind == lease.EventStaleWriteRejected && e.Token == old.Token {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("stale write reported %d times, want 1", n)
	}
	if _, err := fence.From(context.Background()); !errors.Is(err, fence.ErrNoLease) {
		t.Fatalf("From without a lease = %v", err)
	}
}

// A writer cannot forge the stamp through the reserved fields: a stale
// holder that tried to overwrite _fence_token would otherwise have its
// older token's writes accepted afterwards.
func TestRedisRefusesReservedFields(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	newer, stale := stamp(200, "new-owner"), stamp(100, "old-owner")
	if err := store.Set(ctx, newer, "rec", "v-new"); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{fence.TokenField, fence.OwnerField, fence.WritesField} {
		err := store.HSet(ctx, newer, "rec", "note", "x", field, "999999")
		if err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Fatalf("HSet with %s = %v, want an error naming the reserved field", field, err)
		}
	}
	if err := store.Set(ctx, stale, "rec", "v-old"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older token after the forging attempts = %v, want ErrStale", err)
	}
	got, _ := rdb.HGetAll(ctx, "rec").Result()
	if got[fence.TokenField] != "200" || got[fence.OwnerField] != "new-owner" || got["value"] != "v-new" || got["note"] != "" {
		t.Fatalf("record %v: the stamp or the data changed", got)
	}
}

// On a Redis Cluster each record is one key, so each fenced write is one
// script on one slot, whichever shard owns it.
func TestRedisOnCluster(t *testing.T) {
	cl := leasetest.StartCluster(t, 3)
	store := fence.NewRedis(cl.Client(t))
	ctx := context.Background()
	for i := range 9 { // keys on every shard
		key := fmt.Sprintf("rec:%d", i)
		if err := store.HSet(ctx, stamp(20, "a"), key, "qty", "1", "note", "x"); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := store.Set(ctx, stamp(19, "b"), key, "stale"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s: stale write = %v", key, err)
		}
		if err := store.Set(ctx, stamp(21, "b"), key, "new"); err != nil {
			t.Fatalf("%s: newer write: %v", key, err)
		}
		if v, _ := store.Get(ctx, key); v != "new" {
			t.Fatalf("%s = %q", key, v)
		}
	}
}
