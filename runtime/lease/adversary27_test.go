package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv27IsRelease tells the release script's command by its literal
// "PUBLISH" argument (release.go's argv).
func adv27IsRelease(cmd redis.Cmder) bool {
	return slices.Contains(cmd.Args(), any("PUBLISH"))
}

// adv27Hook calls onRelease with the context go-redis runs the release
// script with.
type adv27Hook struct{ onRelease func(ctx context.Context) }

func (h *adv27Hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv27Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if adv27IsRelease(cmd) {
			h.onRelease(ctx)
		}
		return next(ctx, cmd)
	}
}
func (h *adv27Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A hook that ties cleanup to the release's context (context.AfterFunc,
// or a goroutine waiting on Done, as an async span exporter does) sees it
// done once the release is over, as with context.WithDeadline's cancel:
// the release's context must not stay open forever after the release
// (its timer stopped, Done never closed), leaking the hook's goroutine.
func TestAdversary27_ReleaseCtxDoneAfterRelease(t *testing.T) {
	rdb := shared.Client(t)
	var (
		mu   sync.Mutex
		ctxs []context.Context
		ran  atomic.Int32
	)
	rdb.AddHook(&adv27Hook{onRelease: func(ctx context.Context) {
		mu.Lock()
		ctxs = append(ctxs, ctx)
		mu.Unlock()
		context.AfterFunc(ctx, func() { ran.Add(1) }) // stop never called
	}})
	ignore := goleak.IgnoreCurrent()
	c, _ := newClient(t, rdb, lease.WithReleaseTimeout(30*time.Second))
	for _, s := range []lease.Spec{
		{TTL: 20 * time.Second, Deadline: time.Minute},
		{TTL: 20 * time.Second, Deadline: time.Minute, Fence: true},
		{TTL: 20 * time.Second, Deadline: time.Minute, Wait: time.Second},
	} {
		if err := c.Do(context.Background(), uniqueKey(t), s, nop); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	n := len(ctxs)
	got := slices.Clone(ctxs)
	mu.Unlock()
	if n < 3 {
		t.Fatalf("saw %d releases, want at least 3", n)
	}
	if !waitFor(3*time.Second, func() bool { return ran.Load() == int32(n) }) {
		t.Errorf("context.AfterFunc on the release context ran %d of %d times in 3s after the calls returned (the release deadline is ~30s away)", ran.Load(), n)
	}
	for i, ctx := range got {
		if ctx.Err() == nil {
			t.Errorf("release %d: its context is not done after the release (Err nil)", i)
		}
	}
	if !waitFor(3*time.Second, func() bool { return goleak.Find(ignore) == nil }) {
		t.Errorf("goroutines leaked: %v", goleak.Find(ignore))
	}
}

type adv27Key struct{}

// adv27Req is a request-scoped value that is itself a context.Context (as
// a web framework's request context is, e.g. *gin.Context).
type adv27Req struct {
	context.Context
	id string
}

// The release's context has the caller's values, also one that happens to
// implement context.Context; not the caller's cancellation: cancelled (with
// a cause) in fn, the release still runs, its context and contexts a hook
// derives from it are live and have no cause, and the caller's cause does
// not leak through context.Cause.
func TestAdversary27_ReleaseCtxValuesAndCause(t *testing.T) {
	rdb := shared.Client(t)
	type seen struct {
		req      any
		err      error
		cause    error
		derived  error
		dlOK     bool
		afterRan bool
		ctx      context.Context
	}
	var (
		mu  sync.Mutex
		got []seen
	)
	rdb.AddHook(&adv27Hook{onRelease: func(ctx context.Context) {
		s := seen{req: ctx.Value(adv27Key{}), err: ctx.Err(), cause: context.Cause(ctx), ctx: ctx}
		_, s.dlOK = ctx.Deadline()
		d, cancel := context.WithTimeout(ctx, time.Minute)
		s.derived = d.Err()
		cancel()
		ran := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { close(ran) })
		select {
		case <-ran:
			s.afterRan = true
		default:
		}
		stop()
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}})
	ignore := goleak.IgnoreCurrent()
	c, rec := newClient(t, rdb)
	myCause := errors.New("adv27: caller gave up")
	for _, s := range []lease.Spec{
		{TTL: 5 * time.Second, Deadline: 10 * time.Second},
		{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true, Wait: time.Second},
	} {
		parent, cancel := context.WithCancelCause(context.Background())
		req := &adv27Req{Context: parent, id: "req-1"}
		ctx := context.WithValue(parent, adv27Key{}, req)
		key := uniqueKey(t)
		err := c.Do(ctx, key, s, func(context.Context) error { cancel(myCause); return nil })
		t.Logf("Do = %v", err)
		if n := shared.Client(t).Exists(context.Background(), lockKey(key)).Val(); n != 0 {
			t.Errorf("key %q still held after Do: the release was cancelled", key)
		}
	}
	released := 0
	for _, e := range rec.Events() {
		if e.Kind == lease.EventReleased {
			released++
		}
	}
	if released != 2 {
		t.Errorf("%d EventReleased, want 2", released)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("saw %d releases, want 2", len(got))
	}
	for i, s := range got {
		if r, ok := s.req.(*adv27Req); !ok || r.id != "req-1" {
			t.Errorf("release %d: hook saw value %v, want the caller's request value", i, s.req)
		}
		if s.err != nil || s.cause != nil || s.derived != nil || s.afterRan {
			t.Errorf("release %d: ctx Err %v, Cause %v, derived Err %v, AfterFunc ran %v: want all live", i, s.err, s.cause, s.derived, s.afterRan)
		}
		if !s.dlOK {
			t.Errorf("release %d: no deadline", i)
		}
		// Over now: done, and the caller's cause is not its cause.
		if !waitFor(3*time.Second, func() bool { return s.ctx.Err() != nil }) {
			t.Errorf("release %d: its context not done after the release", i)
		} else if cause := context.Cause(s.ctx); errors.Is(cause, myCause) || cause != s.ctx.Err() {
			t.Errorf("release %d: after the release, Cause %v, Err %v", i, cause, s.ctx.Err())
		}
	}
	if !waitFor(3*time.Second, func() bool { return goleak.Find(ignore) == nil }) {
		t.Errorf("goroutines leaked: %v", goleak.Find(ignore))
	}
}

// A fence counter seeded high from outside (a migration, or a counter
// carried over from another store) past 2^53, where Lua's doubles no
// longer hold every integer: tokens stay exact and strictly increasing.
func TestAdversary27_FenceCounterPast2To53(t *testing.T) {
	c, _ := sharedClient(t)
	direct := shared.Client(t)
	key := uniqueKey(t)
	fenceKey := strings.TrimSuffix(lockKey(key), ":l") + ":f"
	const seed = 9007199254740993 // 2^53 + 1: not a double
	if err := direct.Set(context.Background(), fenceKey, "9007199254740993", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}
	prev := lease.Token(seed)
	for i := range 3 {
		var tok lease.Token
		if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			l, _ := lease.FromContext(ctx)
			tok = l.Token()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		stored, _ := direct.Get(context.Background(), fenceKey).Result()
		t.Logf("call %d: token %d, counter %s", i, tok, stored)
		if tok <= prev {
			t.Fatalf("call %d: token %d not above the previous %d", i, tok, prev)
		}
		if stored != strconvU(uint64(tok)) {
			t.Errorf("call %d: token %d, counter %s", i, tok, stored)
		}
		prev = tok
	}
}

func strconvU(u uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			return string(b[i:])
		}
	}
}

// The same for a handover: a waiter granted by the holder's release gets
// a token above a counter past 2^53, and the waiter's next call another.
func TestAdversary27_FenceCounterPast2To53Handover(t *testing.T) {
	c, _ := sharedClient(t)
	direct := shared.Client(t)
	key := uniqueKey(t)
	fenceKey := strings.TrimSuffix(lockKey(key), ":l") + ":f"
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true, Wait: 5 * time.Second}
	entered := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	var tok1 lease.Token
	go func() {
		first <- c.Do(context.Background(), key, s, func(ctx context.Context) error {
			l, _ := lease.FromContext(ctx)
			tok1 = l.Token()
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	const seed = "18014398509481985" // 2^54 + 1
	if err := direct.Set(context.Background(), fenceKey, seed, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	second := make(chan lease.Token, 1)
	go func() {
		_ = c.Do(context.Background(), key, s, func(ctx context.Context) error {
			l, _ := lease.FromContext(ctx)
			second <- l.Token()
			return nil
		})
	}()
	waitFor(5*time.Second, func() bool {
		return direct.ZCard(context.Background(), strings.TrimSuffix(lockKey(key), ":l")+":q").Val() > 0
	})
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	var tok2 lease.Token
	select {
	case tok2 = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("no second grant")
	}
	t.Logf("tokens %d, %d (counter seeded %s)", tok1, tok2, seed)
	if strconvU(uint64(tok2)) != "18014398509481986" {
		t.Errorf("the waiter's token %d, want 18014398509481986 (seed + 1)", tok2)
	}
}

func adv27Tok(t *testing.T, c *lease.Client, key string, s lease.Spec) lease.Token {
	t.Helper()
	var tok lease.Token
	if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
		tok, _ = lease.TokenFrom(ctx)
		return nil
	}); err != nil {
		t.Fatalf("Do(%q): %v", key, err)
	}
	return tok
}

// A lost acquire reply (go-redis re-sends the script, which finds its own
// identity) answers the same grant with the same exact token, for a
// microsecond token and for one past 2^53; never busy.
func TestAdversary27_ReplayAnswersSameToken(t *testing.T) {
	c, rec, p, direct, _ := proxied(t, nil)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}
	for _, seed := range []string{"", "9007199254740993", "9223372036854775000"} {
		key := "replay" + seed
		fenceKey := strings.TrimSuffix(lockKey(key), ":l") + ":f"
		adv27Tok(t, c, key, s) // warm: connection, scripts
		if seed != "" {
			direct.Set(context.Background(), fenceKey, seed, time.Hour)
		}
		p.Set(leasetest.CutNextReply)
		var tok lease.Token
		var inKey string
		if err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			tok, _ = lease.TokenFrom(ctx)
			inKey = direct.Get(ctx, lockKey(key)).Val()
			return nil
		}); err != nil {
			t.Fatalf("seed %q: %v", seed, err)
		}
		if p.Cut() == 0 {
			t.Fatalf("seed %q: no reply cut", seed)
		}
		counter := direct.Get(context.Background(), fenceKey).Val()
		t.Logf("seed %q: token %d, key %s, counter %s", seed, tok, inKey, counter)
		if !strings.HasSuffix(inKey, ":"+strconvU(uint64(tok))) || counter != strconvU(uint64(tok)) {
			t.Errorf("seed %q: token %d, key value %q, counter %s", seed, tok, inKey, counter)
		}
		if seed != "" && strconvU(uint64(tok)) <= seed && len(strconvU(uint64(tok))) == len(seed) {
			t.Errorf("seed %q: token %d not above it", seed, tok)
		}
		p.Set(leasetest.Pass)
	}
	if n := rec.Count(lease.EventBusy) + rec.Count(lease.EventAcquireUnknown); n != 0 {
		t.Errorf("%d busy/unknown events", n)
	}
}

// Busy answers by the script (fenced, or waiting) tell the holder's
// remaining time: about the PX set from outside, none for a key with no
// expiry; and a grant is never read as busy (token 0 of an unfenced
// waiting call included).
func TestAdversary27_BusyRemainingTime(t *testing.T) {
	c, _ := sharedClient(t)
	direct := shared.Client(t)
	for _, s := range []lease.Spec{
		{TTL: time.Second, Deadline: 2 * time.Second, Fence: true},
		{TTL: time.Second, Deadline: 2 * time.Second, Wait: 50 * time.Millisecond},
	} {
		key := uniqueKey(t)
		direct.Set(context.Background(), lockKey(key), "someone:7", 0)
		err := c.Do(context.Background(), key, s, func(context.Context) error { t.Error("entered a busy key"); return nil })
		mustIs(t, err, lease.ErrBusy)
		if strings.Contains(err.Error(), "more") {
			t.Errorf("no expiry: %v", err)
		}
		direct.PExpire(context.Background(), lockKey(key), 5*time.Second)
		err = c.Do(context.Background(), key, s, func(context.Context) error { t.Error("entered a busy key"); return nil })
		mustIs(t, err, lease.ErrBusy)
		i := strings.Index(err.Error(), " for ")
		if i < 0 {
			t.Fatalf("no remaining time: %v", err)
		}
		f := strings.Fields(err.Error()[i+5:])
		d, perr := time.ParseDuration(strings.TrimSuffix(f[0], ";"))
		if perr != nil || d <= 3*time.Second || d > 5*time.Second {
			t.Errorf("remaining %q (%v): want about 5s: %v", f[0], perr, err)
		}
		direct.Del(context.Background(), lockKey(key))
		if tok := adv27Tok(t, c, key, s); (tok != 0) != s.Fence {
			t.Errorf("token %d, fenced %v", tok, s.Fence)
		}
	}
}

// After SCRIPT FLUSH every path still runs (EVALSHA's NOSCRIPT, then
// EVAL): fenced, waiting, release, handover.
func TestAdversary27_ScriptFlush(t *testing.T) {
	c, rec := sharedClient(t)
	direct := shared.Client(t)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true, Wait: 5 * time.Second}
	key := uniqueKey(t)
	prev := adv27Tok(t, c, key, s)
	for i := range 3 {
		direct.ScriptFlush(context.Background())
		tok := adv27Tok(t, c, key, s)
		if tok <= prev {
			t.Errorf("round %d: token %d after %d", i, tok, prev)
		}
		prev = tok
	}
	if n := direct.Exists(context.Background(), lockKey(key)).Val(); n != 0 {
		t.Errorf("key left held")
	}
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		t.Errorf("%d unconfirmed releases", n)
	}
}

// The acquire + WAIT pipeline reads the one-integer answer: tokens
// increase, busy is busy.
func TestAdversary27_ReplicasPath(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	srv.WaitReplicas(t, rep)
	c, rec := newClient(t, srv.Client(t), lease.WithReplicas(1, 2*time.Second))
	key := "rep27"
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}
	a := adv27Tok(t, c, key, s)
	srv.Client(t).ScriptFlush(context.Background())
	b := adv27Tok(t, c, key, s)
	if a == 0 || b <= a {
		t.Errorf("tokens %d then %d", a, b)
	}
	srv.Client(t).Set(context.Background(), lockKey(key), "other:1", 3*time.Second)
	err := c.Do(context.Background(), key, s, func(context.Context) error { t.Error("entered"); return nil })
	mustIs(t, err, lease.ErrBusy)
	if !strings.Contains(err.Error(), "more") {
		t.Errorf("busy without remaining time: %v", err)
	}
	if n := rec.Count(lease.EventUnreplicated); n != 0 {
		t.Errorf("%d unreplicated", n)
	}
}

// A queue member longer than its 192-byte buffer (a long prefix makes a
// long inbox channel) is exact: the waiter is handed the lease by the
// holder's release, which tells it on that inbox.
func TestAdversary27_LongMemberHandover(t *testing.T) {
	prefix := strings.Repeat("prefix-ü-", 30) + ":"
	c, rec := newClient(t, shared.Client(t), lease.WithPrefix(prefix))
	key := uniqueKey(t)
	s := lease.Spec{Name: strings.Repeat("n", 300), TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true, Wait: 5 * time.Second}
	in, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- c.Do(context.Background(), key, s, func(context.Context) error { close(in); <-release; return nil })
	}()
	<-in
	second := make(chan error, 1)
	go func() {
		second <- c.Do(context.Background(), key, s, nop)
	}()
	qkey := prefix + "{" + key + "}:q"
	if !waitFor(5*time.Second, func() bool { return shared.Client(t).ZCard(context.Background(), qkey).Val() == 1 }) {
		t.Fatal("waiter not queued")
	}
	m := shared.Client(t).ZRange(context.Background(), qkey, 0, 0).Val()[0]
	if len(m) <= 192 || !strings.Contains(m, "|5000|1|") || !strings.HasSuffix(m, "|"+prefix+"{%probe-") && !strings.Contains(m, "|"+prefix+"{%probe-") {
		t.Errorf("member %q (%d bytes)", m, len(m))
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if rec.Count(lease.EventAcquired) != 2 {
		t.Errorf("events %v", adv9Kinds(rec))
	}
	if rec.Count(lease.EventReleaseUnconfirmed) != 0 {
		t.Errorf("events %v", adv9Kinds(rec))
	}
}

// The pool's one connection is taken (BLPOP for 4s) while fn runs: the
// release waits for a connection no longer than the call's budget (the
// release's context's Done, made lazily, bounds go-redis's pool wait), and
// its unconfirmed release is reported. Bound: the budget + 1s, well
// under the BLPOP's 4s.
func TestAdversary27_PoolExhaustedAtRelease(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		c, rec, _, direct, _ := proxied(t, func(o *redis.Options) { o.PoolSize = 1; o.MaxRetries = 3 })
		rdb := c.Redis().(*redis.Client)
		if err := c.Do(context.Background(), "warm", lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Fence: fence}, nop); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan struct{})
		key := uniqueKey(t)
		s := lease.Spec{TTL: 5 * time.Second, Deadline: time.Second, Fence: fence}
		start := time.Now()
		err := c.Do(context.Background(), key, s, func(context.Context) error {
			go func() {
				defer close(blocked)
				rdb.BLPop(context.Background(), 4*time.Second, "adv27-nothing")
			}()
			time.Sleep(100 * time.Millisecond)
			return nil
		})
		took := time.Since(start)
		t.Logf("fence %v: Do = %v after %v; events %v", fence, err, took.Round(time.Millisecond), adv9Kinds(rec))
		if took > s.Deadline+time.Second {
			t.Errorf("fence %v: Do took %v, budget %v", fence, took, s.Deadline)
		}
		if rec.Count(lease.EventReleaseUnconfirmed) != 1 {
			t.Errorf("fence %v: want one unconfirmed release: %v", fence, adv9Kinds(rec))
		}
		<-blocked
		if !waitFor(8*time.Second, func() bool { return direct.Exists(context.Background(), lockKey(key)).Val() == 0 }) {
			t.Error("key still held")
		}
	}
}
