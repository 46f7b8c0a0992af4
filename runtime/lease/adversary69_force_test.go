package lease_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv69ArmHook arms a fault on the proxy just before the first command
// whose name is in names is processed: the reply of that command (written,
// executed) is cut, and every later dial is refused (the proxy's listener
// is closed), so go-redis's retries end with a dial error.
type adv69ArmHook struct {
	names []string
	on    atomic.Bool // armed only once switched on (after a warm-up)
	armed atomic.Bool
	seen  atomic.Int32
	arm   func()
}

func (h *adv69ArmHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv69ArmHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *adv69ArmHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.seen.Add(1)
		for _, n := range h.names {
			if h.on.Load() && strings.EqualFold(cmd.Name(), n) && h.armed.CompareAndSwap(false, true) {
				h.arm()
				break
			}
		}
		return next(ctx, cmd)
	}
}

// adv69ProxiedClient is a lease Client through a proxy of its own, with
// one warm connection (PoolSize 1, MaxRetries 3, as a service sets them).
func adv69ProxiedClient(t *testing.T, srv *leasetest.Server, hook *adv69ArmHook) (*leasetest.Proxy, *lease.Client, *leasetest.Recorder) {
	t.Helper()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: 3,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
		DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	if hook != nil {
		// ContextTimeoutEnabled: the lease Client uses rdb itself, hooks
		// included (see New).
		rdb.AddHook(hook)
	}
	c, rec := newClient(t, rdb)
	ctx := context.Background()
	// Warm up: the command table and the scripts are loaded through it.
	if err := c.Do(ctx, uniqueKey(t), lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	if _, err := c.Inspect(ctx, uniqueKey(t)); err != nil {
		t.Fatalf("warm-up inspect: %v", err)
	}
	return p, c, rec
}

// A ForceRelease that ends a hold-min (endhold.lua, sent by Script.Run)
// whose reply is lost, and whose go-redis retries cannot connect, was
// carried out: the hold is gone from the server. ForceRelease's contract
// says its error then wraps ErrUnknown ("sent, no reply: the release may
// have happened"); ErrRefused means not carried out.
func TestAdversary69_ForceEndHoldReplyCutThenDialRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	holder, _ := newClient(t, srv.Client(t))

	hold := func(key string) lease.Info { return adv69Hold(t, holder, key) }
	// The server's script cache gets endhold.lua (an EVALSHA answered
	// NOSCRIPT was not carried out, and is rightly refused).
	if res, err := holder.ForceRelease(ctx, "warm", hold("warm").Holder); err != nil || res != lease.ForceHoldEnded {
		t.Fatalf("warm-up force: %v, %v", res, err)
	}
	key := uniqueKey(t)
	info := hold(key)

	var p *leasetest.Proxy
	hook := &adv69ArmHook{names: []string{"evalsha", "eval"}}
	hook.arm = func() { p.Set(leasetest.CutNextReply); _ = p.Refuse() }
	p, op, _ := adv69ProxiedClient(t, srv, hook)
	hook.on.Store(true)

	res, err := op.ForceRelease(ctx, key, info.Holder)
	t.Logf("ForceRelease: %v, %v (hook saw %d)", res, err, hook.seen.Load())
	exists := admin.Exists(ctx, lockKey(key)).Val()
	if p.Cut() != 1 {
		t.Fatalf("the test did not cut a reply (cut %d)", p.Cut())
	}
	if exists != 0 {
		t.Fatalf("the hold is still on the server: the test did not cut an executed end of hold")
	}
	var op2 *net.OpError
	if !errors.As(err, &op2) || op2.Op != "dial" {
		t.Logf("go-redis's last error is not a dial error: %v", err)
	}
	if errors.Is(err, lease.ErrRefused) || !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("ForceRelease ended the hold on the server (key gone), but reported %v (res %v): want ErrUnknown, never ErrRefused", err, res)
	}
}

// The same fault on a ForceRelease of a running lease (release.lua, write
// counted): classed ErrUnknown. Control for the test above.
func TestAdversary69_ForceReleaseReplyCutThenDialRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	holder, _ := newClient(t, srv.Client(t))

	key := uniqueKey(t)
	in := make(chan struct{})
	out := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- holder.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 8 * time.Second},
			func(fctx context.Context) error {
				close(in)
				select {
				case <-fctx.Done():
				case <-out:
				}
				return nil
			})
	}()
	<-in
	info, err := holder.Inspect(ctx, key)
	if err != nil || info.Holder == "" {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	var p *leasetest.Proxy
	hook := &adv69ArmHook{names: []string{"evalsha", "eval"}}
	hook.arm = func() { p.Set(leasetest.CutNextReply); _ = p.Refuse() }
	p, op, _ := adv69ProxiedClient(t, srv, hook)
	hook.on.Store(true)
	res, err := op.ForceRelease(ctx, key, info.Holder)
	t.Logf("ForceRelease: %v, %v", res, err)
	close(out)
	derr := <-done
	if p.Cut() != 1 || admin.Exists(ctx, lockKey(key)).Val() != 0 {
		t.Fatalf("the test did not cut an executed release (cut %d)", p.Cut())
	}
	if errors.Is(err, lease.ErrRefused) || !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("ForceRelease released the key, but reported %v: want ErrUnknown", err)
	}
	if !errors.Is(derr, lease.ErrLost) {
		t.Fatalf("holder's Do: %v, want ErrLost", derr)
	}
}

// adv69Hold makes holder hold key with a hold-min (4s, of a 5s TTL) after
// its call returned, and returns the key's Info (its Holder is the
// identity ForceRelease ends the hold of).
func adv69Hold(t *testing.T, holder *lease.Client, key string) lease.Info {
	t.Helper()
	ctx := context.Background()
	if err := holder.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, HoldMin: 4 * time.Second},
		func(context.Context) error { return nil }); err != nil {
		t.Fatalf("holder: %v", err)
	}
	info, err := holder.Inspect(ctx, key)
	if err != nil || !info.Hold || info.Holder == "" {
		t.Fatalf("inspect: %+v, %v: want a hold", info, err)
	}
	return info
}
