package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A retried answer after every try (TRYAGAIN, ...) stays refused. A
// fenced acquire during a slot migration that outlasts the call's budget
// is answered TRYAGAIN by every try (the source answers ASK, the target
// TRYAGAIN: only the fence counter has moved, the other keys do not
// exist): nothing ran. go-redis itself retries TRYAGAIN (MaxRetries 3), so
// each try's TTL argument is written more than once; round 69c found
// aec3f0b's redirect rule then ending the call ErrUnknown with a release
// sent (fixed in 1a099e0: the rule is gone). Control: the same acquire
// while the migration ends inside the budget is granted.
func TestAdversary69c_AcquireDuringLongMigration(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	for _, retries := range []int{-1, 3} {
		t.Run("maxretries="+map[int]string{-1: "none", 3: "3"}[retries], func(t *testing.T) {
			ctx := context.Background()
			c, rec := newClient(t, cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRetries = retries }))
			key := uniqueKey(t)
			s := lease.Spec{TTL: 5 * time.Second, Deadline: 800 * time.Millisecond, Fence: true}
			if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			m := adv33Migration(t, cl, key)
			n0 := len(rec.Events())
			ran := false
			err := c.Do(ctx, key, s, func(context.Context) error { ran = true; return nil })
			var evs []string
			for _, e := range rec.Events()[n0:] {
				evs = append(evs, e.Kind.String())
			}
			t.Logf("Do during a migration that outlasts it: %v (ran %v); events %v", err, ran, evs)
			// Control: the migration ends 200ms into the next call. The
			// call retries a redirect while a grant could still be entered
			// with its MinValidity (TTL/2: 2.5s) left: a 10s deadline gives
			// the migration's end about 7s (with 3s, about 0.4s, which a
			// loaded CI run overshot: refused with TRYAGAIN).
			go func() {
				time.Sleep(200 * time.Millisecond)
				if err := m.Finish(context.Background()); err != nil {
					t.Errorf("finish: %v", err)
				}
			}()
			s2 := s
			s2.Deadline = 10 * time.Second
			err2 := c.Do(ctx, key, s2, func(context.Context) error { return nil })
			time.Sleep(300 * time.Millisecond) // Finish done
			if err2 != nil {
				t.Errorf("control: a migration ending 200ms into a 10s deadline: %v, want a grant", err2)
			}
			if ran {
				t.Fatalf("the acquire ran during the migration")
			}
			if !errors.Is(err, lease.ErrRefused) || errors.Is(err, lease.ErrUnknown) {
				t.Errorf("every try of the acquire was answered TRYAGAIN (never ran), but Do says %v: want ErrRefused, no release", err)
			}
		})
	}
}
