package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// README (Recipes), "Gaps in a recipe that show late, not at the first
// call": each permission below is the recipe's; without it a service's
// first calls (a free key, with and without Wait) run clean (no refusal,
// no event, nothing in ACL LOG), and the gap shows once a second caller
// waits: as a waiter refused naming the command (+time for an unfenced
// service, +pttl, +zadd), or as a release refused with a waiter queued
// (+hget, +hdel): release_unconfirmed in the releasing process, the key
// held until its TTL, the waiter busy at the end of its wait. Round 60
// found the README naming only +get and +hset/+pexpire; this pins the
// list it gives now, so that a change to the scripts that moves a command
// onto the first calls' path (or off it) is seen here.
func TestAdversary60_LateRecipeGaps(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for i, perm := range []string{"+time", "+pttl", "+zadd", "+hget", "+hdel"} {
		t.Run(perm, func(t *testing.T) {
			admin.Do(ctx, "ACL", "LOG", "RESET")
			rules := without(leastPrivilege, perm)
			user := fmt.Sprintf("late60u%d", i)
			c, rec := newClient(t, aclClient(t, srv, user, rules...), lease.WithRecheck(200*time.Millisecond))
			c2, _ := newClient(t, aclClient(t, srv, user, rules...), lease.WithRecheck(200*time.Millisecond))
			key := uniqueKey(t)
			// The service's first calls: a free key, without and with Wait.
			first := []error{
				c.Do(ctx, key, spec(2*time.Second, 3*time.Second), func(context.Context) error { return nil }),
				c.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 3 * time.Second, Wait: time.Second, Fence: perm != "+time"}, func(context.Context) error { return nil }),
			}
			bad := rec.Count(lease.EventRefused) + rec.Count(lease.EventReleaseUnconfirmed) + rec.Count(lease.EventRenewFailed) + rec.Count(lease.EventSubscriptionFailed)
			if log := aclLog60(t, admin); first[0] != nil || first[1] != nil || bad != 0 || len(log) != 0 {
				t.Errorf("first calls: %v; failure events %d; ACL LOG %v: the gap shows at once, not late as the README says", first, bad, log)
			}

			// Contention: c holds (TTL 2s) for 400ms, c2 waits up to 1.5s.
			rel := make(chan struct{})
			held := hold(t, c, key, lease.Spec{TTL: 2 * time.Second, Deadline: 10 * time.Second}, rel)
			time.AfterFunc(400*time.Millisecond, func() { close(rel) })
			werr := c2.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 1500 * time.Millisecond}, func(context.Context) error { return nil })
			herr := <-held
			t.Logf("contended: waiter %v; holder %v, release_unconfirmed %d", werr, herr, rec.Count(lease.EventReleaseUnconfirmed))
			switch perm {
			case "+hget", "+hdel":
				if !errors.Is(werr, lease.ErrBusy) || herr != nil || rec.Count(lease.EventReleaseUnconfirmed) != 1 {
					t.Errorf("without %s: waiter %v, holder %v, %d releases unconfirmed; want busy, nil, 1", perm, werr, herr, rec.Count(lease.EventReleaseUnconfirmed))
				}
			default:
				if !errors.Is(werr, lease.ErrRefused) || herr != nil {
					t.Errorf("without %s: waiter %v, holder %v; want the waiter refused", perm, werr, herr)
				}
			}
		})
	}
}
