package fence_test

// Adversarial tests, round 72a: tokens as the stores see them across
// handovers, expiry and leader terms, and what the observer hears.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/fence/fencepgx"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv72aStores is every store on one record each: Memory, Redis, and a
// PostgreSQL row through database/sql and through a pgx pool.
type adv72aStores struct {
	mem   *fence.Memory[string]
	rs    *fence.Redis
	rdb   *redis.Client
	tbl   fence.Table
	sqlx  fence.Execer
	poolx fence.Execer
	read  func(id string) (string, int64)
}

func adv72aNewStores(t *testing.T, rdb *redis.Client) *adv72aStores {
	t.Helper()
	db, table := postgres(t)
	pool, err := pgxpool.New(context.Background(), adv13PGURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &adv72aStores{
		mem: fence.NewMemory[string](), rs: fence.NewRedis(rdb), rdb: rdb,
		tbl: fence.Table{Name: table, Key: "id"}, sqlx: fence.SQL(db), poolx: fencepgx.Wrap(pool),
		read: func(id string) (string, int64) {
			var w string
			var tok int64
			db.QueryRow("SELECT coalesce(writer, ''), fence_token FROM "+table+" WHERE id = $1", id).Scan(&w, &tok)
			return w, tok
		},
	}
}

// write writes v under s everywhere: Memory, Redis, an Upsert through
// database/sql and an Update through the pool (of the row the Upsert made).
func (st *adv72aStores) write(ctx context.Context, s fence.Stamp, v string) []error {
	return []error{
		st.mem.Set(s, "rec", v),
		st.rs.Set(ctx, s, "rec", v),
		st.tbl.Upsert(ctx, st.sqlx, s, "rec", fence.Set("writer", v)),
		st.tbl.Update(ctx, st.poolx, s, "rec", fence.Set("writer", v+"+")),
	}
}

func (st *adv72aStores) check(t *testing.T, want string) {
	t.Helper()
	m, _, _ := st.mem.Get("rec")
	r := st.rdb.HGet(context.Background(), "rec", "value").Val()
	w, _ := st.read("rec")
	if m != want || r != want || w != want+"+" {
		t.Fatalf("records: memory %q, redis %q, sql %q; want %q", m, r, w, want)
	}
}

// A fenced lease handed over on release to a waiter of another Client:
// the waiter's token is above the releaser's, its writes are accepted
// everywhere, and the releaser's late writes (a write already under way
// when it returned) are refused everywhere and reported to its observer
// once each.
func TestAdversary72a_HandoverTokensAcrossClients(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	stores := adv72aNewStores(t, direct)
	obs1 := &leasetest.Recorder{}
	c1, err := lease.New(srv.Client(t), lease.WithObserver(obs1))
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
	spec := lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}
	var s1, s2 fence.Stamp
	var late context.Context
	c2done := make(chan error, 1)
	err = c1.Do(ctx, "h", spec, func(ctx context.Context) error {
		s1, _ = fence.From(ctx)
		late = context.WithoutCancel(ctx)
		if err := errors.Join(stores.write(ctx, s1, "one")...); err != nil {
			return err
		}
		waiting := spec
		waiting.Wait = 4 * time.Second
		go func() {
			c2done <- c2.Do(context.Background(), "h", waiting, func(ctx context.Context) error {
				s2, _ = fence.From(ctx)
				return errors.Join(stores.write(ctx, s2, "two")...)
			})
		}()
		// Let the waiter queue before the release hands the key over.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			queued := false
			for _, k := range direct.Keys(ctx, "*").Val() {
				if direct.Type(ctx, k).Val() == "zset" && direct.ZCard(ctx, k).Val() > 0 {
					queued = true
				}
			}
			if queued {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-c2done; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if s2.Token <= s1.Token {
		t.Fatalf("handover: token %d after %d", s2.Token, s1.Token)
	}
	stores.check(t, "two")
	adv72aAllStale(t, "the releaser's", stores.write(late, s1, "one-late"))
	stores.check(t, "two")
	adv72aHeard(t, obs1, 4)
}

// adv72aAllStale fails the test for each of whose late writes that was
// not refused with ErrStale.
func adv72aAllStale(t *testing.T, whose string, errs []error) {
	t.Helper()
	for i, err := range errs {
		if !errors.Is(err, fence.ErrStale) {
			t.Errorf("%s late write %d = %v, want ErrStale", whose, i, err)
		}
	}
}

// adv72aHeard fails the test unless obs heard want stale writes.
func adv72aHeard(t *testing.T, obs *leasetest.Recorder, want int) {
	t.Helper()
	if n := obs.Count(lease.EventStaleWriteRejected); n != want {
		t.Fatalf("the observer heard %d stale writes, want %d", n, want)
	}
}

// A holder cut off from Redis (its renewals black-holed) loses its lease
// by expiry while its work goes on; a holder in another Client takes the
// key and writes; the first holder's late writes, through clients that
// still reach the stores, are refused everywhere and reported.
func TestAdversary72a_ExpiredHolderLateWrites(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	px := leasetest.StartProxy(t, srv.Addr())
	stores := adv72aNewStores(t, direct)
	obs1 := &leasetest.Recorder{}
	c1, err := lease.New(redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true}),
		lease.WithObserver(obs1), lease.WithReleaseTimeout(200*time.Millisecond))
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
	var s1, s2 fence.Stamp
	var lateErrs []error
	err = c1.Do(ctx, "x", lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		s1, _ = fence.From(ctx)
		if err := errors.Join(stores.write(ctx, s1, "one")...); err != nil {
			return err
		}
		px.Set(leasetest.Blackhole)
		<-ctx.Done() // lost: validity ran out without a confirmed renewal
		err := c2.Do(context.Background(), "x", lease.Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second, Fence: true}, func(ctx context.Context) error {
			s2, _ = fence.From(ctx)
			return errors.Join(stores.write(ctx, s2, "two")...)
		})
		if err != nil {
			return fmt.Errorf("the new holder: %w", err)
		}
		// The paused work resumes and writes, ignoring its context.
		lateErrs = stores.write(context.WithoutCancel(ctx), s1, "one-late")
		return nil
	})
	px.Set(leasetest.Pass)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the cut-off holder's call = %v, want ErrLost", err)
	}
	if s2.Token <= s1.Token {
		t.Fatalf("tokens %d then %d", s1.Token, s2.Token)
	}
	adv72aAllStale(t, "the cut-off holder's", lateErrs)
	stores.check(t, "two")
	adv72aHeard(t, obs1, 4)
}

// One Lead call wins several terms in a row (fn returns nil, Lead
// campaigns again at once): one token per term, the same through the
// term's renewals, strictly increasing from term to term; each term's
// writes are accepted, and a late write of an earlier term is refused.
func TestAdversary72a_LeadTermsOneTokenEach(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	stores := adv72aNewStores(t, direct)
	obs := &leasetest.Recorder{}
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	var terms []fence.Stamp
	err = c.Lead(ctx, "ldr", lease.LeadSpec{TTL: 300 * time.Millisecond, Backoff: 20 * time.Millisecond, Owner: "node"}, func(ctx context.Context) error {
		s, err := fence.From(ctx)
		if err != nil {
			return err
		}
		v := fmt.Sprint("term-", s.Token)
		if errs := stores.write(ctx, s, v); errors.Join(errs...) != nil {
			t.Errorf("term %d: %v", s.Token, errors.Join(errs...))
		}
		// Through several renewals (every TTL/3).
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
			t.Errorf("term %d lost: %v", s.Token, context.Cause(ctx))
		}
		s2, _ := fence.From(ctx)
		if tok, _ := lease.TokenFrom(ctx); s2.Token != s.Token || s2.Owner != s.Owner || tok != s.Token {
			t.Errorf("token within a term: %d/%s then %d/%s (TokenFrom %d)", s.Token, s.Owner, s2.Token, s2.Owner, tok)
		}
		if errs := stores.write(ctx, s2, v); errors.Join(errs...) != nil {
			t.Errorf("term %d, second write: %v", s.Token, errors.Join(errs...))
		}
		mu.Lock()
		terms = append(terms, s)
		n := len(terms)
		mu.Unlock()
		if n == 3 {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(terms) != 3 {
		t.Fatalf("%d terms", len(terms))
	}
	for i := 1; i < len(terms); i++ {
		if terms[i].Token <= terms[i-1].Token || terms[i].Owner == terms[i-1].Owner {
			t.Fatalf("term %d: %d/%s after %d/%s", i, terms[i].Token, terms[i].Owner, terms[i-1].Token, terms[i-1].Owner)
		}
	}
	stores.check(t, fmt.Sprint("term-", terms[2].Token))
	for _, old := range terms[:2] {
		adv72aAllStale(t, fmt.Sprint("term ", old.Token, "'s"), stores.write(context.Background(), old, "late"))
	}
	stores.check(t, fmt.Sprint("term-", terms[2].Token))
	adv72aHeard(t, obs, 8)
}

// Every refusal is reported once, with the stamp's token and the error
// returned; nothing else is reported (an absent row, a missing row's
// delete, a reserved field, a zero stamp, accepted writes). A refused
// Memory.Update does not call f.
func TestAdversary72a_ObserverHearsEachRefusalOnce(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	stores := adv72aNewStores(t, direct)
	var mu sync.Mutex
	var heard []lease.Event
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventStaleWriteRejected {
			mu.Lock()
			heard = append(heard, e)
			mu.Unlock()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var stale []error
	// A hand-made stamp (no lease) presenting the stored token from
	// another owner: refused, reported to no one.
	handMade := stamp(0, "")
	err = c.Do(ctx, "obs", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}, func(ctx context.Context) error {
		s, err := fence.From(ctx)
		if err != nil {
			return err
		}
		newer := stamp(s.Token+1000, "newer")
		if err := errors.Join(stores.write(ctx, newer, "newer")...); err != nil {
			return err
		}
		if err := stores.tbl.Upsert(ctx, stores.sqlx, newer, "del", fence.Set("writer", "newer")); err != nil {
			return err
		}
		handMade = stamp(newer.Token, s.Owner)
		fCalled := false
		ops := []struct {
			name  string
			err   error
			stale bool
		}{
			{"memory set", stores.mem.Set(s, "rec", "x"), true},
			{"memory update", stores.mem.Update(s, "rec", func(string, bool) string { fCalled = true; return "x" }), true},
			{"memory new key", stores.mem.Set(s, "other", "x"), false},
			{"redis set", stores.rs.Set(ctx, s, "rec", "x"), true},
			{"redis reserved field", stores.rs.HSet(ctx, s, "rec", fence.TokenField, "1"), false},
			{"redis new key", stores.rs.Set(ctx, s, "other", "x"), false},
			{"sql upsert", stores.tbl.Upsert(ctx, stores.sqlx, s, "rec", fence.Set("writer", "x")), true},
			{"pool update", stores.tbl.Update(ctx, stores.poolx, s, "rec", fence.Set("writer", "x")), true},
			{"pool delete", stores.tbl.Delete(ctx, stores.poolx, s, "del"), true},
			{"sql update absent", stores.tbl.Update(ctx, stores.sqlx, s, "absent", fence.Set("writer", "x")), false},
			{"pool delete absent", stores.tbl.Delete(ctx, stores.poolx, s, "absent"), false},
			{"sql zero stamp", stores.tbl.Upsert(ctx, stores.sqlx, fence.Stamp{}, "rec", fence.Set("writer", "x")), false},
		}
		if fCalled {
			t.Error("a refused Memory.Update called f")
		}
		for _, op := range ops {
			if op.stale != errors.Is(op.err, fence.ErrStale) {
				t.Errorf("%s = %v, want stale %v", op.name, op.err, op.stale)
			}
			if op.stale {
				stale = append(stale, op.err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.rs.HSet(ctx, handMade, "rec", "f", "x"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("equal token, other owner = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != len(stale) {
		t.Fatalf("%d refusals, %d reported", len(stale), len(heard))
	}
	for i, e := range heard {
		if e.Err == nil || e.Err.Error() != stale[i].Error() || e.Key != "obs" || e.Token == 0 {
			t.Errorf("report %d: key %q token %d err %v; want the refusal %v", i, e.Key, e.Token, e.Err, stale[i])
		}
	}
	stores.check(t, "newer")
}

// A lease kept by an unfenced call, then a fenced call on the key in the
// same Client: the fenced call's stamp has a real token (never 0), above
// any token the key had, and the stores accept it; or the call fails. A
// kept fenced lease gives its next call the same stamp.
func TestAdversary72a_KeptUnfencedThenFenced(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	store := fence.NewRedis(direct)
	fenced := lease.Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second, Fence: true, Keep: 5 * time.Second}
	plain := fenced
	plain.Fence = false
	var first fence.Stamp
	if err := c.Do(ctx, "kk", fenced, func(ctx context.Context) error {
		first, err = fence.From(ctx)
		if err != nil {
			return err
		}
		return store.Set(ctx, first, "rec:{kk}", "first")
	}); err != nil {
		t.Fatal(err)
	}
	// The kept fenced lease serves an unfenced call, then a fenced one.
	if err := c.Do(ctx, "kk", plain, func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var again fence.Stamp
	if err := c.Do(ctx, "kk", fenced, func(ctx context.Context) error {
		again, err = fence.From(ctx)
		if err != nil {
			return err
		}
		return store.Set(ctx, again, "rec:{kk}", "again")
	}); err != nil {
		t.Fatalf("fenced call after an unfenced call on a kept fenced lease: %v", err)
	}
	if again.Token < first.Token || again.Token == 0 {
		t.Fatalf("stamps %d then %d", first.Token, again.Token)
	}
	// A lease first kept by an unfenced call, then a fenced call.
	if err := c.Do(ctx, "ku", plain, func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var s fence.Stamp
	err = c.Do(ctx, "ku", fenced, func(ctx context.Context) error {
		var err error
		s, err = fence.From(ctx)
		if err != nil {
			return err
		}
		return store.Set(ctx, s, "rec:{ku}", "v")
	})
	t.Logf("fenced call on a lease kept unfenced: stamp %d, %v", s.Token, err)
	if err == nil && s.Token == 0 {
		t.Fatal("a fenced call got no token")
	}
	if err == nil {
		if v, _ := store.Get(ctx, "rec:{ku}"); v != "v" {
			t.Fatalf("record %q", v)
		}
		// Another Client's later grant is above it.
		c2, err := lease.New(srv.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		var s2 fence.Stamp
		if err := c2.Do(ctx, "ku", lease.Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second, Fence: true}, func(ctx context.Context) error {
			s2, _ = fence.From(ctx)
			return store.Set(ctx, s2, "rec:{ku}", "v2")
		}); err != nil {
			t.Fatal(err)
		}
		if s2.Token <= s.Token {
			t.Fatalf("next grant %d after %d", s2.Token, s.Token)
		}
		if err := store.Set(ctx, s, "rec:{ku}", "late"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("late write = %v", err)
		}
	}
}

// A stale write under a stamp whose Client has been closed: refused
// (ErrStale), nothing written, and the report does not panic.
func TestAdversary72a_StaleWriteAfterClientClosed(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	obs := &leasetest.Recorder{}
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	var s fence.Stamp
	if err := c.Do(context.Background(), "cc", lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Fence: true}, func(ctx context.Context) error {
		s, err = fence.From(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	store := fence.NewRedis(direct)
	mem := fence.NewMemory[int]()
	newer := stamp(s.Token+1, "newer")
	if err := store.Set(context.Background(), newer, "rec", "new"); err != nil {
		t.Fatal(err)
	}
	mem.Set(newer, "rec", 1)
	if err := store.Set(context.Background(), s, "rec", "late"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("redis: %v", err)
	}
	if err := mem.Set(s, "rec", 2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("memory: %v", err)
	}
	if v, _ := store.Get(context.Background(), "rec"); v != "new" {
		t.Fatalf("record %q", v)
	}
	t.Logf("reports after Close: %d", obs.Count(lease.EventStaleWriteRejected))
}
