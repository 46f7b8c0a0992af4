package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv62Drop fails the holder's commands without sending them while drop
// is set: its network is down, its renewals do not reach the server.
type adv62Drop struct{ drop *atomic.Bool }

var adv62Down = errors.New("adv62: network down (not sent)")

func (h adv62Drop) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv62Drop) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.drop.Load() {
			cmd.SetErr(adv62Down)
			return adv62Down
		}
		return next(ctx, cmd)
	}
}
func (h adv62Drop) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.drop.Load() {
			for _, c := range cmds {
				c.SetErr(adv62Down)
			}
			return adv62Down
		}
		return next(ctx, cmds)
	}
}

// adv62Operator: after ForceRelease's read of the key the holder's
// network comes back and its renewal lands before the release is sent;
// after the release the operator's connection dies (its PUBLISH fails).
type adv62Operator struct {
	p     *leasetest.Proxy
	t     *testing.T
	admin *redis.Client
	lock  string
	drop  *atomic.Bool
	read  atomic.Int64 // PTTL the read saw, ms
}

func (h *adv62Operator) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv62Operator) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// landRenewal, after ForceRelease's read of the key: the holder's network
// comes back, and its renewal lands before the release is sent.
func (h *adv62Operator) landRenewal() {
	h.read.Store(int64(h.admin.PTTL(context.Background(), h.lock).Val() / time.Millisecond))
	h.drop.Store(false)
	end := time.Now().Add(4 * time.Second)
	for time.Now().Before(end) {
		if h.admin.PTTL(context.Background(), h.lock).Val() > 6*time.Second {
			h.t.Logf("the holder's renewal landed after the read (the key had %dms left)", h.read.Load())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Errorf("the holder's renewal did not land")
}

func (h *adv62Operator) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		args := cmd.Args()
		if name == "get" && len(args) == 2 && fmt.Sprint(args[1]) == h.lock {
			h.landRenewal()
		}
		if (name == "evalsha" || name == "eval") && err == nil && len(args) > 0 && fmt.Sprint(args[len(args)-1]) == "x" {
			_ = h.p.Refuse()
			h.p.CloseConns()
		}
		return err
	}
}

// ForceRelease's doc: the holder "is told as an ordinary loss: its next
// renewal (within a third of its TTL) or its release finds the lease gone,
// its function's context is cancelled with a cause wrapping ErrLost that
// says it was released from outside". The tombstone that says so lasted
// the remaining TTL ForceRelease read before its release (and 1s): a
// renewal that landed between the read and the release gave the holder a
// full TTL again, and its next renewal came a third of it later, after the
// tombstone was gone (adversary round 62). The release script now reads
// the remaining TTL itself.
func TestAdversary62_ForceReleaseRenewedAfterTheRead(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	var drop atomic.Bool
	hrdb := srv.Client(t)
	hrdb.AddHook(adv62Drop{&drop})
	holderC, _ := newClient(t, hrdb)

	key := uniqueKey(t)
	h := holdUntil(t, holderC, key, lease.Spec{TTL: 9 * time.Second, Deadline: time.Minute})
	info := inspect(t, holderC, key)
	// The holder's network fails: its renewals (due at 3s, then retried
	// every 1s) do not get through, and the lease runs down.
	drop.Store(true)
	if !waitFor(9*time.Second, func() bool { return admin.PTTL(context.Background(), lockKey(key)).Val() < 1300*time.Millisecond }) {
		t.Fatal("lease did not run down")
	}

	p := leasetest.StartProxy(t, srv.Addr())
	opRdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { opRdb.Close() })
	op := &adv62Operator{p: p, t: t, admin: admin, lock: lockKey(key), drop: &drop}
	opRdb.AddHook(op)
	opC, _ := newClient(t, opRdb)

	res, err := opC.ForceRelease(context.Background(), key, info.Holder)
	released := time.Now()
	tomb := "lease:{" + key + "}:r:" + info.Holder
	t.Logf("ForceRelease = %v, %v; tombstone %q pttl %v", res, err, admin.Get(context.Background(), tomb).Val(), admin.PTTL(context.Background(), tomb).Val())
	if err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v; want released", res, err)
	}
	select {
	case cause := <-h.cause:
		t.Logf("holder's cause after %v: %v", time.Since(released), cause)
		if !strings.Contains(cause.Error(), "released from outside") {
			t.Errorf("ForceRelease returned ForceReleased, but the holder was told %q, not that it was released from outside", cause)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the holder never learned of the loss")
	}
}
