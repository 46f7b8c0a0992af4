package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv69bOperator is a lease Client as user "op" (all rights) through a
// proxy of its own, with hook on it.
func adv69bOperator(t *testing.T, srv *leasetest.Server, admin *redis.Client, hook *adv69bHook) (*leasetest.Proxy, *lease.Client, *leasetest.Recorder) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "op", "reset", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("acl: %v", err)
	}
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), Username: "op", Password: "pw", PoolSize: 1, MaxRetries: 3,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
		DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	c, rec := newClient(t, rdb)
	return p, c, rec
}

// A re-send answered with an error reply says nothing of the first send.
// ForceRelease ends a hold-min (endhold.lua by EVALSHA): carried out, its
// reply cut; go-redis re-sends it on a new connection, where the
// operator's user has just lost the right to run scripts (ACL SETUSER
// before that dial), and it is answered NOPERM. The hold was ended on the
// server; ForceRelease must say ErrUnknown ("the release may have
// happened"), never ErrRefused ("definitely not carried out").
func TestAdversary69b_ForceEndHoldCutThenErrorReply(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	holder, _ := newClient(t, srv.Client(t))
	hold := func(key string) lease.Info { return adv69Hold(t, holder, key) }

	var p *leasetest.Proxy
	var stage atomic.Int32
	hook := &adv69bHook{}
	hook.proc = func(cmd redis.Cmder) {
		if strings.EqualFold(cmd.Name(), "evalsha") && stage.CompareAndSwap(0, 1) {
			p.Set(leasetest.CutNextReply)
		}
	}
	hook.dial = func(string) {
		if stage.CompareAndSwap(1, 2) {
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "op", "-evalsha", "-eval").Err(); err != nil {
				t.Errorf("acl: %v", err)
			}
		}
	}
	p, op, _ := adv69bOperator(t, srv, admin, hook)
	// endhold.lua into the script cache, through the operator.
	if res, err := op.ForceRelease(ctx, "warm", hold("warm").Holder); err != nil || res != lease.ForceHoldEnded {
		t.Fatalf("warm-up force: %v, %v", res, err)
	}
	key := uniqueKey(t)
	info := hold(key)
	hook.on.Store(true)
	res, err := op.ForceRelease(ctx, key, info.Holder)
	exists := admin.Exists(ctx, lockKey(key)).Val()
	t.Logf("ForceRelease: %v, %v (stage %d, cut %d, key exists %d)", res, err, stage.Load(), p.Cut(), exists)
	if p.Cut() != 1 || stage.Load() != 2 {
		t.Fatalf("the test did not play its scenario")
	}
	if exists != 0 {
		t.Fatalf("the hold is still on the server: the cut end of hold was not carried out")
	}
	if errors.Is(err, lease.ErrRefused) || !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("ForceRelease ended the hold on the server (key gone), but reported %v (res %v): want ErrUnknown, never ErrRefused", err, res)
	}
}

// The same on a renewal (renew_many.lua by EVALSHA): carried out, reply
// cut, re-sent and answered NOPERM. The key was extended; the renewal's
// event must not say ErrRefused.
func TestAdversary69b_RenewCutThenErrorReply(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()

	var p *leasetest.Proxy
	var stage atomic.Int32
	hook := &adv69bHook{}
	hook.proc = func(cmd redis.Cmder) {
		if strings.EqualFold(cmd.Name(), "evalsha") && stage.CompareAndSwap(0, 1) {
			p.Set(leasetest.CutNextReply)
		}
	}
	hook.dial = func(string) {
		if stage.CompareAndSwap(1, 2) {
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "op", "-evalsha", "-eval").Err(); err != nil {
				t.Errorf("acl: %v", err)
			}
		}
	}
	p, c, rec := adv69bOperator(t, srv, admin, hook)
	if err := c.Do(ctx, uniqueKey(t), lease.Spec{TTL: 600 * time.Millisecond, Deadline: 2 * time.Second}, func(context.Context) error {
		time.Sleep(450 * time.Millisecond)
		return nil
	}); err != nil || rec.Count(lease.EventRenewed) == 0 {
		t.Fatalf("warm-up renewal: %v, %v", err, kinds(rec.Events()))
	}
	key := uniqueKey(t)
	renewErr, pttl, err := adv69bFirstRenewFailure(t, c, rec, admin, hook, key)
	t.Logf("Do: %v; renewal event: %v; stage %d, cut %d", err, renewErr, stage.Load(), p.Cut())
	if p.Cut() != 1 || stage.Load() != 2 || renewErr == nil {
		t.Fatalf("the test did not play its scenario")
	}
	adv69RanButUnknown(t, pttl, 2*time.Second, renewErr)
}
