package adv74a

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var srv *leasetest.Server

func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }

func newClient(t *testing.T, rdb *redis.Client, opts ...lease.Option) *lease.Client {
	t.Helper()
	c, err := lease.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func client(t *testing.T, opts ...lease.Option) *lease.Client {
	t.Helper()
	return newClient(t, srv.Client(t), opts...)
}

// uniq gives each test its own key values.
var seq atomic.Int64

func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

// holdFor holds key on c (another Client) until release is closed; it
// returns once the lease is held.
func holdFor(t *testing.T, c *lease.Client, key string, spec lease.Spec, release <-chan struct{}) <-chan error {
	t.Helper()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), key, spec, func(ctx context.Context) error {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("holder on %q did not get the lease: %v", key, err)
	case <-time.After(3 * time.Second):
		t.Fatalf("holder on %q did not get the lease in 3s", key)
	}
	return done
}

// 1. Keys: distinct argument tuples give distinct keys.
func TestAdv74a_KeyInjectivity(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	vals := []string{"", ":", "::", "a", "a:", ":a", "a:b", "{", "}", "{}", "{a}", "%", "%3A", "%25", "%%", "%7B",
		"ключ", "ключ:1", "日本", "\x00", "\x7f", "\n", " ", "a b", "\xff\xfe", "|", "=", "/", "@", "#", ",", ";", "a%3Ab"}
	seen := map[string][2]string{}
	for _, x := range vals {
		for _, y := range vals {
			k, err := Pair(ctx, c, x, y)
			if err != nil {
				t.Fatalf("Pair(%q, %q) = %v", x, y, err)
			}
			if prev, ok := seen[k]; ok {
				t.Fatalf("Pair(%q, %q) and Pair(%q, %q) both use key %q", x, y, prev[0], prev[1], k)
			}
			seen[k] = [2]string{x, y}
		}
	}
	// Three parts separated by different separators.
	seen3 := map[string][3]string{}
	small := []string{"", "|", "=", "/", "a|b", "a=b", "%7C", "%3D"}
	for _, x := range small {
		for _, y := range small {
			for _, z := range small {
				k, err := Triple(ctx, c, x, y, z)
				if err != nil {
					t.Fatalf("Triple(%q, %q, %q) = %v", x, y, z, err)
				}
				if prev, ok := seen3[k]; ok {
					t.Fatalf("Triple(%q,%q,%q) and Triple(%q,%q,%q) both use key %q", x, y, z, prev[0], prev[1], prev[2], k)
				}
				seen3[k] = [3]string{x, y, z}
			}
		}
	}
}

// 1b. Distinct keys are distinct leases in Redis too (the runtime's
// namespace mapping of '{', '}', '%' stays injective): holding one never
// makes the other busy.
func TestAdv74a_DistinctKeysDistinctLeases(t *testing.T) {
	t.Parallel()
	c1, c2 := client(t), client(t)
	ctx := context.Background()
	base := uniq("d")
	pairs := [][2]string{{"{x}", "%7Bx%7D"}, {"%", "%25"}, {"a}", "a%7D"}, {"}:l", "%7D:l"}, {"{", "%7B"}}
	for _, p := range pairs {
		id1, id2 := base+p[0], base+p[1]
		entered, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- ResA(ctx, c1, id1, entered, release) }()
		select {
		case <-entered:
		case err := <-done:
			t.Fatalf("ResA(%q) = %v", id1, err)
		}
		k, err := ResB(ctx, c2, id2)
		close(release)
		if err != nil {
			t.Errorf("ResB(%q) while ResA(%q) holds = %v; want nil (different keys)", id2, id1, err)
		} else if k != "res:"+lease.KeyPart(id2) {
			t.Errorf("ResB key %q", k)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// 1c. Same template, same arguments: one lease, across functions and
// across part types (string "5" and int64 5 both name res:5).
func TestAdv74a_SameTemplateSharesLease(t *testing.T) {
	// Not parallel: counts Calls.
	c1, c2 := client(t), client(t)
	ctx := context.Background()
	n := time.Now().UnixNano()
	id := fmt.Sprint(n)
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- ResA(ctx, c1, id, entered, release) }()
	<-entered
	before := Calls.Load()
	if _, err := ResB(ctx, c2, id); !errors.Is(err, lease.ErrBusy) {
		t.Errorf("ResB(%q) while ResA holds = %v, want ErrBusy", id, err)
	}
	if _, err := ResInt(ctx, c2, n); !errors.Is(err, lease.ErrBusy) {
		t.Errorf("ResInt(%d) while ResA(%q) holds = %v, want ErrBusy", n, id, err)
	}
	// Same Client, another goroutine (not nested): still busy.
	if _, err := ResB(ctx, c1, id); !errors.Is(err, lease.ErrBusy) {
		t.Errorf("ResB(%q) on the holder's Client = %v, want ErrBusy", id, err)
	}
	if Calls.Load() != before {
		t.Error("a busy call entered its function")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	kb, err1 := ResB(ctx, c2, id)
	ki, err2 := ResInt(ctx, c2, n)
	if err1 != nil || err2 != nil || kb != ki || kb != "res:"+id {
		t.Fatalf("ResB = %q, %v; ResInt = %q, %v; want both res:%s", kb, err1, ki, err2, id)
	}
}

// 1d. Key part kinds: named string with String uses its value, Stringer
// called once, TextMarshaler errors and empties are bad keys, extreme
// integers, pointer parts.
func TestAdv74a_KeyKinds(t *testing.T) {
	// Not parallel: counts Calls.
	c := client(t)
	ctx := context.Background()
	var n atomic.Int64
	tag := uniq("k")
	k, err := Kinds(ctx, c, Color("red:"+tag), Counted{N: &n, V: "v:1"}, TM{V: "t{x}"}, ^uint64(0), true, -128, -1<<63)
	want := "kinds:red%3A" + tag + ":v%3A1:t%7Bx%7D:18446744073709551615:true:-128:-9223372036854775808"
	if err != nil || k != want {
		t.Fatalf("Kinds = %q, %v; want %q", k, err, want)
	}
	if n.Load() != 1 {
		t.Errorf("String called %d times for one call, want 1", n.Load())
	}
	before := Calls.Load()
	if _, err := Kinds(ctx, c, "x", Counted{N: &n, V: "v"}, TM{Err: ErrMarshal}, 0, false, 0, 0); !errors.Is(err, lease.ErrBadKey) || !errors.Is(err, ErrMarshal) {
		t.Errorf("Kinds with failing MarshalText = %v, want ErrBadKey wrapping ErrMarshal", err)
	}
	if _, err := Kinds(ctx, c, "x", Counted{N: &n, V: "v"}, TM{V: ""}, 0, false, 0, 0); !errors.Is(err, lease.ErrBadKey) {
		t.Errorf("Kinds with empty MarshalText = %v, want ErrBadKey", err)
	}
	if _, err := Kinds(ctx, c, "x", Counted{N: &n, V: ""}, TM{V: "t"}, 0, false, 0, 0); !errors.Is(err, lease.ErrBadKey) {
		t.Errorf("Kinds with empty String = %v, want ErrBadKey", err)
	}
	if _, err := Kinds(ctx, c, "", Counted{N: &n, V: "v"}, TM{V: "t"}, 0, false, 0, 0); !errors.Is(err, lease.ErrBadKey) {
		t.Errorf("Kinds with empty Color = %v, want ErrBadKey", err)
	}
	if _, err := Pstr(ctx, c, nil); !errors.Is(err, lease.ErrBadKey) {
		t.Errorf("Pstr(nil) = %v, want ErrBadKey", err)
	}
	if Calls.Load() != before {
		t.Error("function called with a bad key")
	}
	s := "a:b{" + tag
	if k, err := Pstr(ctx, c, &s); err != nil || k != "pstr:"+lease.KeyPart(s) {
		t.Errorf("Pstr(&%q) = %q, %v", s, k, err)
	}
}

// 2a. ttl= and //lease:defaults ttl reach the runtime.
func TestAdv74a_TTLAndDefaults(t *testing.T) {
	t.Parallel()
	c, obs := client(t), client(t)
	ctx := context.Background()
	id := uniq("ttl")
	check := func(what, key string, lo, hi time.Duration) Body {
		return func(ctx context.Context) error {
			info, err := obs.Inspect(ctx, key)
			if err != nil {
				return err
			}
			if info.TTL <= lo || info.TTL > hi {
				return fmt.Errorf("%s: server TTL %v, want in (%v, %v]", what, info.TTL, lo, hi)
			}
			l, _ := lease.FromContext(ctx)
			if r := l.Remaining(); r > hi || r <= lo {
				return fmt.Errorf("%s: Remaining %v, want in (%v, %v]", what, r, lo, hi)
			}
			return nil
		}
	}
	if err := OptTTL(ctx, c, id, check("ttl=900ms", "opt:ttl:"+id, 400*time.Millisecond, 900*time.Millisecond)); err != nil {
		t.Error(err)
	}
	if err := OptDefault(ctx, c, id, check("defaults ttl=1500ms", "opt:def:"+id, 1000*time.Millisecond, 1500*time.Millisecond)); err != nil {
		t.Error(err)
	}
	// Without fence, TokenFrom reports false.
	if err := OptDefault(ctx, c, id, func(ctx context.Context) error {
		if tok, ok := lease.TokenFrom(ctx); ok {
			return fmt.Errorf("TokenFrom = %d, true without fence", tok)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// 2b. deadline=700ms: the wrapper returns by it, fn's cause is ErrDeadline.
func TestAdv74a_Deadline(t *testing.T) {
	t.Parallel()
	c := client(t)
	var cause error
	start := time.Now()
	err := OptDeadline(context.Background(), c, uniq("dl"), func(ctx context.Context) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	took := time.Since(start)
	if !errors.Is(err, lease.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("OptDeadline = %v, want ErrDeadline and DeadlineExceeded", err)
	}
	if !errors.Is(cause, lease.ErrDeadline) {
		t.Errorf("fn's cause = %v, want ErrDeadline", cause)
	}
	if took < 500*time.Millisecond || took > 700*time.Millisecond+400*time.Millisecond {
		t.Errorf("OptDeadline returned after %v, want about 700ms", took)
	}
	// A caller deadline shorter than the directive's wins.
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = OptDeadline(ctx, c, uniq("dl"), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if took := time.Since(start); took > 250*time.Millisecond+400*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("OptDeadline under a 250ms ctx = %v after %v", err, took)
	}
}

// 2b'. fn that ignores ctx past the deadline: results still pass through
// without a data race (-race), and the error wraps ErrDeadline.
func TestAdv74a_DeadlineFnIgnoresCtx(t *testing.T) {
	t.Parallel()
	c := client(t)
	start := time.Now()
	n, s, err := SlowMulti(context.Background(), c, uniq("slow"), func(ctx context.Context) error {
		time.Sleep(700 * time.Millisecond)
		return nil
	})
	took := time.Since(start)
	t.Logf("SlowMulti = %d, %v, %v after %v", n, s, err, took)
	if !errors.Is(err, lease.ErrDeadline) {
		t.Errorf("SlowMulti = %v, want ErrDeadline", err)
	}
	if took >= 650*time.Millisecond && (n != 99 || len(s) != 1) {
		t.Errorf("SlowMulti waited for fn but dropped its results: %d, %v", n, s)
	}
}

// 2c. wait=700ms: a key held by another Client is waited for; a key held
// longer gives ErrBusy after about the wait.
func TestAdv74a_Wait(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	ctx := context.Background()
	id := uniq("w")
	key := "opt:wait:" + id
	rel := make(chan struct{})
	hd := holdFor(t, other, key, lease.Spec{TTL: 3 * time.Second, Deadline: 4 * time.Second}, rel)
	time.AfterFunc(250*time.Millisecond, func() { close(rel) })
	start := time.Now()
	var entered atomic.Bool
	if err := OptWait(ctx, c, id, func(context.Context) error { entered.Store(true); return nil }); err != nil || !entered.Load() {
		t.Errorf("OptWait after a 250ms hold = %v, entered %v; want nil", err, entered.Load())
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("OptWait entered after %v while the key was held 250ms", took)
	}
	if err := <-hd; err != nil {
		t.Fatal(err)
	}

	rel2 := make(chan struct{})
	defer close(rel2)
	holdFor(t, other, key, lease.Spec{TTL: 3 * time.Second, Deadline: 4 * time.Second}, rel2)
	entered.Store(false)
	start = time.Now()
	err := OptWait(ctx, c, id, func(context.Context) error { entered.Store(true); return nil })
	took := time.Since(start)
	if !errors.Is(err, lease.ErrBusy) || entered.Load() {
		t.Errorf("OptWait on a held key = %v, entered %v; want ErrBusy", err, entered.Load())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("OptWait's busy error wraps DeadlineExceeded though no deadline passed: %v", err)
	}
	if took < 600*time.Millisecond || took > 700*time.Millisecond+500*time.Millisecond {
		t.Errorf("OptWait gave up after %v, want about 700ms", took)
	}
}

// 2d. fence: tokens strictly increase across Clients.
func TestAdv74a_FenceAcrossClients(t *testing.T) {
	t.Parallel()
	cs := []*lease.Client{client(t), client(t), client(t)}
	id := uniq("f")
	var last lease.Token
	for i := 0; i < 9; i++ {
		var inner lease.Token
		tok, err := OptFence(context.Background(), cs[i%3], id, func(ctx context.Context) error {
			inner, _ = lease.TokenFrom(ctx)
			return nil
		})
		if err != nil || tok == 0 || tok != inner || tok <= last {
			t.Fatalf("call %d: OptFence = %d (inner %d), %v; last %d", i, tok, inner, err, last)
		}
		last = tok
	}
}

// 2e. hold-min=800ms: the key stays held after fn returns.
func TestAdv74a_HoldMin(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	id := uniq("h")
	key := "opt:hold:" + id
	start := time.Now()
	if err := OptHold(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	spec := lease.Spec{TTL: time.Second, Deadline: 2 * time.Second}
	err := other.Do(context.Background(), key, spec, func(context.Context) error { return nil })
	if since := time.Since(start); since < 600*time.Millisecond && !errors.Is(err, lease.ErrBusy) {
		t.Errorf("Do %v after a hold-min=800ms grant = %v, want ErrBusy", since, err)
	}
	info, _ := other.Inspect(context.Background(), key)
	if since := time.Since(start); since < 600*time.Millisecond && !info.Hold {
		t.Errorf("Inspect %v after grant = %+v, want Hold", since, info)
	}
	time.Sleep(time.Until(start.Add(900 * time.Millisecond)))
	if err := other.Do(context.Background(), key, spec, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after the hold = %v", err)
	}
}

// 2f. keep=2500ms: the next call reuses the lease with the same token;
// a waiter on another Client gets it long before the keep ends.
func TestAdv74a_Keep(t *testing.T) {
	t.Parallel()
	rec := &leasetest.Recorder{}
	c, other := client(t, lease.WithObserver(rec)), client(t)
	ctx := context.Background()
	id := uniq("keep")
	t1, err1 := OptKeep(ctx, c, id, nil)
	t2, err2 := OptKeep(ctx, c, id, nil)
	if err1 != nil || err2 != nil || t1 == 0 || t1 != t2 {
		t.Fatalf("OptKeep twice = %d, %v; %d, %v; want the same token", t1, err1, t2, err2)
	}
	kept := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventAcquired && e.Kept {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("%d kept acquires, want 1", kept)
	}
	start := time.Now()
	var got lease.Token
	err := other.Do(ctx, "opt:keep:"+id, lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Wait: 1500 * time.Millisecond, Fence: true},
		func(ctx context.Context) error { got, _ = lease.TokenFrom(ctx); return nil })
	if took := time.Since(start); err != nil || took > 700*time.Millisecond {
		t.Errorf("another Client waiting on a kept lease = %v after %v; want it released at once", err, took)
	}
	if got <= t1 {
		t.Errorf("other's token %d, want > %d", got, t1)
	}
	t3, err := OptKeep(ctx, c, id, nil)
	if err != nil || t3 <= got {
		t.Errorf("OptKeep after the other Client = %d, %v; want a new token > %d", t3, err, got)
	}
}

// 2g. busy=skip: zero results, nil, fn not called, skip reported.
func TestAdv74a_BusySkip(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	id := uniq("skip")
	rel := make(chan struct{})
	hd := holdFor(t, other, "opt:skip:"+id, lease.Spec{TTL: 3 * time.Second, Deadline: 4 * time.Second}, rel)
	ctx, skipped := lease.WithSkipReport(context.Background())
	var entered atomic.Bool
	n, s, err := OptSkip(ctx, c, id, func(context.Context) error { entered.Store(true); return nil })
	if err != nil || n != 0 || s != "" || entered.Load() || !skipped() {
		t.Errorf("OptSkip while held = %d, %q, %v (entered %v, skipped %v); want 0, \"\", nil, skipped", n, s, err, entered.Load(), skipped())
	}
	close(rel)
	if err := <-hd; err != nil {
		t.Fatal(err)
	}
	ctx, skipped = lease.WithSkipReport(context.Background())
	n, s, err = OptSkip(ctx, c, id, nil)
	if err != nil || n != 7 || s != "ran" || skipped() {
		t.Errorf("OptSkip when free = %d, %q, %v, skipped %v", n, s, err, skipped())
	}
}

// 2h. name= and Spec.Name on events; client= field, package variable,
// added parameter.
func TestAdv74a_NamesAndClients(t *testing.T) {
	t.Parallel()
	rec := &leasetest.Recorder{}
	c := client(t, lease.WithObserver(rec))
	closed, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	ctx := context.Background()
	id := uniq("n")
	if err := CustomName(ctx, c, id, nil); err != nil {
		t.Fatal(err)
	}
	s := Svc{A: closed, B: c}
	if err := s.ViaB(ctx, id, func(ctx context.Context) error {
		// Reentrancy on c proves the lease is B's.
		return c.Do(ctx, "svc:"+id, lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil })
	}); err != nil {
		t.Errorf("Svc.ViaB = %v", err)
	}
	if err := Added(ctx, c, id, nil); err != nil {
		t.Errorf("Added = %v", err)
	}
	names := map[string]string{}
	for _, e := range rec.Events() {
		if e.Kind == lease.EventAcquired {
			names[e.Key] = e.Name
		}
	}
	want := map[string]string{"opt:name:" + id: "adv74a.optName", "svc:" + id: "adv74a.Svc.viaB", "added:" + id: "adv74a.added"}
	for k, w := range want {
		if names[k] != w {
			t.Errorf("EventAcquired for %q named %q, want %q", k, names[k], w)
		}
	}
}

func TestAdv74a_ClientPackageVar(t *testing.T) {
	// Not parallel: sets Global.
	Global = client(t)
	defer func() { Global = nil }()
	var ok bool
	if err := ViaGlobal(context.Background(), uniq("g"), func(ctx context.Context) error {
		_, ok = lease.FromContext(ctx)
		return nil
	}); err != nil || !ok {
		t.Fatalf("ViaGlobal = %v (lease in ctx %v)", err, ok)
	}
}

// 3a. Results pass through unchanged, also alongside fn's error; generic
// wrappers too.
func TestAdv74a_Results(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	id := uniq("m")
	n, s, m, err := Multi(ctx, c, id, nil)
	if err != nil || n != 42 || s != "answer" || m["k"] != 1 {
		t.Errorf("Multi = %d, %q, %v, %v", n, s, m, err)
	}
	errX := errors.New("x")
	n, s, m, err = Multi(ctx, c, id, errX)
	if !errors.Is(err, errX) || n != 42 || s != "answer" || m["k"] != 1 {
		t.Errorf("Multi failing = %d, %q, %v, %v; want results and errX", n, s, m, err)
	}
	if v, err := Generic(ctx, c, id, []int{1, 2}); err != nil || len(v) != 2 {
		t.Errorf("Generic = %v, %v", v, err)
	}
	if v, err := Generic[string](ctx, c, id, "s"); err != nil || v != "s" {
		t.Errorf("Generic = %v, %v", v, err)
	}
}

// 3b. A panic in fn propagates and the key is released.
func TestAdv74a_PanicReleases(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	id := uniq("p")
	func() {
		defer func() {
			if r := recover(); r != "adv74a boom" {
				t.Errorf("recovered %v, want the panic of fn", r)
			}
		}()
		Panicky(context.Background(), c, id)
		t.Error("Panicky returned")
	}()
	info, err := other.Inspect(context.Background(), "panic:"+id)
	if err != nil || !info.Free() {
		t.Errorf("after the panic the key is %+v, %v; want free", info, err)
	}
	if err := other.Do(context.Background(), "panic:"+id, lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after the panic = %v", err)
	}
}

// 3c. Blackholed replies during the acquire: ErrUnknown by the deadline,
// fn not entered.
func TestAdv74a_FaultBlackhole(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	c := newClient(t, redis.NewClient(&redis.Options{Addr: p.Addr()}))
	t.Cleanup(func() { c.Redis().Close() })
	id := uniq("bh")
	if err := Fault(context.Background(), c, id, nil); err != nil { // warm the pool
		t.Fatal(err)
	}
	p.Set(leasetest.Blackhole)
	var entered atomic.Bool
	start := time.Now()
	err := Fault(context.Background(), c, id, func(context.Context) error { entered.Store(true); return nil })
	took := time.Since(start)
	if !errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrBusy) || entered.Load() {
		t.Errorf("Fault with replies blackholed = %v (entered %v); want ErrUnknown, not entered", err, entered.Load())
	}
	if took > 1200*time.Millisecond+400*time.Millisecond {
		t.Errorf("Fault returned after %v, deadline 1.2s", took)
	}
	p.Set(leasetest.Pass)
}

// 3d. A cut reply is replayed by go-redis and ends in our own grant
// (DESIGN 8), never busy.
func TestAdv74a_FaultCutReply(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	c := newClient(t, rdb)
	t.Cleanup(func() { rdb.Close() })
	id := uniq("cut")
	if err := Fault(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.CutNextReply)
	var entered atomic.Int64
	err := Fault(context.Background(), c, id, func(context.Context) error { entered.Add(1); return nil })
	if p.Cut() == 0 {
		t.Fatal("no reply was cut")
	}
	if errors.Is(err, lease.ErrBusy) {
		t.Fatalf("Fault after a cut reply = %v: our own grant reported busy", err)
	}
	if err != nil || entered.Load() != 1 {
		t.Errorf("Fault after a cut reply = %v, entered %d; want nil, entered once (go-redis replays)", err, entered.Load())
	}
}

// 3e. New connections refused: ErrRefused, not ErrUnknown, not entered.
func TestAdv74a_FaultRefused(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 1})
	c := newClient(t, rdb)
	t.Cleanup(func() { rdb.Close() })
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	var entered atomic.Bool
	err := Fault(context.Background(), c, uniq("ref"), func(context.Context) error { entered.Store(true); return nil })
	if !errors.Is(err, lease.ErrRefused) || errors.Is(err, lease.ErrUnknown) || entered.Load() {
		t.Errorf("Fault with connections refused = %v (entered %v); want ErrRefused", err, entered.Load())
	}
}

// 3f. A paused server while fn runs: fn's ctx ends with a cause wrapping
// ErrLost within the ttl; the wrapper's error wraps ErrLost.
func TestAdv74a_PausedServerLoss(t *testing.T) {
	t.Parallel()
	own := leasetest.StartRedis(t)
	c := newClient(t, own.Client(t))
	var cause error
	var pausedAt, lostAt time.Time
	err := Fault(context.Background(), c, uniq("pause"), func(ctx context.Context) error {
		own.Pause()
		pausedAt = time.Now()
		<-ctx.Done()
		lostAt = time.Now()
		cause = context.Cause(ctx)
		return nil
	})
	own.Resume()
	if !errors.Is(cause, lease.ErrLost) {
		t.Errorf("fn's cause = %v, want ErrLost", cause)
	}
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("Fault = %v, want ErrLost", err)
	}
	if d := lostAt.Sub(pausedAt); d > 600*time.Millisecond+200*time.Millisecond {
		t.Errorf("loss told %v after the pause, ttl 600ms", d)
	}
}

// 4. //lease:leader: one leader at a time across two Clients, increasing
// terms, and a blackholed leader is told its loss before the other leads.
func TestAdv74a_LeaderOneAtATime(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	rdbA := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdbA.Close() })
	a := &Node{Leases: newClient(t, rdbA, lease.WithRecheck(100*time.Millisecond)), Name: "a"}
	b := &Node{Leases: client(t, lease.WithRecheck(100*time.Millisecond)), Name: "b"}
	shard := int(seq.Add(1) + time.Now().UnixNano()%1000000)

	var mu sync.Mutex
	var active int
	var overlap bool
	type term struct {
		who        string
		tok        lease.Token
		start, end time.Time
		cause      error
	}
	terms := make(chan term, 16)
	body := func(who string) Body {
		return func(ctx context.Context) error {
			mu.Lock()
			active++
			if active > 1 {
				overlap = true
			}
			mu.Unlock()
			tok, _ := lease.TokenFrom(ctx)
			st := time.Now()
			<-ctx.Done()
			mu.Lock()
			active--
			mu.Unlock()
			terms <- term{who, tok, st, time.Now(), context.Cause(ctx)}
			return nil
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- a.LeadAsLeader(ctxA, shard, body("a")) }()
	// Let a lead first.
	deadline := time.Now().Add(3 * time.Second)
	for {
		l, err := b.Leases.Leader(context.Background(), "adv74a:leader:"+fmt.Sprint(shard))
		if err == nil && l.Owner == "a" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a does not lead: %+v, %v", l, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	go func() { doneB <- b.LeadAsLeader(ctxB, shard, body("b")) }()
	time.Sleep(200 * time.Millisecond)
	p.Set(leasetest.Blackhole) // a is cut off
	var ta, tb term
	select {
	case ta = <-terms:
	case <-time.After(3 * time.Second):
		t.Fatal("a's term did not end after its replies were blackholed")
	}
	if ta.who != "a" || !errors.Is(ta.cause, lease.ErrLost) {
		t.Errorf("first term ended: %s with cause %v; want a, ErrLost", ta.who, ta.cause)
	}
	stopA()
	// b takes over.
	deadline = time.Now().Add(3 * time.Second)
	for {
		l, err := b.Leases.Leader(context.Background(), "adv74a:leader:"+fmt.Sprint(shard))
		if err == nil && l.Owner == "b" {
			if l.Term <= ta.tok {
				t.Errorf("b's term %d not above a's %d", l.Term, ta.tok)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not take over: %+v, %v", l, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Set(leasetest.Pass)
	stopB()
	select {
	case tb = <-terms:
	case <-time.After(3 * time.Second):
		t.Fatal("b's term did not end")
	}
	if tb.who != "b" || tb.start.Before(ta.end) || tb.tok <= ta.tok {
		t.Errorf("b's term %+v overlaps or does not follow a's %+v", tb, ta)
	}
	mu.Lock()
	if overlap {
		t.Error("two leaders at once")
	}
	mu.Unlock()
	if err := <-doneB; err != nil {
		t.Errorf("b's LeadAsLeader = %v", err)
	}
	select {
	case err := <-doneA:
		t.Logf("a's LeadAsLeader = %v", err)
	case <-time.After(3 * time.Second):
		t.Error("a's LeadAsLeader did not return after its ctx ended (blackholed)")
	}
}

// 2i. A nested wrapper call on the same key and Client reuses the lease
// (same token); Fence under an unfenced outer lease is an error.
func TestAdv74a_NestedWrappers(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	id := uniq("nest")
	var inner lease.Token
	outer, err := ResFenced(ctx, c, id, func(ctx context.Context) error {
		var err error
		inner, err = ResFenced(ctx, c, id, nil)
		return err
	})
	if err != nil || outer == 0 || inner != outer {
		t.Errorf("nested ResFenced = outer %d, inner %d, %v; want the same token", outer, inner, err)
	}
	var innerErr error
	var entered atomic.Bool
	err = ResBody(ctx, c, id, func(ctx context.Context) error {
		_, innerErr = ResFenced(ctx, c, id, func(context.Context) error { entered.Store(true); return nil })
		return nil
	})
	if err != nil || innerErr == nil || entered.Load() {
		t.Errorf("fenced wrapper nested in an unfenced one on the same key = %v (outer %v, entered %v); want an error, not entered", innerErr, err, entered.Load())
	}
	t.Logf("fenced under unfenced: %v", innerErr)
}

// 2j. min-validity reaches the runtime: a grant read 400ms late on a
// ttl=600ms lease (min-validity 300ms) is not entered: ErrLowValidity (or
// ErrUnknown, DESIGN 8), and the key is released.
func TestAdv74a_LowValidity(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	c := newClient(t, rdb)
	t.Cleanup(func() { rdb.Close() })
	obs := client(t)
	id := uniq("lowv")
	if err := Fault(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(400 * time.Millisecond)
	var entered atomic.Bool
	err := Fault(context.Background(), c, id, func(context.Context) error { entered.Store(true); return nil })
	p.Set(leasetest.Pass)
	if entered.Load() || !(errors.Is(err, lease.ErrLowValidity) || errors.Is(err, lease.ErrUnknown)) {
		t.Errorf("Fault with 400ms late replies = %v (entered %v); want ErrLowValidity, not entered", err, entered.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if info, err := obs.Inspect(context.Background(), "fault:"+id); err != nil || !info.Free() {
		t.Errorf("key after the refused grant: %+v, %v; want free", info, err)
	}
}

// 3g. busy=skip never turns an unknown or refused outcome into a silent
// skip.
func TestAdv74a_SkipIsNotUnknown(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	c := newClient(t, rdb)
	t.Cleanup(func() { rdb.Close() })
	id := uniq("skipf")
	if _, err := SkipFault(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.Blackhole)
	ctx, skipped := lease.WithSkipReport(context.Background())
	n, err := SkipFault(ctx, c, id, nil)
	if !errors.Is(err, lease.ErrUnknown) || skipped() || n != 0 {
		t.Errorf("SkipFault blackholed = %d, %v, skipped %v; want ErrUnknown, not skipped", n, err, skipped())
	}
	p.Set(leasetest.Pass)
	p.CloseConns()
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	ctx, skipped = lease.WithSkipReport(context.Background())
	n, err = SkipFault(ctx, c, id, nil)
	if err == nil || errors.Is(err, lease.ErrBusy) || skipped() {
		t.Errorf("SkipFault refused = %d, %v, skipped %v; want an error (ErrRefused), not skipped", n, err, skipped())
	}
	t.Logf("refused: %v", err)
}

// 3h. Caller cancellation: before the call, while waiting.
func TestAdv74a_CallerCancel(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var entered atomic.Bool
	if err := OptDefault(ctx, c, uniq("cc"), func(context.Context) error { entered.Store(true); return nil }); !errors.Is(err, context.Canceled) || entered.Load() {
		t.Errorf("OptDefault on a cancelled ctx = %v, entered %v; want context.Canceled", err, entered.Load())
	}
	id := uniq("cw")
	rel := make(chan struct{})
	defer close(rel)
	holdFor(t, other, "opt:wait:"+id, lease.Spec{TTL: 3 * time.Second, Deadline: 4 * time.Second}, rel)
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	start := time.Now()
	err := OptWait(ctx, c, id, func(context.Context) error { entered.Store(true); return nil })
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 500*time.Millisecond || entered.Load() {
		t.Errorf("OptWait cancelled while waiting = %v after %v (entered %v); want context.Canceled at once", err, took, entered.Load())
	}
	// fn returned nil, then the caller cancelled: nil.
	ctx, cancel = context.WithCancel(context.Background())
	if err := OptDefault(ctx, c, uniq("ca"), func(context.Context) error { cancel(); return nil }); err != nil {
		t.Errorf("OptDefault cancelled after fn returned nil = %v, want nil", err)
	}
}

// 3i. A panic under keep= propagates and the lease is not left held.
func TestAdv74a_KeepPanicReleases(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	id := uniq("kp")
	func() {
		defer func() {
			if r := recover(); r != "adv74a keep boom" {
				t.Errorf("recovered %v", r)
			}
		}()
		KeepPanic(context.Background(), c, id, true)
	}()
	err := other.Do(context.Background(), "keeppanic:"+id, lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil })
	if err != nil {
		t.Errorf("another Client after a panic under keep= = %v; want the key released", err)
	}
	// The Client still works for the key afterwards.
	if err := KeepPanic(context.Background(), c, id, false); err != nil {
		t.Errorf("KeepPanic after = %v", err)
	}
}

type tokStore struct{}

func (tokStore) Put(ctx context.Context, key string, body Body) (lease.Token, error) {
	tok, _ := lease.TokenFrom(ctx)
	return tok, run(ctx, body)
}

func (tokStore) Get(ctx context.Context, key string) (string, error) {
	if _, ok := lease.FromContext(ctx); ok {
		return "", errors.New("Get ran under a lease")
	}
	return key, nil
}

// 3j. Decorators on two Clients: one holder at a time, the second waits
// (wait=300ms) and enters after with a greater token.
func TestAdv74a_DecoratorTwoClients(t *testing.T) {
	t.Parallel()
	s1, s2 := NewLeasedStore(tokStore{}, client(t)), NewLeasedStore(tokStore{}, client(t))
	key := uniq("st")
	entered, release := make(chan struct{}), make(chan struct{})
	type res struct {
		tok lease.Token
		err error
	}
	r1 := make(chan res, 1)
	go func() {
		tok, err := s1.Put(context.Background(), key, func(context.Context) error { close(entered); <-release; return nil })
		r1 <- res{tok, err}
	}()
	<-entered
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	tok2, err2 := s2.Put(context.Background(), key, nil)
	a := <-r1
	if a.err != nil || err2 != nil || tok2 <= a.tok {
		t.Errorf("Put on s1 = %d, %v; then s2 = %d, %v; want s2 to wait and get a greater token", a.tok, a.err, tok2, err2)
	}
	if v, err := s2.Get(context.Background(), key); err != nil || v != key {
		t.Errorf("Get = %q, %v", v, err)
	}
}

// 2k. A fenced call after an unfenced kept lease on the same key and
// Client must run with a real token (or fail), never enter without one;
// an unfenced call after a fenced kept lease must not see a token
// (DESIGN 8: without fence, TokenFrom reports false).
func TestAdv74a_KeepFenceMismatch(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	id := uniq("kk")
	if err := KeepPlain(ctx, c, id, nil); err != nil {
		t.Fatal(err)
	}
	tok, ok, err := KeepFenced(ctx, c, id, nil)
	if err == nil && (!ok || tok == 0) {
		t.Errorf("fenced call after a kept unfenced lease entered with token %d, ok %v", tok, ok)
	}
	t.Logf("fenced after kept unfenced: %d, %v, %v", tok, ok, err)

	id2 := uniq("kf")
	t1, err := KeepFencedKeep(ctx, c, id2, nil)
	if err != nil || t1 == 0 {
		t.Fatal(t1, err)
	}
	var ltok lease.Token
	err = KeepFencedPlain(ctx, c, id2, func(ctx context.Context) error {
		tok, ok = lease.TokenFrom(ctx)
		l, _ := lease.FromContext(ctx)
		ltok = l.Token()
		return nil
	})
	// The unfenced call runs under the fenced grant the Client kept (no
	// acquire of its own), and sees that grant's token, as a nested
	// unfenced call inside a fenced one does: Spec.Keep's and TokenFrom's
	// docs say so. (The round expected 0 and false, by DESIGN 8's "without
	// fence, Lease.Token() is 0", which is about calls that acquire.)
	if err != nil || !ok || tok != t1 || ltok != t1 {
		t.Errorf("unfenced call after a kept fenced lease: TokenFrom = %d, %v; Lease.Token() = %d; err %v; want the kept grant's %d, true, %d, nil", tok, ok, ltok, err, t1, t1)
	}
}

// 2l. Close releases kept leases at once.
func TestAdv74a_CloseReleasesKept(t *testing.T) {
	t.Parallel()
	rdb := srv.Client(t)
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	other := client(t)
	id := uniq("kc")
	if _, err := OptKeep(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Do(context.Background(), "opt:keep:"+id, lease.Spec{TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after Close of a Client keeping the lease = %v", err)
	}
	if _, err := OptKeep(context.Background(), c, id, nil); !errors.Is(err, lease.ErrClosed) {
		t.Errorf("OptKeep on a closed Client = %v, want ErrClosed", err)
	}
}

// 2m. hold-min against a waiter on another Client and a second call on
// the same Client: nobody enters before the hold ends; the waiter enters
// soon after it.
func TestAdv74a_HoldMinWaiter(t *testing.T) {
	t.Parallel()
	c, other := client(t), client(t)
	id := uniq("hw")
	start := time.Now()
	if err := OptHold(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	if err := OptHold(context.Background(), c, id, nil); !errors.Is(err, lease.ErrBusy) {
		if since := time.Since(start); since < 700*time.Millisecond {
			t.Errorf("second OptHold on the same Client %v after the grant = %v, want ErrBusy (hold-min=800ms)", since, err)
		}
	}
	var enteredAt time.Time
	err := other.Do(context.Background(), "opt:hold:"+id, lease.Spec{TTL: time.Second, Deadline: 2500 * time.Millisecond, Wait: 2 * time.Second},
		func(context.Context) error { enteredAt = time.Now(); return nil })
	if err != nil {
		t.Fatalf("waiter = %v", err)
	}
	if d := enteredAt.Sub(start); d < 780*time.Millisecond || d > 800*time.Millisecond+600*time.Millisecond {
		t.Errorf("waiter entered %v after the grant, hold-min 800ms", d)
	}
}

// 4b. A leader's identity with separators reads back unchanged.
func TestAdv74a_LeaderOwnerEscaped(t *testing.T) {
	t.Parallel()
	owner := "web-7:8080/x%y{z} é"
	n := &Node{Leases: client(t), Name: owner}
	shard := int(seq.Add(1)+time.Now().UnixNano()%1000000) + 5000000
	ctx, stop := context.WithCancel(context.Background())
	entered := make(chan lease.Token, 1)
	done := make(chan error, 1)
	go func() {
		done <- n.LeadAsLeader(ctx, shard, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			entered <- tok
			<-ctx.Done()
			return nil
		})
	}()
	var tok lease.Token
	select {
	case tok = <-entered:
	case <-time.After(3 * time.Second):
		t.Fatal("no term")
	}
	l, err := client(t).Leader(context.Background(), "adv74a:leader:"+fmt.Sprint(shard))
	if err != nil || l.Owner != owner || l.Term != tok {
		t.Errorf("Leader = %+v, %v; want owner %q term %d", l, err, owner, tok)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("LeadAsLeader = %v", err)
	}
}

// 3k. A kept lease lost while the server is paused is not reused: the
// next call acquires afresh with a greater token.
func TestAdv74a_KeptLeaseLostInPause(t *testing.T) {
	t.Parallel()
	own := leasetest.StartRedis(t)
	c := newClient(t, own.Client(t))
	id := uniq("kl")
	t1, err := OptKeep(context.Background(), c, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	own.Pause()
	time.Sleep(1700 * time.Millisecond) // past the ttl (1.5s): no renewal got through
	own.Resume()
	var inner lease.Token
	t2, err := OptKeep(context.Background(), c, id, func(ctx context.Context) error {
		inner, _ = lease.TokenFrom(ctx)
		return nil
	})
	if err != nil || t2 <= t1 || inner != t2 {
		t.Errorf("OptKeep after the kept lease ran out = %d (inner %d), %v; want a fresh token > %d", t2, inner, err, t1)
	}
}

// 3l. With go-redis retries off, a cut acquire reply is unknown: fn not
// entered, and the conditional release frees the key the acquire took.
func TestAdv74a_FaultCutNoRetry(t *testing.T) {
	t.Parallel()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	c := newClient(t, rdb)
	t.Cleanup(func() { rdb.Close() })
	obs := client(t)
	id := uniq("cnr")
	if err := Fault(context.Background(), c, id, nil); err != nil {
		t.Fatal(err)
	}
	p.Set(leasetest.CutNextReply)
	var entered atomic.Bool
	err := Fault(context.Background(), c, id, func(context.Context) error { entered.Store(true); return nil })
	if p.Cut() == 0 {
		t.Fatal("no reply was cut")
	}
	if !errors.Is(err, lease.ErrUnknown) || errors.Is(err, lease.ErrBusy) || entered.Load() {
		t.Errorf("Fault with the acquire's reply cut, no retries = %v (entered %v); want ErrUnknown, not entered", err, entered.Load())
	}
	if info, err := obs.Inspect(context.Background(), "fault:"+id); err != nil || !info.Free() {
		t.Errorf("key after the unknown acquire and its release: %+v, %v; want free", info, err)
	}
}
