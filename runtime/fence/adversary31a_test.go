package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv31aCounterKey finds the fence counter key of the only lease taken so
// far on srv (the key ending in ":f").
func adv31aCounterKey(t *testing.T, direct *redis.Client) string {
	t.Helper()
	keys, err := direct.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":f") {
			return k
		}
	}
	t.Fatalf("no fence counter among %q", keys)
	return ""
}

// The lease package mints exact tokens past 2^53 (a counter set from
// outside, see lease's TestAdversary27_FenceCounterPast2To53), so the Redis
// store must compare them exactly too: a newer grant's token must be
// accepted and an older one refused, even where doubles skip integers.
func TestAdversary31a_RedisTokensPast2To53(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	direct := srv.Client(t)
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	spec := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}
	write := func(v string) (fence.Stamp, error) {
		var st fence.Stamp
		var werr error
		err := c.Do(ctx, "big", spec, func(ctx context.Context) error {
			st, _ = fence.From(ctx)
			werr = store.Set(ctx, st, "rec:{big}", v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return st, werr
	}
	if _, err := write("v0"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Set(ctx, adv31aCounterKey(t, direct), "9007199254740991", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	s1, err := write("v1")
	if err != nil || s1.Token != 9007199254740992 {
		t.Fatalf("grant at 2^53: token %d, write %v", s1.Token, err)
	}
	s2, err := write("v2")
	if s2.Token != 9007199254740993 {
		t.Fatalf("next grant: token %d, want 2^53+1", s2.Token)
	}
	if err != nil {
		t.Fatalf("the newer grant's write (token %d after %d) = %v, want accepted", s2.Token, s1.Token, err)
	}
	if v, _ := store.Get(ctx, "rec:{big}"); v != "v2" {
		t.Fatalf("value %q, want v2", v)
	}
	// An older token presented with the stored owner is still older.
	older := fence.Stamp{Token: s2.Token - 1, Owner: s2.Owner}
	if err := store.Set(ctx, older, "rec:{big}", "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token %d after %d from the same owner = %v, want ErrStale", older.Token, s2.Token, err)
	}
	// Hand-made stamps up to 2^64-1 compare exactly as well.
	steps := []struct {
		tok   lease.Token
		owner string
		ok    bool
	}{
		{18446744073709551614, "a", true},
		{18446744073709551615, "b", true},
		{18446744073709551614, "b", false},
		{18446744073709551615, "a", false},
		{18446744073709551615, "b", true},
	}
	for i, s := range steps {
		err := store.Set(ctx, stamp(s.tok, s.owner), "huge", s.owner)
		if s.ok != (err == nil) || (!s.ok && !errors.Is(err, fence.ErrStale)) {
			t.Fatalf("step %d (%d/%s) = %v, want ok=%v", i, s.tok, s.owner, err, s.ok)
		}
	}
	if h := direct.HGetAll(ctx, "huge").Val(); h[fence.TokenField] != "18446744073709551615" || h["value"] != "b" {
		t.Fatalf("huge record %v", h)
	}
}

// adv31aDialHook runs onDial after the n-th dial of a go-redis client.
type adv31aDialHook struct {
	dials  atomic.Int32
	n      int32
	onDial func()
}

func (h *adv31aDialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if h.dials.Add(1) == h.n && h.onDial != nil {
			h.onDial()
		}
		return c, err
	}
}
func (h *adv31aDialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *adv31aDialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A write whose reply is lost was carried out; go-redis re-sends it on a
// new connection, and a newer holder writes in between: the re-sent write
// is refused. ErrStale ("nothing was written") would be false: the first
// attempt was written, and the newer holder may have built on it. The
// outcome is unknown (lease.ErrUnknown), not stale.
func TestAdversary31a_RedisRetriedWriteRefusedIsUnknown(t *testing.T) {
	srv := leasetest.StartRedis(t)
	px := leasetest.StartProxy(t, srv.Addr())
	direct := srv.Client(t)
	ctx := context.Background()
	hook := &adv31aDialHook{n: 2}
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	store := fence.NewRedis(rdb)
	if err := store.Set(ctx, stamp(101, "c"), "rec", "v1"); err != nil {
		t.Fatal(err)
	}
	var newer error
	hook.onDial = func() {
		// The newer holder writes another field only, so that the value
		// shows whose write was carried out.
		newer = fence.NewRedis(direct).HSet(ctx, stamp(103, "e"), "rec", "note", "by e")
	}
	px.Set(leasetest.CutNextReply)
	err := store.Set(ctx, stamp(102, "d"), "rec", "v2 by d")
	if newer != nil {
		t.Fatalf("the newer write: %v", newer)
	}
	h := direct.HGetAll(ctx, "rec").Val()
	if h["value"] != "v2 by d" || h[fence.TokenField] != "103" {
		t.Fatalf("record %v: want d's value under e's stamp (the proxy cut %d replies, dials %d)", h, px.Cut(), hook.dials.Load())
	}
	if errors.Is(err, fence.ErrStale) || err == nil {
		t.Fatalf("a write that was carried out (then superseded) = %v, want unknown, not stale or done", err)
	}
	if !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("a retried write refused at the retry = %v, want lease.ErrUnknown", err)
	}
}

// An observer told of a stale write may look at the store that refused
// it (a test's or an example's observer checking what the store holds):
// the Memory store must not call the observer while holding its lock.
func TestAdversary31a_MemoryObserverMayReadStore(t *testing.T) {
	srv := leasetest.StartRedis(t)
	m := fence.NewMemory[string]()
	seen := make(chan string, 4)
	obs := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventStaleWriteRejected {
			v, _, _ := m.Get("acct")
			seen <- v
		}
	})
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := m.Set(stamp(1<<62, "newer"), "acct", "newest"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	err = c.Do(context.Background(), "acct", lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		go func() { done <- m.Set(st, "acct", "late") }()
		select {
		case err := <-done:
			if !errors.Is(err, fence.ErrStale) {
				t.Errorf("stale write = %v, want ErrStale", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("the stale write did not return in 2s: the observer, called under the store's lock, deadlocked reading the store")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-seen:
		if v != "newest" {
			t.Fatalf("the observer read %q", v)
		}
	default:
		t.Fatal("the stale write was not reported")
	}
}

// A zero Memory (a struct field, a var) is usable, as a Go type with a
// mutex inside is expected to be, instead of panicking on a nil map.
func TestAdversary31a_MemoryZeroValue(t *testing.T) {
	var m fence.Memory[int]
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("a write to a zero Memory panicked: %v", p)
			}
		}()
		if err := m.Set(stamp(5, "a"), "k", 1); err != nil {
			t.Fatal(err)
		}
	}()
	if err := m.Set(stamp(4, "b"), "k", 2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older write = %v", err)
	}
	if v, s, ok := m.Get("k"); !ok || v != 1 || s.Token != 5 {
		t.Fatalf("Get = %d @%d %v", v, s.Token, ok)
	}
}

// adv31aStore is one fenced store under the same sequence of writes.
type adv31aStore struct {
	name  string
	write func(s fence.Stamp, v int64) error
	read  func() (v int64, s fence.Stamp, found bool)
	exact bool // holds tokens past math.MaxInt64 (SQL refuses them)
}

// adv31aStores returns every store, each on a fresh record: Memory, Redis,
// database/sql and pgx (Upsert).
func adv31aStores(t *testing.T) []adv31aStore {
	ctx := context.Background()
	mem := fence.NewMemory[int64]()
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	rs := fence.NewRedis(rdb)
	db, table := postgres(t)
	conn := adv31aPgx(t)
	tbl := fence.Table{Name: table, Key: "id"}
	sqlRead := func(id string) func() (int64, fence.Stamp, bool) {
		return func() (int64, fence.Stamp, bool) {
			var v, tok int64
			var owner string
			err := db.QueryRow("SELECT balance, fence_token, fence_owner FROM "+table+" WHERE id = $1", id).Scan(&v, &tok, &owner)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, fence.Stamp{}, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return v, stamp(lease.Token(tok), owner), true
		}
	}
	return []adv31aStore{
		{"memory", func(s fence.Stamp, v int64) error { return mem.Set(s, "k", v) }, func() (int64, fence.Stamp, bool) { return mem.Get("k") }, true},
		{"redis", func(s fence.Stamp, v int64) error { return rs.Set(ctx, s, "k", fmt.Sprint(v)) }, func() (int64, fence.Stamp, bool) {
			h := rdb.HGetAll(ctx, "k").Val()
			if len(h) == 0 {
				return 0, fence.Stamp{}, false
			}
			var v int64
			var tok uint64
			fmt.Sscan(h["value"], &v)
			fmt.Sscan(h[fence.TokenField], &tok)
			return v, stamp(lease.Token(tok), h[fence.OwnerField]), true
		}, true},
		{"database/sql", func(s fence.Stamp, v int64) error {
			return tbl.Upsert(ctx, fence.SQL(db), s, "sql", fence.Set("balance", v))
		}, sqlRead("sql"), false},
		{"pgx", func(s fence.Stamp, v int64) error {
			return tbl.Upsert(ctx, fencepgx.Wrap(conn), s, "pgx", fence.Set("balance", v))
		}, sqlRead("pgx"), false},
	}
}

func adv31aPgx(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Every store follows the same rule: newer token, or equal from the same
// owner; a zero token is an error that writes nothing; tokens near the top
// of the range compare exactly or (SQL) are refused with an error.
func TestAdversary31a_AllStoresSameRule(t *testing.T) {
	for _, st := range adv31aStores(t) {
		steps := []struct {
			tok   lease.Token
			owner string
			want  string // "ok", "stale", "error"
		}{
			{0, "z", "error"},
			{10, "a", "ok"},
			{10, "a", "ok"}, // the same holder again (a kept lease)
			{10, "b", "stale"},
			{9, "a", "stale"},
			{0, "a", "error"},
			{11, "b", "ok"},
			{11, "a", "stale"},
			{10, "b", "stale"},
			{math.MaxInt64, "c", "ok"},
			{math.MaxInt64, "d", "stale"},
			{math.MaxInt64 - 1, "c", "stale"},
			{math.MaxInt64 + 1, "c", map[bool]string{true: "ok", false: "error"}[st.exact]},
			{math.MaxInt64, "c", map[bool]string{true: "stale", false: "ok"}[st.exact]},
		}
		var last fence.Stamp
		var lastV int64
		for i, s := range steps {
			err := st.write(stamp(s.tok, s.owner), int64(i))
			got := "ok"
			switch {
			case errors.Is(err, fence.ErrStale):
				got = "stale"
			case err != nil:
				got = "error"
			}
			if got != s.want {
				t.Fatalf("%s step %d (%d/%s): %v, want %s", st.name, i, s.tok, s.owner, err, s.want)
			}
			if got == "ok" {
				last, lastV = stamp(s.tok, s.owner), int64(i)
			}
			v, cur, found := st.read()
			if found != (last.Token != 0) || v != lastV || cur.Token != last.Token || cur.Owner != last.Owner {
				t.Fatalf("%s step %d: record %d @%d/%s (found %v), want %d @%d/%s", st.name, i, v, cur.Token, cur.Owner, found, lastV, last.Token, last.Owner)
			}
		}
	}
}

// adv31aWrite is one write of a concurrent history.
type adv31aWrite struct {
	tok        lease.Token
	owner      string
	start, end time.Time
	err        error
}

// adv31aCheck checks a history: no write may be accepted when a write with
// a higher token (or the same token from another owner) was accepted
// before it started, and the record holds the highest accepted stamp.
func adv31aCheck(t *testing.T, name string, hist []adv31aWrite, final fence.Stamp) {
	t.Helper()
	var ok, stale int
	var top fence.Stamp
	for _, w := range hist {
		switch {
		case w.err == nil:
			ok++
			if w.tok > top.Token {
				top = stamp(w.tok, w.owner)
			}
		case errors.Is(w.err, fence.ErrStale):
			stale++
		default:
			t.Fatalf("%s: write %d/%s: %v", name, w.tok, w.owner, w.err)
		}
	}
	for _, a := range hist {
		if a.err != nil {
			continue
		}
		for _, b := range hist {
			if b.err == nil && b.start.After(a.end) && !stamp(b.tok, b.owner).Admits(stamp(a.tok, a.owner)) {
				t.Fatalf("%s: %d/%s accepted after %d/%s had been", name, b.tok, b.owner, a.tok, a.owner)
			}
		}
	}
	if final.Token != top.Token || final.Owner != top.Owner {
		t.Fatalf("%s: record stamped %d/%s, highest accepted %d/%s", name, final.Token, final.Owner, top.Token, top.Owner)
	}
	if ok == 0 || stale == 0 {
		t.Fatalf("%s: %d accepted, %d stale: not a race", name, ok, stale)
	}
	t.Logf("%s: %d accepted, %d stale", name, ok, stale)
}

// Writers in several goroutines race with interleaved tokens, some equal
// from different owners: no lower token is applied after a higher one.
// Redis through two go-redis clients (the stores' scripts are atomic),
// Memory in process.
func TestAdversary31a_ConcurrentWritersNeverGoBack(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	clients := []*fence.Redis{fence.NewRedis(srv.Client(t)), fence.NewRedis(srv.Client(t))}
	mem := fence.NewMemory[int]()
	for _, name := range []string{"redis", "memory"} {
		var mu sync.Mutex
		var hist []adv31aWrite
		var wg sync.WaitGroup
		var next atomic.Uint64
		next.Store(1 << 53) // past 2^53 as well
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 31))
				for i := range 40 {
					tok := next.Add(uint64(r.IntN(2))) - uint64(r.IntN(3)) // equal, older and newer tokens
					owner := fmt.Sprint("o", tok%2, "-", w%2)
					wr := adv31aWrite{tok: lease.Token(tok), owner: owner, start: time.Now()}
					if name == "redis" {
						wr.err = clients[w%2].Set(ctx, stamp(wr.tok, owner), "rec", fmt.Sprint(w, "-", i))
					} else {
						wr.err = mem.Set(stamp(wr.tok, owner), "rec", i)
					}
					wr.end = time.Now()
					mu.Lock()
					hist = append(hist, wr)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		var final fence.Stamp
		if name == "redis" {
			h := srv.Client(t).HGetAll(ctx, "rec").Val()
			var tok uint64
			fmt.Sscan(h[fence.TokenField], &tok)
			final = stamp(lease.Token(tok), h[fence.OwnerField])
		} else {
			_, final, _ = mem.Get("rec")
		}
		adv31aCheck(t, name, hist, final)
	}
}

// Timeouts, a context ending mid-way and lost replies on Redis: a write
// that was sent and got no reply is lease.ErrUnknown (and may well have
// been carried out), one never sent is not; neither is ErrStale.
func TestAdversary31a_RedisUnknownOutcomes(t *testing.T) {
	srv := leasetest.StartRedis(t)
	px := leasetest.StartProxy(t, srv.Addr())
	direct := srv.Client(t)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 2})
	t.Cleanup(func() { rdb.Close() })
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	value := func() string { return direct.HGet(ctx, "rec", "value").Val() }
	if err := store.Set(ctx, stamp(10, "a"), "rec", "v10"); err != nil {
		t.Fatal(err)
	}

	// No reply before the deadline: unknown, and the write was carried out.
	px.Set(leasetest.Blackhole)
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := store.Set(tctx, stamp(11, "b"), "rec", "v11")
	cancel()
	if !errors.Is(err, lease.ErrUnknown) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("a write with no reply = %v, want lease.ErrUnknown", err)
	}
	if v := value(); v != "v11" {
		t.Fatalf("record %q: the unanswered write was carried out all the same", v)
	}
	px.Set(leasetest.Pass)
	px.CloseConns()

	// The context cancelled while the reply is on its way: go-redis reads
	// on until its deadline (a cancellation does not interrupt the read),
	// so the answer is the write's own (done), or unknown; never stale.
	px.SetDelay(300 * time.Millisecond)
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, ccancel)
	err = store.Set(cctx, stamp(12, "c"), "rec", "v12")
	if err == nil && value() != "v12" {
		t.Fatalf("a write cancelled mid-way reported done, record %q", value())
	}
	if err != nil && !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("a write cancelled mid-way = %v, want nil or lease.ErrUnknown", err)
	}
	// The same with a deadline, which does cut the read: unknown.
	tctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	err = store.Set(tctx, stamp(12, "c"), "rec", "v12")
	cancel()
	if !errors.Is(err, lease.ErrUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write whose deadline passed mid-way = %v, want lease.ErrUnknown and context.DeadlineExceeded", err)
	}
	px.Set(leasetest.Pass)
	px.CloseConns()
	deadline := time.Now().Add(2 * time.Second)
	for value() != "v12" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v := value(); v != "v12" {
		t.Fatalf("record %q after the cancelled write", v)
	}

	// A context ended before the write: never sent, not unknown.
	dead, dcancel := context.WithCancel(ctx)
	dcancel()
	err = store.Set(dead, stamp(13, "d"), "rec", "v13")
	if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrUnknown) || value() != "v12" {
		t.Fatalf("a write on an ended context = %v (record %q), want context.Canceled, not unknown", err, value())
	}

	// A stale write whose reply is lost and which go-redis re-sends: it
	// may not be reported as done; the replay's refusal does not tell
	// whether the first send was carried out, so it is unknown.
	px.Set(leasetest.CutNextReply)
	err = store.Set(ctx, stamp(5, "old"), "rec", "late")
	if err == nil || value() != "v12" {
		t.Fatalf("a stale write with a lost reply = %v, record %q", err, value())
	}
	// An accepted write whose reply is lost: the replay is the same stamp,
	// accepted again: done.
	px.Set(leasetest.CutNextReply)
	if err := store.Set(ctx, stamp(14, "e"), "rec", "v14"); err != nil || value() != "v14" {
		t.Fatalf("an accepted write with a lost reply = %v, record %q", err, value())
	}
	// A key of another type: the server's refusal of the only send is a
	// definite error, not unknown, not stale.
	direct.Set(ctx, "str", "x", 0)
	if err := store.Set(ctx, stamp(20, "f"), "str", "v"); err == nil || errors.Is(err, lease.ErrUnknown) || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a write to a string key = %v, want WRONGTYPE", err)
	}
	// A record whose stored token is not a decimal integer is refused
	// with an error, not compared as whatever Lua makes of it.
	direct.HSet(ctx, "bad", fence.TokenField, "1e3", fence.OwnerField, "x", "value", "kept")
	if err := store.Set(ctx, stamp(2000, "g"), "bad", "v"); err == nil || errors.Is(err, fence.ErrStale) || direct.HGet(ctx, "bad", "value").Val() != "kept" {
		t.Fatalf("a write over a malformed stored token = %v", err)
	}
}

// adv31aWaitBlocked waits until a statement on table waits for a lock.
func adv31aWaitBlocked(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", table).Scan(&n)
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the second transaction's write never waited for the first's lock")
}

// Two READ COMMITTED transactions race on one row: the second write
// blocks on the first's row lock, and after the first commits it is
// checked against the committed stamp (PostgreSQL re-evaluates the WHERE
// on the new row version), for Update and for Upsert of a row neither
// could see at first.
func TestAdversary31a_SQLReadCommittedRaces(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	row := func(id string) (int64, int64, bool) {
		var bal, tok int64
		err := db.QueryRow("SELECT balance, fence_token FROM "+table+" WHERE id = $1", id).Scan(&bal, &tok)
		return bal, tok, err == nil
	}
	cases := []struct {
		name             string
		first, second    lease.Token
		upsert, rollback bool
		wantErr          error
		wantBal, wantTok int64
	}{
		{"update: older after newer", 20, 15, false, false, fence.ErrStale, 20, 20},
		{"update: newer after older", 15, 20, false, false, nil, 20, 20},
		{"update: older after a rolled-back newer", 20, 15, false, true, nil, 15, 15},
		{"upsert: older after a new row", 20, 15, true, false, fence.ErrStale, 20, 20},
		{"upsert: newer after a new row", 15, 20, true, false, nil, 20, 20},
		{"upsert: older after a rolled-back new row", 20, 15, true, true, nil, 15, 15},
	}
	for i, c := range cases {
		id := fmt.Sprint("r", i)
		if !c.upsert {
			if _, err := db.Exec("INSERT INTO "+table+" (id, fence_token, fence_owner) VALUES ($1, 1, 'init')", id); err != nil {
				t.Fatal(err)
			}
		}
		write := func(x fence.Execer, tok lease.Token) error {
			s := stamp(tok, fmt.Sprint("owner-", tok))
			if c.upsert {
				return tbl.Upsert(ctx, x, s, id, fence.Set("balance", int64(tok)))
			}
			return tbl.Update(ctx, x, s, id, fence.Set("balance", int64(tok)))
		}
		tx1, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback() // on failure: let the table be dropped
		if err := write(fence.SQL(tx1), c.first); err != nil {
			t.Fatalf("%s: first write: %v", c.name, err)
		}
		tx2, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		done := make(chan error, 1)
		go func() { done <- write(fence.SQL(tx2), c.second) }()
		adv31aWaitBlocked(t, db, table)
		if c.rollback {
			tx1.Rollback()
		} else if err := tx1.Commit(); err != nil {
			t.Fatal(err)
		}
		err = <-done
		if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
			t.Fatalf("%s: second write = %v, want %v", c.name, err, c.wantErr)
		}
		if err := tx2.Commit(); err != nil {
			t.Fatal(err)
		}
		if bal, tok, ok := row(id); !ok || bal != c.wantBal || tok != c.wantTok {
			t.Fatalf("%s: row %d @%d (found %v), want %d @%d", c.name, bal, tok, ok, c.wantBal, c.wantTok)
		}
	}
}

// A write whose context ends while it waits for another transaction's row
// lock: an error naming the context, never ErrStale or ErrNoRow, through
// database/sql and pgx. The server may still carry out the abandoned
// statement once the lock is free (the client only dropped its
// connection), so the outcome is not known; but the abandoned write is
// still checked when it runs: a newer stamp committed by the lock holder
// refuses it.
func TestAdversary31a_SQLContextEndsWhileBlocked(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	if _, err := db.Exec("INSERT INTO " + table + " (id, balance, fence_token, fence_owner) VALUES ('k', 1, 1, 'init')"); err != nil {
		t.Fatal(err)
	}
	conn := adv31aPgx(t)
	row := func() (bal, tok int64) {
		db.QueryRow("SELECT balance, fence_token FROM "+table+" WHERE id = 'k'").Scan(&bal, &tok)
		return
	}
	for j, x := range []fence.Execer{fence.SQL(db), fencepgx.Wrap(conn)} {
		newer, cut := lease.Token(100*j+20), lease.Token(100*j+10)
		tx1, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback() // on failure: let the table be dropped
		if err := tbl.Update(ctx, fence.SQL(tx1), stamp(newer, "holder"), "k", fence.Set("balance", int64(newer))); err != nil {
			t.Fatal(err)
		}
		for _, upsert := range []bool{false, true} {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			var err error
			if upsert {
				err = tbl.Upsert(wctx, x, stamp(cut, "late"), "k", fence.Set("balance", int64(cut)))
			} else {
				err = tbl.Update(wctx, x, stamp(cut, "late"), "k", fence.Set("balance", int64(cut)))
			}
			cancel()
			// The first write was sent: unknown. pgx closes its
			// connection when a context ends mid-way, so its second
			// write is not sent at all: an error, not unknown.
			if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow) || (!upsert && !errors.Is(err, lease.ErrUnknown)) {
				t.Fatalf("%T upsert=%v: a write cut by its context = %v, want lease.ErrUnknown", x, upsert, err)
			}
		}
		if err := tx1.Commit(); err != nil {
			t.Fatal(err)
		}
		// Let the abandoned statements, if any, run to their end.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			var n int
			db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'", table).Scan(&n)
			if n == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if bal, tok := row(); bal != int64(newer) || tok != int64(newer) {
			t.Fatalf("%T: row %d @%d, want the holder's %d: an abandoned older write was carried out unchecked", x, bal, tok, newer)
		}
	}
}

// Kept leases: calls from the same Client reuse the grant (same token and
// owner), and every store accepts their writes; another Client's grant
// then supersedes them, and a late write under the kept stamp is refused
// everywhere.
func TestAdversary31a_KeptLeaseAcrossStores(t *testing.T) {
	stores := adv31aStores(t)
	srv := leasetest.StartRedis(t)
	c1, err := lease.New(srv.Client(t))
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
	keep := lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true, Keep: 10 * time.Second}
	var stamps []fence.Stamp
	for i := range 3 {
		err := c1.Do(ctx, "kept", keep, func(ctx context.Context) error {
			s, err := fence.From(ctx)
			if err != nil {
				return err
			}
			stamps = append(stamps, s)
			for _, st := range stores {
				if err := st.write(s, int64(i)); err != nil {
					return fmt.Errorf("%s: kept call %d: %w", st.name, i, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if stamps[0].Token != stamps[2].Token || stamps[0].Owner != stamps[2].Owner {
		t.Fatalf("kept calls got stamps %d/%s and %d/%s", stamps[0].Token, stamps[0].Owner, stamps[2].Token, stamps[2].Owner)
	}
	// Another Client waits for the key: the kept lease is handed over.
	err = c2.Do(ctx, "kept", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second, Fence: true}, func(ctx context.Context) error {
		s, err := fence.From(ctx)
		if err != nil {
			return err
		}
		if s.Token <= stamps[0].Token {
			return fmt.Errorf("the next grant's token %d is not above the kept %d", s.Token, stamps[0].Token)
		}
		for _, st := range stores {
			if err := st.write(s, 100); err != nil {
				return fmt.Errorf("%s: the new holder: %w", st.name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stores {
		if err := st.write(stamps[0], 7); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s: a late write under the kept stamp = %v, want ErrStale", st.name, err)
		}
		if v, _, _ := st.read(); v != 100 {
			t.Fatalf("%s: value %d, want the new holder's 100", st.name, v)
		}
	}
}

// A record whose slot moves to another master while a client's slot map
// is stale: the write is redirected (ASK while the slot migrates, MOVED
// after) and sent twice. An admitted write is done (nil); a refused one
// is ErrStale or, since a second send cannot be told from a retry after
// a lost reply, lease.ErrUnknown; never nil, and nothing written.
func TestAdversary31a_RedisClusterRedirectedWrites(t *testing.T) {
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	rdb := cl.Client(t)
	store := fence.NewRedis(rdb)
	const key = "rec:{moving}"
	check := func(step string, s fence.Stamp, wantOK bool) {
		t.Helper()
		err := store.Set(ctx, s, key, fmt.Sprint(s.Token))
		switch {
		case wantOK && err != nil:
			t.Fatalf("%s: admitted write %d = %v", step, s.Token, err)
		case !wantOK && !errors.Is(err, fence.ErrStale) && !errors.Is(err, lease.ErrUnknown):
			t.Fatalf("%s: refused write %d = %v, want ErrStale or lease.ErrUnknown", step, s.Token, err)
		}
		if !wantOK {
			t.Logf("%s: refused write: %v", step, err)
		}
	}
	check("before", stamp(20, "a"), true)
	from, err := cl.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var to *leasetest.Server
	for _, s := range cl.Nodes {
		if s != from {
			to = s
			break
		}
	}
	m, err := cl.BeginMigration(ctx, leasetest.Slot(key), to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.MoveKeys(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check("ASK", stamp(10, "b"), false)
	check("ASK", stamp(30, "c"), true)
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	check("MOVED", stamp(25, "d"), false)
	check("MOVED", stamp(40, "e"), true)
	if v, _ := store.Get(ctx, key); v != "40" {
		t.Fatalf("value %q, want 40", v)
	}
}

// pgx in every query exec mode (the simple protocol of PgBouncer setups
// included) and a database/sql *sql.Conn: Update, Upsert and Delete keep
// the rule, with tokens at the top of bigint, and a column named after
// the stamp columns cannot forge the stamp.
func TestAdversary31a_SQLExecModes(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	sconn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()
	execers := map[string]fence.Execer{"sql.Conn": fence.SQL(sconn)}
	for name, mode := range map[string]pgx.QueryExecMode{
		"cache-statement": pgx.QueryExecModeCacheStatement,
		"cache-describe":  pgx.QueryExecModeCacheDescribe,
		"describe-exec":   pgx.QueryExecModeDescribeExec,
		"exec":            pgx.QueryExecModeExec,
		"simple":          pgx.QueryExecModeSimpleProtocol,
	} {
		cfg, err := pgx.ParseConfig(adv13PGURL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		execers[name] = fencepgx.Wrap(conn)
	}
	for name, x := range execers {
		id := "row-" + name
		steps := []struct {
			op   string
			tok  lease.Token
			own  string
			want error
		}{
			{"update", 5, "a", fence.ErrNoRow},
			{"upsert", math.MaxInt64 - 1, "a", nil},
			{"update", math.MaxInt64 - 1, "a", nil},
			{"update", math.MaxInt64 - 1, "b", fence.ErrStale},
			{"upsert", math.MaxInt64 - 2, "b", fence.ErrStale},
			{"delete", math.MaxInt64 - 2, "b", fence.ErrStale},
			{"delete", math.MaxInt64 - 1, "b", fence.ErrStale},
			{"update", math.MaxInt64, "c", nil},
			{"delete", math.MaxInt64, "c", nil},
			{"update", math.MaxInt64, "c", fence.ErrNoRow},
			{"delete", 1, "z", nil}, // no row: nothing to do
		}
		for i, s := range steps {
			st := stamp(s.tok, s.own)
			var err error
			switch s.op {
			case "update":
				err = tbl.Update(ctx, x, st, id, fence.Set("writer", fmt.Sprint(i)))
			case "upsert":
				err = tbl.Upsert(ctx, x, st, id, fence.Set("writer", fmt.Sprint(i)))
			case "delete":
				err = tbl.Delete(ctx, x, st, id)
			}
			if (s.want == nil) != (err == nil) || (s.want != nil && !errors.Is(err, s.want)) {
				t.Fatalf("%s step %d %s %d/%s = %v, want %v", name, i, s.op, s.tok, s.own, err, s.want)
			}
		}
		// Forging the stamp through a column: an error, nothing written.
		if err := tbl.Upsert(ctx, x, stamp(10, "f"), id, fence.Set("writer", "x")); err != nil {
			t.Fatal(err)
		}
		for _, col := range []string{"fence_token", "fence_owner"} {
			if err := tbl.Update(ctx, x, stamp(11, "f"), id, fence.Set(col, "1")); err == nil {
				t.Fatalf("%s: Update setting %s accepted", name, col)
			}
			if err := tbl.Upsert(ctx, x, stamp(11, "f"), id, fence.Set(col, "1")); err == nil {
				t.Fatalf("%s: Upsert setting %s accepted", name, col)
			}
		}
		var tok int64
		var owner, writer string
		db.QueryRow("SELECT fence_token, fence_owner, writer FROM "+table+" WHERE id = $1", id).Scan(&tok, &owner, &writer)
		if tok != 10 || owner != "f" || writer != "x" {
			t.Fatalf("%s: row %d/%s %q after the forging attempts", name, tok, owner, writer)
		}
	}
}

// A redis.Ring moves a key to another shard when its shard misses
// heartbeats, and the record's stamp stays behind: a stale write would
// then land on a shard with no stamp and be accepted. The lease package
// refuses a Ring; the fence store must not accept writes through one.
func TestAdversary31a_RedisRingRefused(t *testing.T) {
	a, b := leasetest.StartRedis(t), leasetest.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:              map[string]string{"a": a.Addr(), "b": b.Addr()},
		HeartbeatFrequency: 20 * time.Millisecond,
		DialTimeout:        100 * time.Millisecond,
		ReadTimeout:        100 * time.Millisecond,
		MaxRetries:         -1,
	})
	t.Cleanup(func() { ring.Close() })
	store := fence.NewRedis(ring)
	ctx := context.Background()
	const key = "rec"
	err := store.Set(ctx, stamp(20, "new"), key, "v20")
	home, other := a, b
	if b.Client(t).Exists(ctx, key).Val() == 1 {
		home, other = b, a
	}
	if err == nil {
		home.Stop() // the record's shard goes away: the ring remaps its keys
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := store.Set(ctx, stamp(10, "stale"), key, "v10"); err == nil {
			h := other.Client(t).HGetAll(ctx, key).Val()
			t.Fatalf("a write with token 10 after 20 was accepted through a redis.Ring (another shard now holds %v)", h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := store.Set(ctx, stamp(30, "newer"), "other", "v"); err == nil || !strings.Contains(err.Error(), "Ring") {
		t.Fatalf("a write through a redis.Ring = %v, want an error naming the Ring", err)
	}
}

// Lost replies between the SQL client and PostgreSQL (a TCP proxy cuts
// the reply, or holds it past the deadline): a write reported done was
// carried out, and a lost reply is never ErrStale or ErrNoRow (refused,
// which it was not); through pgx (which does not re-send: an error for a
// write carried out) and database/sql (which may find the connection
// dead before sending, and send again), for Update and Upsert.
func TestAdversary31a_SQLLostReplies(t *testing.T) {
	db, table := postgres(t)
	ctx := context.Background()
	tbl := fence.Table{Name: table, Key: "id"}
	u, err := pgx.ParseConfig(adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	px := leasetest.StartProxy(t, fmt.Sprintf("%s:%d", u.Host, u.Port))
	u.Host, u.Port = "127.0.0.1", 0
	host, port, _ := net.SplitHostPort(px.Addr())
	u.Host = host
	fmt.Sscan(port, &u.Port)
	conn, err := pgx.ConnectConfig(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	pdb, err := sql.Open("pgx", strings.Replace(adv13PGURL(), "127.0.0.1:5432", px.Addr(), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pdb.Close() })
	pdb.SetMaxOpenConns(1)
	if err := pdb.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	tok := lease.Token(100)
	for _, via := range []string{"pgx", "database/sql"} {
		for _, fault := range []string{"cut", "timeout"} {
			for _, upsert := range []bool{false, true} {
				tok++
				id := fmt.Sprint(via, "-", fault, "-", upsert)
				if _, err := db.Exec("INSERT INTO "+table+" (id, fence_token, fence_owner) VALUES ($1, 1, 'init')", id); err != nil {
					t.Fatal(err)
				}
				var x fence.Execer = fence.SQL(pdb)
				if via == "pgx" {
					if conn.IsClosed() {
						if conn, err = pgx.ConnectConfig(ctx, u); err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { conn.Close(context.Background()) })
					}
					x = fencepgx.Wrap(conn)
				}
				// The same statement once without a fault first, so that
				// the faulty reply is the write's, not its preparation's.
				s := stamp(tok, "w")
				write := func(ctx context.Context, id string) error {
					if upsert {
						return tbl.Upsert(ctx, x, s, id, fence.Set("balance", int64(tok)))
					}
					return tbl.Update(ctx, x, s, id, fence.Set("balance", int64(tok)))
				}
				if err := write(ctx, id+"-warm"); err != nil && !errors.Is(err, fence.ErrNoRow) {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if fault == "cut" {
					px.Set(leasetest.CutNextReply)
				} else {
					px.Set(leasetest.Blackhole)
					wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				}
				err = write(wctx, id)
				cancel()
				px.Set(leasetest.Pass)
				px.CloseConns()
				var bal int64
				db.QueryRow("SELECT balance FROM "+table+" WHERE id = $1", id).Scan(&bal)
				switch {
				case errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoRow):
					t.Fatalf("%s: a write whose reply was lost = %v (balance %d)", id, err, bal)
				case err == nil && bal != int64(tok):
					t.Fatalf("%s: reported done, balance %d", id, bal)
				case via == "pgx" && (err == nil || bal != int64(tok)):
					// pgx does not re-send: the cut reply was the write's.
					t.Fatalf("%s: %v, balance %d: want an error for a write carried out", id, err, bal)
				case err != nil && bal == int64(tok) && !errors.Is(err, lease.ErrUnknown):
					// As the Redis store says it: a write sent whose answer
					// was not read is of unknown outcome.
					t.Fatalf("%s: a write carried out whose reply was lost = %v, want lease.ErrUnknown", id, err)
				}
				t.Logf("%s: %v (balance %d)", id, err, bal)
			}
		}
	}
}

// Fenced leases nested on different keys: tokens are ordered per key. A
// holder of "acct" whose lease was lost unnoticed (deleted from outside,
// so it learns at its next renewal) takes a fenced lease on "audit" after
// the new holder of "acct" wrote: the inner lease's token (From) is above
// the new holder's and would overwrite its record; the outer lease's
// stamp (FromKey) is refused.
func TestAdversary31a_NestedFencedLeasesFromKey(t *testing.T) {
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	cA, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cA.Close()
	cB, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cB.Close()
	store := fence.NewRedis(direct)
	ctx := context.Background()
	spec := lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Fence: true}
	var innerErr, outerErr error
	var inner, outer, fromInner fence.Stamp
	err = cA.Do(ctx, "acct", spec, func(ctx context.Context) error {
		for _, k := range direct.Keys(ctx, "*").Val() {
			if strings.HasSuffix(k, ":l") {
				direct.Del(ctx, k) // the lease ends without notice
			}
		}
		if err := cB.Do(context.Background(), "acct", spec, func(ctx context.Context) error {
			s, err := fence.FromKey(ctx, "acct")
			if err != nil {
				return err
			}
			return store.Set(ctx, s, "acct-record", "B")
		}); err != nil {
			return fmt.Errorf("the new holder: %w", err)
		}
		return cA.Do(ctx, "audit", spec, func(ctx context.Context) error {
			var err error
			if fromInner, err = fence.From(ctx); err != nil {
				return err
			}
			if inner, err = fence.FromKey(ctx, "audit"); err != nil {
				return err
			}
			if outer, err = fence.FromKey(ctx, "acct"); err != nil {
				return err
			}
			outerErr = store.Set(ctx, outer, "acct-record", "A late")
			innerErr = fence.NewMemory[int]().Set(inner, "audit-record", 1)
			return nil
		})
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A's call = %v, want ErrLost", err)
	}
	if fromInner.Token != inner.Token || fromInner.Owner != inner.Owner || inner.Token == outer.Token {
		t.Fatalf("From = %d, FromKey(audit) = %d, FromKey(acct) = %d", fromInner.Token, inner.Token, outer.Token)
	}
	if !errors.Is(outerErr, fence.ErrStale) || innerErr != nil {
		t.Fatalf("late write under the outer stamp = %v (want ErrStale); inner resource write = %v", outerErr, innerErr)
	}
	if v, _ := store.Get(ctx, "acct-record"); v != "B" {
		t.Fatalf("record %q, want the new holder's B", v)
	}
	if _, err := fence.FromKey(ctx, "acct"); !errors.Is(err, fence.ErrNoLease) {
		t.Fatalf("FromKey without a lease = %v", err)
	}
}

// HSet takes any number of field/value pairs: many pairs (past Lua's
// unpack limit of about 8000 values) are written whole, under the stamp.
func TestAdversary31a_RedisHSetManyPairs(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	const n = 12345
	fv := make([]string, 0, 2*n)
	for i := range n {
		fv = append(fv, fmt.Sprint("f", i), fmt.Sprint(i))
	}
	if err := store.HSet(ctx, stamp(10, "a"), "rec", fv...); err != nil {
		t.Fatalf("HSet of %d pairs: %v", n, err)
	}
	h := rdb.HGetAll(ctx, "rec").Val()
	// The pairs, and the stamp: token, owner, the last writes' identities.
	if len(h) != n+3 || h["f0"] != "0" || h[fmt.Sprint("f", n-1)] != fmt.Sprint(n-1) || h[fence.TokenField] != "10" {
		t.Fatalf("record has %d fields, stamp %s", len(h), h[fence.TokenField])
	}
	if err := store.HSet(ctx, stamp(9, "b"), "rec", fv...); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale HSet of %d pairs = %v", n, err)
	}
}

// A SQL write on a context that has already ended is never sent: the
// context's error, not an unknown outcome, and nothing written.
func TestAdversary31a_SQLEndedContextNotUnknown(t *testing.T) {
	db, table := postgres(t)
	tbl := fence.Table{Name: table, Key: "id"}
	conn := adv31aPgx(t)
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for _, x := range []fence.Execer{fence.SQL(db), fencepgx.Wrap(conn)} {
		for _, op := range []func() error{
			func() error { return tbl.Upsert(dead, x, stamp(5, "a"), "k", fence.Set("balance", 5)) },
			func() error { return tbl.Update(dead, x, stamp(5, "a"), "k", fence.Set("balance", 5)) },
			func() error { return tbl.Delete(dead, x, stamp(5, "a"), "k") },
		} {
			if err := op(); !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrUnknown) {
				t.Fatalf("%T: a write on an ended context = %v, want context.Canceled, not unknown", x, err)
			}
		}
	}
	var n int
	db.QueryRow("SELECT count(*) FROM " + table).Scan(&n)
	if n != 0 {
		t.Fatalf("%d rows written on an ended context", n)
	}
}
