package lease_test

// Round 43 (adversary on 72f4622, reverted): the release asked whether the
// queue EXISTS before reading its head with ZRANGE, to save the server
// about 2 µs when nobody is queued. It changed what an ACL missing one of
// those commands looks like; these tests keep what a user sees as it is:
// a user without ZRANGE is refused at its first release, a user without
// EXISTS releases with no command refused, and the README recipe's
// releases (nobody queued, a waiter, a dead queue, a queue of another
// type, maxmemory, a replay) end as they did.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// aclDenials43 is the number of refusals the ACL LOG counts for user
// (the sum of its entries' counts) and the server's error replies counted
// by INFO errorstats.
func aclDenials43(t *testing.T, admin *redis.Client, user string) (entries int64, errs int64) {
	t.Helper()
	ctx := context.Background()
	log, err := admin.Do(ctx, "ACL", "LOG", "128").Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range log {
		f, ok := en.([]any)
		if !ok {
			if m, ok := en.(map[any]any); ok {
				if fmt.Sprint(m["username"]) == user {
					n, _ := m["count"].(int64)
					entries += n
				}
			}
			continue
		}
		var u string
		var n int64
		for i := 0; i+1 < len(f); i += 2 {
			switch fmt.Sprint(f[i]) {
			case "username":
				u = fmt.Sprint(f[i+1])
			case "count":
				n, _ = f[i+1].(int64)
			}
		}
		if u == user {
			entries += n
		}
	}
	info, err := admin.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if _, v, ok := strings.Cut(l, ":count="); ok && strings.HasPrefix(l, "errorstat_") {
			n, _ := strconv.ParseInt(v, 10, 64)
			errs += n
		}
	}
	return entries, errs
}

// A user without EXISTS (all else of the README's recipe): its releases
// go through and no command of them is refused (with 72f4622, each release
// with nobody queued was refused an EXISTS inside the script: an ACL LOG
// entry per release of a service that works).
func TestAdversary43_NoExistsReleaseRefusesNothing(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, aclClient(t, srv, "noexists43u", without(leastPrivilege, "+exists")...))
	key := uniqueKey(t)
	e0, d0 := aclDenials43(t, admin, "noexists43u")
	for i := 0; i < 5; i++ {
		if err := c.Do(context.Background(), key, spec(5*time.Second, 5*time.Second), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := rec.Count(lease.EventReleased); n != 5 || rec.Count(lease.EventReleaseUnconfirmed) != 0 {
		t.Fatalf("released %d, unconfirmed %d; want 5, 0", n, rec.Count(lease.EventReleaseUnconfirmed))
	}
	if n := admin.Exists(context.Background(), lockKey(key)).Val(); n != 0 {
		t.Fatal("key left after the release")
	}
	e1, d1 := aclDenials43(t, admin, "noexists43u")
	t.Logf("errorstats %d -> %d (4 more for 5 releases here; 9 with 72f4622)", d0, d1)
	if e1 != e0 {
		t.Errorf("5 releases of a user without EXISTS: refusals in ACL LOG %d -> %d; want no change (a release is refused no command)", e0, e1)
	}
}

// A user without ZRANGE (a service that never waits: its calls are plain
// SET NX and the release script): every release is refused (the script's
// read of the head), reported as release unconfirmed wrapping ErrRefused
// and naming the permission, the key left to its TTL: the missing
// permission shows at the first call. (With 72f4622 a release with nobody
// queued went through, and only one with a waiter queued was refused: the
// same ACL worked until there was contention.)
func TestAdversary43_NoZrangeReleaseAsBefore(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, aclClient(t, srv, "nozrange43u", without(leastPrivilege, "+zrange")...))
	key := uniqueKey(t)
	err := c.Do(context.Background(), key, spec(2*time.Second, 5*time.Second), func(context.Context) error { return nil })
	if err != nil {
		t.Fatalf("the work ran under a confirmed grant: %v", err)
	}
	var unconfirmed []lease.Event
	for _, ev := range rec.Events() {
		if ev.Kind == lease.EventReleaseUnconfirmed {
			unconfirmed = append(unconfirmed, ev)
		}
	}
	pttl := admin.PTTL(context.Background(), lockKey(key)).Val()
	if len(unconfirmed) != 1 || !errors.Is(unconfirmed[0].Err, lease.ErrRefused) || !permissionError(unconfirmed[0].Err) || pttl <= 0 {
		t.Errorf("release without ZRANGE, nobody queued: release_unconfirmed %v, released %d, key's PTTL %v; want one release_unconfirmed wrapping ErrRefused naming the permission, 0 released, the key left to its TTL",
			unconfirmed, rec.Count(lease.EventReleased), pttl)
	}
}

// The README's recipe: a release with nobody queued deletes the key and
// leaves the tombstone ("1"); a waiter queued before the release gets the
// key at once (by the release's message, not at a re-check); a queue of
// dead entries only is emptied and the key deleted; a queue key of another
// type refuses the release as before (release_unconfirmed, ErrRefused
// naming WRONGTYPE), the key left held to its TTL.
func TestAdversary43_RecipeReleaseOutcomes(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	c, rec := newClient(t, aclClient(t, srv, "rec43a", leastPrivilege...))
	w, wrec := newClient(t, aclClient(t, srv, "rec43b", leastPrivilege...), lease.WithRecheck(10*time.Second))

	t.Run("nobody queued", func(t *testing.T) {
		key := uniqueKey(t)
		if err := c.Do(ctx, key, spec(5*time.Second, 5*time.Second), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if admin.Exists(ctx, lockKey(key)).Val() != 0 {
			t.Fatal("key left")
		}
		ks := admin.Keys(ctx, "lease:{"+key+"}:*").Val()
		if len(ks) != 1 || !strings.Contains(ks[0], ":r:") || admin.Get(ctx, ks[0]).Val() != "1" {
			t.Fatalf("keys left %q: want the tombstone only, \"1\"", ks)
		}
	})

	t.Run("waiter queued", func(t *testing.T) {
		key := uniqueKey(t)
		release := make(chan struct{})
		held := hold(t, c, key, spec(20*time.Second, 30*time.Second), release)
		got := make(chan time.Time, 1)
		wdone := make(chan error, 1)
		go func() {
			wdone <- w.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(context.Context) error {
				got <- time.Now()
				return nil
			})
		}()
		deadline := time.Now().Add(3 * time.Second)
		for admin.ZCard(ctx, "lease:{"+key+"}:q").Val() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the waiter never queued")
			}
			time.Sleep(5 * time.Millisecond)
		}
		rel := time.Now()
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			if d := at.Sub(rel); d > 500*time.Millisecond {
				t.Fatalf("handover took %v (re-check is 10s): not by the release's message", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiter did not get the key")
		}
		if err := <-wdone; err != nil {
			t.Fatal(err)
		}
		if wrec.Count(lease.EventReleased) == 0 {
			t.Fatal("waiter's release not confirmed")
		}
	})

	t.Run("dead entries only", func(t *testing.T) {
		key := uniqueKey(t)
		release := make(chan struct{})
		held := hold(t, c, key, spec(20*time.Second, 30*time.Second), release)
		q, x := "lease:{"+key+"}:q", "lease:{"+key+"}:x"
		for i := 0; i < 40; i++ {
			m := fmt.Sprintf("%s|30000|0|2000|lease:{%%probe-dead}:c", "deadid"+strconv.Itoa(i))
			admin.ZAdd(ctx, q, redis.Z{Score: float64(i + 1), Member: m})
			admin.HSet(ctx, x, m, "1:1")
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		if n := admin.Exists(ctx, lockKey(key), q, x).Val(); n != 0 {
			t.Fatalf("%d of lock, queue, expiries left; want none", n)
		}
	})

	t.Run("queue of another type", func(t *testing.T) {
		for _, typ := range []string{"string", "hash", "list"} {
			key := uniqueKey(t)
			q := "lease:{" + key + "}:q"
			switch typ {
			case "string":
				admin.Set(ctx, q, "s", 0)
			case "hash":
				admin.HSet(ctx, q, "f", "v")
			case "list":
				admin.RPush(ctx, q, "a")
			}
			before := rec.Count(lease.EventReleaseUnconfirmed)
			err := c.Do(ctx, key, spec(2*time.Second, 5*time.Second), func(context.Context) error { return nil })
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			evs := rec.Events()
			var last lease.Event
			for _, ev := range evs {
				if ev.Kind == lease.EventReleaseUnconfirmed {
					last = ev
				}
			}
			if rec.Count(lease.EventReleaseUnconfirmed) != before+1 || !errors.Is(last.Err, lease.ErrRefused) || !strings.Contains(last.Err.Error(), "WRONGTYPE") {
				t.Fatalf("%s queue: release_unconfirmed %d -> %d, last %v; want one more, ErrRefused naming WRONGTYPE", typ, before, rec.Count(lease.EventReleaseUnconfirmed), last.Err)
			}
			if p := admin.PTTL(ctx, lockKey(key)).Val(); p <= 0 {
				t.Fatalf("%s queue: the key's PTTL %v, want it left to its TTL", typ, p)
			}
		}
	})
}

// At maxmemory (noeviction) a release with nobody queued still goes
// through (its tombstone written after the DEL), and a replay of a
// release whose reply was cut answers as the first run did.
func TestAdversary43_OOMAndReplay(t *testing.T) {
	t.Run("oom", func(t *testing.T) {
		srv := leasetest.StartRedis(t)
		admin := srv.Client(t)
		full := maxmemoryFull(t, admin)
		t.Cleanup(func() { full(false) })
		c, rec := newClient(t, srv.Client(t))
		key := uniqueKey(t)
		err := c.Do(context.Background(), key, spec(5*time.Second, 5*time.Second), func(context.Context) error {
			full(true)
			return nil
		})
		full(false)
		if err != nil || rec.Count(lease.EventReleased) != 1 {
			t.Fatalf("Do %v, released %d", err, rec.Count(lease.EventReleased))
		}
		ks := admin.Keys(context.Background(), "lease:{"+key+"}:*").Val()
		if len(ks) != 1 || !strings.Contains(ks[0], ":r:") {
			t.Fatalf("keys %q: want the tombstone only", ks)
		}
	})
	t.Run("cut reply", func(t *testing.T) {
		c, rec, p, direct, _ := proxied(t, nil)
		key := uniqueKey(t)
		warm(t, c, key)
		before := rec.Count(lease.EventReleased)
		err := c.Do(context.Background(), key, spec(5*time.Second, 5*time.Second), func(context.Context) error {
			p.Set(leasetest.CutNextReply)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if p.Cut() != 1 {
			t.Fatalf("cut %d replies, want 1", p.Cut())
		}
		if rec.Count(lease.EventReleased) != before+1 || rec.Count(lease.EventReleaseUnconfirmed) != 0 {
			t.Fatalf("released %d -> %d, unconfirmed %d", before, rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed))
		}
		if direct.Exists(context.Background(), lockKey(key)).Val() != 0 {
			t.Fatal("key left")
		}
	})
}

// The same user without ZRANGE, with a waiter (a user of the README's
// recipe) queued behind it: its release is refused (the head is read), and
// the waiter gets the key only when the holder's TTL ends.
func TestAdversary43_NoZrangeContendedRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	c, rec := newClient(t, aclClient(t, srv, "nozrange43c", without(leastPrivilege, "+zrange")...))
	w, _ := newClient(t, aclClient(t, srv, "full43c", leastPrivilege...), lease.WithRecheck(100*time.Millisecond))
	key := uniqueKey(t)
	release := make(chan struct{})
	held := hold(t, c, key, spec(time.Second, 10*time.Second), release)
	wdone := make(chan time.Time, 1)
	go func() {
		err := w.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(context.Context) error { return nil })
		if err != nil {
			t.Error(err)
		}
		wdone <- time.Now()
	}()
	if !waitFor(3*time.Second, func() bool { return admin.ZCard(ctx, "lease:{"+key+"}:q").Val() > 0 }) {
		t.Fatal("the waiter never queued")
	}
	rel := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	at := <-wdone
	var refused int
	for _, ev := range rec.Events() {
		if ev.Kind == lease.EventReleaseUnconfirmed && errors.Is(ev.Err, lease.ErrRefused) && permissionError(ev.Err) {
			refused++
		}
	}
	if refused != 1 || rec.Count(lease.EventReleased) != 0 {
		t.Fatalf("release refused %d, released %d; want 1, 0", refused, rec.Count(lease.EventReleased))
	}
	t.Logf("the waiter got the key %v after the refused release (holder's TTL 1s)", at.Sub(rel).Round(10*time.Millisecond))
}
