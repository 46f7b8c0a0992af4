package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

type adv9CtxKey struct{}

// adv9Hook records, for every command, what a tracing hook would see at
// the time (cmd.String, the args printed, a value of the caller's ctx),
// and keeps the command itself to print it again later (as a hook that
// formats lazily or exports asynchronously does).
type adv9Hook struct {
	mu   sync.Mutex
	seen []adv9Seen
}

type adv9Seen struct {
	cmd   redis.Cmder
	str   string // cmd.String() in the hook, before the command ran
	args  string // fmt.Sprint(cmd.Args()) in the hook
	value any    // ctx.Value(adv9CtxKey{})
	name  string
}

func (h *adv9Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *adv9Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.seen = append(h.seen, adv9Seen{cmd: cmd, str: cmd.String(), args: fmt.Sprint(cmd.Args()), value: ctx.Value(adv9CtxKey{}), name: cmd.Name()})
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *adv9Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, cmd := range cmds {
			h.seen = append(h.seen, adv9Seen{cmd: cmd, str: cmd.String(), args: fmt.Sprint(cmd.Args()), value: ctx.Value(adv9CtxKey{}), name: cmd.Name()})
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *adv9Hook) take() []adv9Seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen
	h.seen = nil
	return s
}

// A hook sees the real key strings and numbers (no pointer addresses), and
// the caller's ctx values, in the acquire and in the release, for every
// path of the hot path: SET NX, the acquire script, a waiter's queue
// member, a kept lease's release.
func TestAdversary9_HookSeesRealArgsAndCallerValues(t *testing.T) {
	rdb := shared.Client(t)
	h := &adv9Hook{}
	rdb.AddHook(h)
	c, _ := newClient(t, rdb)
	ctx := context.WithValue(context.Background(), adv9CtxKey{}, "trace-42")

	for _, tc := range []struct {
		name string
		s    lease.Spec
	}{
		{"setnx", spec(2*time.Second, 5*time.Second)},
		{"fenced", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}},
		{"hold", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, HoldMin: 100 * time.Millisecond}},
	} {
		key := uniqueKey(t)
		h.take()
		var fnVal any
		if err := c.Do(ctx, key, tc.s, func(fctx context.Context) error {
			fnVal = fctx.Value(adv9CtxKey{})
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if fnVal != "trace-42" {
			t.Errorf("%s: fn's ctx value = %v", tc.name, fnVal)
		}
		seen := h.take()
		if len(seen) < 2 {
			t.Fatalf("%s: hook saw %d commands", tc.name, len(seen))
		}
		for _, s := range seen {
			if s.name == "hello" || s.name == "client" {
				continue // connection set-up
			}
			t.Logf("%s: %s | value=%v", tc.name, trunc(s.str), s.value)
			if strings.Contains(s.str, "0x") || strings.Contains(s.args, "0x") {
				t.Errorf("%s: hook saw a pointer: %s / %s", tc.name, s.str, s.args)
			}
			if !strings.Contains(s.str, key) && s.name != "publish" {
				t.Errorf("%s: hook's command does not name key %q: %s", tc.name, key, s.str)
			}
			if s.value != "trace-42" {
				t.Errorf("%s: hook of %s did not see the caller's ctx value (got %v)", tc.name, s.name, s.value)
			}
		}
	}

	// A waiter: its queue member and life argument.
	for _, s := range adv9Waiter(t, ctx, h, c, c, 300*time.Millisecond) {
		if s.value == nil { // the holder's commands (background ctx)
			continue
		}
		t.Logf("waiter: %s", trunc(s.str))
		if strings.Contains(s.str, "0x") {
			t.Errorf("waiter: hook saw a pointer: %s", s.str)
		}
	}
}

// adv9Waiter runs a call on c that waits for a new key, which holder holds
// for holdFor, and returns the commands h saw meanwhile.
func adv9Waiter(t *testing.T, ctx context.Context, h *adv9Hook, c, holder *lease.Client, holdFor time.Duration) []adv9Seen {
	t.Helper()
	key := uniqueKey(t)
	release := make(chan struct{})
	done := hold(t, holder, key, spec(2*time.Second, 5*time.Second), release)
	time.AfterFunc(holdFor, func() { close(release) })
	h.take()
	s := spec(2*time.Second, 5*time.Second)
	s.Wait = 3 * time.Second
	if err := c.Do(ctx, key, s, nop); err != nil {
		t.Fatal(err)
	}
	<-done
	return h.take()
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// A hook that keeps a command (to format it later, or to export it from
// another goroutine) sees what the command was: its arguments are not
// rewritten by the call's later commands. Here: the first EVALSHA, after
// NOSCRIPT, is followed by an EVAL of the same argument array; and a
// waiter's repeated acquires rewrite the same array.
func TestAdversary9_KeptCommandArgsAreNotRewrittenLater(t *testing.T) {
	rdb := shared.Client(t)
	h := &adv9Hook{}
	rdb.AddHook(h)
	c, _ := newClient(t, rdb)
	ctx := context.Background()
	key := uniqueKey(t)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	h.take()
	if err := c.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Fence: true}, nop); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, s := range h.take() {
		now := fmt.Sprint(s.cmd.Args())
		if now != s.args {
			changed++
			t.Errorf("command %q changed after it ran:\n  in the hook: %s\n  later:       %s", s.name, trunc(s.args), trunc(now))
		}
	}

	// A waiter's acquires: the holder holds for 600ms; the waiter acquires
	// (busy), then again on the release.
	holder, _ := sharedClient(t)
	for _, s := range adv9Waiter(t, ctx, h, c, holder, 600*time.Millisecond) {
		if now := fmt.Sprint(s.cmd.Args()); now != s.args {
			changed++
			t.Errorf("waiter: command %q changed after it ran:\n  in the hook: %s\n  later:       %s", s.name, trunc(s.args), trunc(now))
		}
	}
	t.Logf("%d commands changed after they ran", changed)
}

// An asynchronous exporter: the hook hands each command to a goroutine
// that formats it (run with -race).
func TestAdversary9_AsyncHookFormatsCommandsRace(t *testing.T) {
	rdb := shared.Client(t)
	ch := make(chan redis.Cmder, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for cmd := range ch {
			time.Sleep(time.Millisecond)
			_ = fmt.Sprint(cmd.Args())
		}
	}()
	rdb.AddHook(asyncHook{ch})
	c, _ := newClient(t, rdb)
	key := uniqueKey(t)
	var cw sync.WaitGroup
	for i := range 4 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			s := lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second, Fence: i%2 == 0}
			for range 5 {
				_ = c.Do(context.Background(), key, s, func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil })
			}
		}()
	}
	cw.Wait()
	close(ch)
	wg.Wait()
}

type asyncHook struct{ ch chan redis.Cmder }

func (asyncHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h asyncHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.ch <- cmd
		return err
	}
}
func (asyncHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
