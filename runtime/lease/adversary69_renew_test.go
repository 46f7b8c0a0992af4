package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A renewal (renew_many.lua) carried out on the server (the
// key's TTL is back near a full TTL), its reply lost, and go-redis's
// retries refused at dial: the renewal's EventRenewFailed (and the loss
// cause that quotes it) must not class it ErrRefused ("definitely not
// executed").
func TestAdversary69_RenewReplyCutThenDialRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	var p *leasetest.Proxy
	hook := &adv69ArmHook{names: []string{"evalsha"}}
	hook.arm = func() { p.Set(leasetest.CutNextReply); _ = p.Refuse() }
	p, c, rec := adv69ProxiedClient(t, srv, hook)
	// The server's script cache gets renew_many.lua (a renewal answered
	// NOSCRIPT was not carried out).
	if err := c.Do(ctx, uniqueKey(t), lease.Spec{TTL: 300 * time.Millisecond, Deadline: time.Second}, func(context.Context) error {
		time.Sleep(200 * time.Millisecond)
		return nil
	}); err != nil || rec.Count(lease.EventRenewed) == 0 {
		t.Fatalf("warm-up renewal: %v, %v", err, kinds(rec.Events()))
	}
	key := uniqueKey(t)
	const ttl = 3 * time.Second
	var pttl time.Duration
	var renewErr error
	err := c.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: 6 * time.Second, MinValidity: 100 * time.Millisecond}, func(fctx context.Context) error {
		hook.on.Store(true) // the next EVALSHA is the first renewal (the acquire was a SET NX)
		entered := time.Now()
		for renewErr == nil && time.Since(entered) < ttl {
			for _, e := range rec.Events() {
				if e.Kind == lease.EventRenewFailed && e.Key == key {
					renewErr = e.Err
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		pttl = admin.PTTL(ctx, lockKey(key)).Val()
		t.Logf("first renewal failed %v after entry; key's PTTL then %v", time.Since(entered), pttl)
		<-fctx.Done()
		return nil
	})
	t.Logf("Do: %v; renewal event: %v", err, renewErr)
	if p.Cut() != 1 || renewErr == nil {
		t.Fatalf("the test did not cut a renewal (cut %d, renewal error %v)", p.Cut(), renewErr)
	}
	// Not renewed, the key would have at most ttl - ttl/3 left by now.
	adv69RanButUnknown(t, pttl, ttl*2/3, renewErr)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Do: %v, want ErrLost (no renewal was confirmed)", err)
	}
}

// adv69RanButUnknown fails the test unless the cut renewal ran on the
// server (the key's PTTL after it, pttl, is above floor, what it would
// have left without it) and its event, renewErr, says unknown, never
// refused.
func adv69RanButUnknown(t *testing.T, pttl, floor time.Duration, renewErr error) {
	t.Helper()
	if pttl <= floor {
		t.Fatalf("the key's PTTL %v: the cut renewal was not carried out", pttl)
	}
	if errors.Is(renewErr, lease.ErrRefused) || !errors.Is(renewErr, lease.ErrUnknown) {
		t.Fatalf("the renewal was carried out (PTTL %v after it), but its event says %v: want ErrUnknown, never ErrRefused", pttl, renewErr)
	}
}
