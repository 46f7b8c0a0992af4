package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// TestAdversary39_OOMRelease: a server at maxmemory (noeviction) refuses
// a script's first write that may grow memory, and lets a script that has
// written finish. A release frees memory, so its first write is one that
// does (DEL, or a queue entry's ZREM) and the tombstone's SET comes after
// it (a hold-min's first write is a PEXPIRE): every release goes through
// at maxmemory, with nobody queued, handing the key to a waiter, or
// setting a hold-min. Round 39 found that a4b4af6 (the release's
// own-entry ZREM only when someone is queued) left the tombstone's SET
// first for every call: the release was refused, and the key stayed held
// for its TTL after Do returned nil. Calls without Wait were refused that
// way before a4b4af6 too (their release had no ZREM to write first).
func TestAdversary39_OOMRelease(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	oom := maxmemoryFull(t, admin)
	base := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second}
	specs := map[string]lease.Spec{"plain": base}
	s := base
	s.Fence = true
	specs["fenced"] = s
	s = base
	s.Wait = time.Second
	specs["waiting"] = s
	s.Fence = true
	specs["fenced, waiting"] = s

	c, rec := newClient(t, srv.Client(t))
	for name, s := range specs {
		key := uniqueKey(t) + strings.ReplaceAll(name, ", ", "-")
		err := c.Do(ctx, key, s, func(context.Context) error {
			oom(true)
			return nil
		})
		v := admin.Get(ctx, lockKey(key)).Val()
		oom(false)
		if err != nil || v != "" {
			t.Errorf("%s, nobody queued: Do = %v; the key after Do %q, want it released", name, err, v)
		}
	}
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		t.Errorf("%d releases unconfirmed at maxmemory", n)
	}

	// A hold-min: the release sets the rest of the hold as the key's TTL,
	// at maxmemory too (its first write a PEXPIRE).
	for _, name := range []string{"plain", "waiting"} {
		s := specs[name]
		s.HoldMin = 2 * time.Second
		key := uniqueKey(t) + "hold" + name
		err := c.Do(ctx, key, s, func(context.Context) error {
			oom(true)
			return nil
		})
		v := admin.Get(ctx, lockKey(key)).Val()
		p := admin.PTTL(ctx, lockKey(key)).Val()
		oom(false)
		if err != nil || !strings.HasPrefix(v, "~") || p > 2*time.Second {
			t.Errorf("%s with hold-min 2s: Do = %v; the key after Do %q for %v, want it marked held (~) for at most 2s", name, err, v, p)
		}
	}
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		t.Errorf("%d releases with hold-min unconfirmed at maxmemory", n)
	}

	// A waiter of another Client queued: the release at maxmemory hands
	// it the key, and it enters on the release's message (its own
	// release, at maxmemory too, goes through).
	for name, s := range specs {
		key := uniqueKey(t) + "h" + strings.ReplaceAll(name, ", ", "-")
		wc, wrec := newClient(t, srv.Client(t))
		ws := specs["fenced, waiting"]
		ws.Wait = 4 * time.Second
		entered := make(chan time.Time, 1)
		queued := make(chan struct{})
		var released time.Time
		hdone := make(chan error, 1)
		go func() {
			hdone <- c.Do(ctx, key, s, func(context.Context) error {
				close(queued)
				q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
				for end := time.Now().Add(3 * time.Second); admin.ZCard(ctx, q).Val() == 0; {
					if time.Now().After(end) {
						return fmt.Errorf("the waiter did not queue")
					}
					time.Sleep(5 * time.Millisecond)
				}
				oom(true)
				released = time.Now()
				return nil
			})
		}()
		<-queued
		werr := wc.Do(ctx, key, ws, func(context.Context) error {
			entered <- time.Now()
			return nil
		})
		herr := <-hdone
		v := admin.Get(ctx, lockKey(key)).Val()
		oom(false)
		if herr != nil || werr != nil {
			t.Errorf("%s, a waiter queued: holder's Do = %v, waiter's = %v", name, herr, werr)
			continue
		}
		if d := (<-entered).Sub(released); d > time.Second {
			t.Errorf("%s, a waiter queued: it entered %v after the release at maxmemory, want at once", name, d)
		}
		if v != "" {
			t.Errorf("%s, a waiter queued: the key after the waiter's Do %q, want it released", name, v)
		}
		if n := wrec.Count(lease.EventReleaseUnconfirmed); n != 0 {
			t.Errorf("%s: the waiter's release unconfirmed at maxmemory", name)
		}
	}
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		t.Errorf("%d holders' releases unconfirmed at maxmemory", n)
	}
}

// TestAdversary39_QueuedWaiterRechecksAtMaxmemory: a waiter queued before
// the server reached maxmemory re-checks while it is there (every 100 ms
// here; in CI it was its subscription coming up) and keeps its place: the
// release at maxmemory hands it the key and it enters. Before, its first
// re-check was refused (OOM) and ended its wait with that error.
func TestAdversary39_QueuedWaiterRechecksAtMaxmemory(t *testing.T) {
	t.Parallel()
	for _, fence := range []bool{false, true} {
		entered := make(chan time.Time, 1)
		sc := adv53Queued(t, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second},
			lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second, Fence: fence},
			100*time.Millisecond, context.Background(), func(context.Context) error {
				entered <- time.Now()
				return nil
			})
		time.Sleep(600 * time.Millisecond) // about six re-checks
		released := time.Now()
		close(sc.release)
		herr, werr := <-sc.hdone, <-sc.wdone
		sc.oom(false)
		if herr != nil || werr != nil {
			t.Errorf("fence %v: holder's Do = %v, waiter's = %v; want both nil", fence, herr, werr)
			continue
		}
		if d := (<-entered).Sub(released); d > time.Second {
			t.Errorf("fence %v: the waiter entered %v after the release at maxmemory, want at once", fence, d)
		}
		if n := sc.wrec.Count(lease.EventReleaseUnconfirmed); n != 0 {
			t.Errorf("fence %v: the waiter's release unconfirmed at maxmemory", fence)
		}
	}
}
