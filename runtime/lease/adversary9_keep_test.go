package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Kept leases reused by concurrent calls, released to waiters of another
// client (wanted), by keep ending, and by Close while calls run (-race:
// the call structs' argument arrays and strings are shared by pointer).
func TestAdversary9_KeptLeaseChurnRace(t *testing.T) {
	t.Parallel()
	a, _ := sharedClient(t)
	b, _ := sharedClient(t)
	keys := []string{uniqueKey(t), uniqueKey(t)}
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := time.Now().Add(1500 * time.Millisecond)
	var entered [2]int64
	var mu sync.Mutex
	inside := map[string]int{}
	check := func(key string, d int) {
		mu.Lock()
		inside[key] += d
		if inside[key] > 1 {
			t.Errorf("two holders of %s at once", key)
		}
		mu.Unlock()
	}
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := a
			if i%3 == 2 {
				c = b
			}
			for time.Now().Before(stop) {
				key := keys[i%2]
				s := lease.Spec{TTL: 500 * time.Millisecond, Deadline: 2 * time.Second, Wait: time.Second, Keep: 50 * time.Millisecond, Fence: i%2 == 0}
				err := c.Do(ctx, key, s, func(fctx context.Context) error {
					check(key, 1)
					defer check(key, -1)
					l, _ := lease.FromContext(fctx)
					if l.Key() != key {
						t.Errorf("lease key %q, want %q", l.Key(), key)
					}
					mu.Lock()
					entered[i%2]++
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					return nil
				})
				if err != nil && !errors.Is(err, lease.ErrBusy) && !errors.Is(err, lease.ErrClosed) {
					t.Errorf("Do: %v", err)
				}
			}
		}()
	}
	time.Sleep(1200 * time.Millisecond)
	a.Close()
	wg.Wait()
	t.Logf("entered %v", entered)
	rdb := shared.Client(t)
	for _, k := range keys {
		if !waitFor(2*time.Second, func() bool { return rdb.Exists(ctx, lockKey(k)).Val() == 0 }) {
			t.Errorf("%s still held after Close and the calls ended", k)
		}
	}
}
