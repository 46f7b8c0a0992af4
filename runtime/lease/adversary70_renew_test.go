package lease_test

// Adversary round 70 on the renewal scripts' GET errors (2554c93): a
// refusal of GET by the ACL answered the call as a generic "can't run
// this command", naming no command (pcall's error has no script line);
// it names GET now. Keys of another type in a batch are still lost as
// such, the others renewed.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

type adv70Holder struct {
	key   string
	cause error
	done  chan error
	ended chan struct{}
}

func adv70HoldMany(t *testing.T, c *lease.Client, n int, ttl time.Duration, release <-chan struct{}) []*adv70Holder {
	var hs []*adv70Holder
	var in sync.WaitGroup
	for i := range n {
		h := &adv70Holder{key: fmt.Sprintf("%s-%d", t.Name(), i), done: make(chan error, 1), ended: make(chan struct{})}
		hs = append(hs, h)
		in.Add(1)
		go func() {
			h.done <- c.Do(context.Background(), h.key, lease.Spec{TTL: ttl, Deadline: 20 * time.Second}, func(ctx context.Context) error {
				in.Done()
				select {
				case <-release:
				case <-ctx.Done():
					h.cause = context.Cause(ctx)
					close(h.ended)
				}
				return nil
			})
		}()
	}
	in.Wait()
	return hs
}

// Many leases renewed in batches on one server; a few lock keys are
// overwritten with a hash: those are lost as "another type", the others
// keep being renewed.
func TestAdversary70_BatchSomeWrongType(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, srv.Client(t))
	release := make(chan struct{})
	hs := adv70HoldMany(t, c, 24, 900*time.Millisecond, release)
	ctx := context.Background()
	bad := map[int]bool{}
	for i := 0; i < len(hs); i += 5 {
		bad[i] = true
		k := lockKey(hs[i].key)
		admin.Del(ctx, k)
		admin.HSet(ctx, k, "x", "y")
		admin.PExpire(ctx, k, 10*time.Second)
	}
	time.Sleep(2500 * time.Millisecond)
	for i, h := range hs {
		select {
		case <-h.ended:
			if !bad[i] {
				t.Errorf("lease %d (untouched) ended: %v", i, h.cause)
			} else if !errors.Is(h.cause, lease.ErrLost) || !strings.Contains(h.cause.Error(), "another type") {
				t.Errorf("lease %d (a hash now) ended with %v, want ErrLost 'another type'", i, h.cause)
			}
		default:
			if bad[i] {
				t.Errorf("lease %d, overwritten with a hash, still held 2.5s later", i)
			}
		}
	}
	for _, e := range rec.Events() {
		if e.Kind == lease.EventRenewFailed && !errors.Is(e.Err, lease.ErrLost) {
			t.Errorf("renew_failed not a loss: %q %v", e.Key, e.Err)
		}
	}
	close(release)
}

// +get taken away while leases are held, then given back before their
// validity runs out: the renewals are refused (renew_failed, ErrRefused,
// naming get; no "another type"), and the leases survive the gap.
// Fails: renew_many.lua returns GET's redis.pcall error as is, which on
// Redis 7.0 reads "ERR The user executing the script can't run this
// command or subcommand": neither the command nor the script's line (that
// Check's scriptRefusal needs) is named.
func TestAdversary70_BatchGetRefusedThenRestored(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, aclClient(t, srv, "leases", leastPrivilege...))
	release := make(chan struct{})
	hs := adv70HoldMany(t, c, 12, 1500*time.Millisecond, release)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "leases", "-get").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if err := admin.Do(ctx, "ACL", "SETUSER", "leases", "+get").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	refused := 0
	for _, e := range rec.Events() {
		if e.Kind != lease.EventRenewFailed {
			continue
		}
		if strings.Contains(e.Err.Error(), "another type") {
			t.Errorf("ACL refusal reported as another type: %v", e.Err)
		}
		if !errors.Is(e.Err, lease.ErrRefused) {
			t.Errorf("renew_failed %q not ErrRefused: %v", e.Key, e.Err)
		}
		m := strings.ToLower(e.Err.Error())
		if strings.Contains(m, "'get'") || strings.Contains(m, "get") && strings.Contains(m, "calls") {
			refused++
		} else if refused == 0 {
			t.Errorf("renew_failed %q does not name GET: %v", e.Key, e.Err)
			refused = -1000
		}
	}
	if refused == 0 && !t.Failed() {
		t.Errorf("no renew_failed naming get while +get was missing")
	}
	for i, h := range hs {
		select {
		case <-h.ended:
			t.Errorf("lease %d ended although +get came back within its validity: %v", i, h.cause)
		default:
		}
	}
	close(release)
}
