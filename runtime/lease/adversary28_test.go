package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv28Replay runs the next acquire script twice (as go-redis does after a
// lost reply), calling between the runs, and keeps the first run's answer.
type adv28Replay struct {
	armed   atomic.Bool
	first   atomic.Int64
	between func()
}

func (h *adv28Replay) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv28Replay) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" || !h.armed.Load() {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.armed.Store(false)
		if ic, ok := cmd.(*redis.IntCmd); ok {
			h.first.Store(ic.Val())
		}
		h.between()
		return next(ctx, cmd)
	}
}
func (h *adv28Replay) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A server at maxmemory (noeviction) refuses writes, not reads. The
// acquire script used to read the key first, so a contender was told
// "busy" (with the holder's time left) and a replay of a grant (a lost
// reply re-sent) got that grant back, with its token; trying SET NX first
// must not turn either into an OOM error: ErrRefused ("definitely not
// executed", no release) for a grant that was made and is held.
func TestAdversary28_OOMStillAnswersBusyAndReplays(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	full := func(on bool) {
		v := "0"
		if on {
			v = "1"
		}
		if err := admin.ConfigSet(ctx, "maxmemory", v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	shapes := []lease.Spec{
		{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true},
		{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true, Wait: time.Second},
		{TTL: 10 * time.Second, Deadline: 20 * time.Second, Wait: time.Second},
	}

	// Busy: a fenced contender that does not wait (a waiter must queue,
	// a write, refused before too).
	hc, _ := newClient(t, srv.Client(t))
	bc, _ := newClient(t, srv.Client(t))
	warm(t, bc, "warm")
	release := make(chan struct{})
	hdone := hold(t, hc, "busy", shapes[0], release)
	full(true)
	err := bc.Do(ctx, "busy", lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Fence: true}, func(context.Context) error {
		t.Error("entered a held key")
		return nil
	})
	full(false)
	t.Logf("fenced contender at maxmemory: %v", err)
	if !errors.Is(err, lease.ErrBusy) {
		t.Errorf("fenced contender at maxmemory: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}

	// Replay of a grant: the first run granted, the server filled up, the
	// re-sent script must answer the same grant.
	rdb := srv.Client(t)
	h := &adv28Replay{between: func() { full(true) }}
	rdb.AddHook(h)
	c, _ := newClient(t, rdb)
	warm(t, c, "warm")
	for i, s := range shapes {
		key := uniqueKey(t)
		h.armed.Store(true)
		var tok lease.Token
		err := c.Do(ctx, key, s, func(ctx context.Context) error {
			full(false) // the release writes
			tok, _ = lease.TokenFrom(ctx)
			return nil
		})
		full(false)
		t.Logf("shape %d: first run answered %d; Do = %v, token %d", i, h.first.Load(), err, tok)
		if err != nil {
			t.Errorf("shape %d (fence %v, wait %v): replay of a grant at maxmemory: %v", i, s.Fence, s.Wait, err)
		} else if int64(tok) != h.first.Load() {
			t.Errorf("shape %d: token %d, the first run's %d", i, tok, h.first.Load())
		}
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Errorf("shape %d: key still held after Do", i)
		}
	}
}
