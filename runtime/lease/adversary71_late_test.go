package lease_test

// Round 71: Watch naming endings when its messages come late (its
// connections through a proxy that delays every reply), when the new
// holder already released by the time Watch looks, at maxmemory (the
// release's "late" tombstone path), and for hold-min endings beside
// handovers; and releases refused by an ACL without SET (everywhere, or
// on the tombstones only) change nothing.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// TestAdversary71_LateMessagesNewHolderGone: A holds, B waits and
// releases at once when it enters (nobody behind it): by the time Watch
// (every reply delayed) looks, the key is free. A's ending is "handed
// over" (its tombstone says so; the message names B, who is gone). With
// a delay longer than a tombstone's life (1s by default) Watch cannot
// tell, and says "" (unseen), never "released" or "expired". B's own
// ending, if Watch saw B at all, is "released" (or "" when its listing
// came more than a tombstone's life after B's release).
func TestAdversary71_LateMessagesNewHolderGone(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{0, 200 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			ctx := context.Background()
			key := "adv71late"
			p := leasetest.StartProxy(t, srv.Addr())
			wr := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { wr.Close() })
			watcher, _ := newClient(t, wr)
			// A's tombstone lives 4s below a second of delay (so that a
			// look delayed by a loaded machine still finds it), the
			// default 1s above.
			var hopts []lease.Option
			if delay < time.Second {
				hopts = append(hopts, lease.WithReleaseTimeout(time.Second))
			}
			hc, _ := newClient(t, srv.Client(t), hopts...)
			wc, _ := newClient(t, srv.Client(t))
			h := holdUntil(t, hc, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true})
			oldID := inspect(t, hc, key).Holder
			// Reads are bounded by the interval: longer than a delayed
			// round trip.
			w := startWatch(t, watcher, key, 3*delay+2*time.Second)
			if ch := w.next(lease.ChangeHeld, key); ch.Info.Holder != oldID {
				t.Fatalf("held %q, want %q", ch.Info.Holder, oldID)
			}
			// Every reply to Watch late from now on (its subscription's
			// messages too).
			if delay > 0 {
				p.SetDelay(delay)
			}
			var newID string
			waited := make(chan error, 1)
			go func() {
				waited <- wc.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second, Fence: true},
					func(fctx context.Context) error {
						l, _ := lease.FromContext(fctx)
						newID = l.Owner()
						return nil
					})
			}()
			adv39WaitQueued(t, srv, key, 1)
			close(h.release)
			if err := <-h.done; err != nil {
				t.Fatal(err)
			}
			if err := <-waited; err != nil {
				t.Fatal(err)
			}
			if v := srv.Client(t).Get(ctx, "lease:{"+key+"}:r:"+oldID).Val(); v != "1>" && delay < time.Second {
				t.Errorf("A's tombstone %q, want \"1>\"", v)
			}
			ch := w.next(lease.ChangeEnded, key)
			want := []string{"handed over"}
			if delay > time.Second {
				want = []string{"", "handed over"}
			}
			if ch.Info.Holder != oldID || !slices.Contains(want, ch.How) {
				t.Fatalf("ended %q how %q, want %q with one of %q", ch.Info.Holder, ch.How, oldID, want)
			}
			t.Logf("delay %v: A ended %q", delay, ch.How)
			select {
			case ch := <-w.changes:
				// Watch caught B holding: then B's own release, seen by
				// the listing, maybe more than a tombstone's life later
				// ("": unseen).
				if ch.Kind != lease.ChangeGranted || ch.Info.Holder != newID {
					t.Fatalf("then %v %q (how %q), want nothing or B's grant", ch.Kind, ch.Info.Holder, ch.How)
				}
				e := w.next(lease.ChangeEnded, key)
				if e.Info.Holder != newID || e.How != "released" && e.How != "" {
					t.Fatalf("B ended %q how %q, want %q \"released\" (or \"\")", e.Info.Holder, e.How, newID)
				}
			case <-time.After(3*delay + time.Second):
			}
		})
	}
}

// TestAdversary71_OOMHandoverNamedByWatch: a Do's release (its reply cut:
// go-redis replays it) and a ForceRelease hand the key to a waiter with
// the server at maxmemory (noeviction): the tombstone's first SET is
// refused and written late, marked ("1>"; a forced one's "x"), with the
// tombstone's PX; Watch names the endings "handed over" and
// "force-released".
func TestAdversary71_OOMHandoverNamedByWatch(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"do", "force"} {
		t.Run(kind, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			oom := maxmemoryFull(t, admin)
			ctx := context.Background()
			key := "adv71oom-" + kind
			r, p := adv40CutClient(t, srv, key, func() { oom(true) }, func() { oom(false) })
			rc, rrec := newClient(t, r)
			wc, _ := newClient(t, srv.Client(t))
			watcher, _ := newClient(t, srv.Client(t))
			if err := rc.Do(ctx, key+"-warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			hc := rc
			if kind == "force" {
				hc, _ = newClient(t, srv.Client(t))
			}
			h := holdUntil(t, hc, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
			oldID := inspect(t, watcher, key).Holder
			w := startWatch(t, watcher, key, 100*time.Millisecond)
			w.next(lease.ChangeHeld, key)
			wh := startHolding(t, wc, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second})
			adv39WaitQueued(t, srv, key, 1)
			// The waiter's follow-up acquire done: one at maxmemory fails
			// its Do (TestAdversary40_WaiterAtMaxmemory).
			time.Sleep(300 * time.Millisecond)
			var tombPTTL time.Duration
			if kind == "do" {
				close(h.release)
				if err := <-h.done; err != nil {
					t.Fatal(err)
				}
			} else {
				res, err := rc.ForceRelease(ctx, key, oldID)
				if err != nil || res != lease.ForceReleased {
					t.Fatalf("ForceRelease at maxmemory = %v, %v", res, err)
				}
			}
			oom(false)
			tombPTTL = admin.PTTL(ctx, "lease:{"+key+"}:r:"+oldID).Val()
			if p.Cut() != 1 {
				t.Errorf("%d replies cut, want 1", p.Cut())
			}
			noUnconfirmedReleases(t, kind, rrec)
			newID := wh.enter(t)
			wantTomb, wantHow, lo, hi := "1>", "handed over", time.Millisecond, time.Second
			if kind == "force" {
				// The lock's remaining TTL (up to 10s) more.
				wantTomb, wantHow, lo, hi = "x", "force-released", 5*time.Second, 11*time.Second
			}
			if v := admin.Get(ctx, "lease:{"+key+"}:r:"+oldID).Val(); v != wantTomb {
				t.Errorf("tombstone %q, want %q", v, wantTomb)
			}
			if tombPTTL < lo || tombPTTL > hi {
				t.Errorf("tombstone PTTL %v, want within [%v, %v]", tombPTTL, lo, hi)
			}
			ch := w.next(lease.ChangeEnded, key)
			if ch.Info.Holder != oldID || ch.How != wantHow {
				t.Fatalf("ended %q how %q, want %q %q", ch.Info.Holder, ch.How, oldID, wantHow)
			}
			if g := w.next(lease.ChangeGranted, key); g.Info.Holder != newID {
				t.Fatalf("granted %q, want %q", g.Info.Holder, newID)
			}
			close(wh.release)
			if err := <-wh.done; err != nil {
				t.Fatal(err)
			}
			w.ended(key, "released")
		})
	}
}

// TestAdversary71_HoldEndingsBesideHandovers: hold-min endings keep their
// names next to the new mark: A releases with a hold-min while B waits
// (tombstone "h"), the hold runs out, B enters ("hold ran out"); B
// releases with a hold-min while C waits and an operator ends the hold
// ("hold ended"); C hands over to D ("handed over"); D releases, nobody
// waiting ("released").
func TestAdversary71_HoldEndingsBesideHandovers(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	key := "adv71hold"
	cs := make([]*lease.Client, 4)
	for i := range cs {
		cs[i], _ = newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	}
	op, _ := newClient(t, srv.Client(t))
	watcher, _ := newClient(t, srv.Client(t))
	w := startWatch(t, watcher, key, 50*time.Millisecond)
	hold := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, HoldMin: 1500 * time.Millisecond}
	plain := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second}
	withWait := hold
	withWait.Wait = 30 * time.Second
	a := startHolding(t, cs[0], key, hold)
	aID := a.enter(t)
	// Held, when Watch's first listing came after A's grant.
	select {
	case g := <-w.changes:
		if g.Kind != lease.ChangeGranted && g.Kind != lease.ChangeHeld || g.Info.Holder != aID {
			t.Fatalf("%v %q, want A granted", g.Kind, g.Info.Holder)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not see A in 5s")
	}
	b := startHolding(t, cs[1], key, withWait)
	adv39WaitQueued(t, srv, key, 1)
	time.Sleep(200 * time.Millisecond) // A's hold-min: 1.5s from its entry, most of it left
	close(a.release)
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	w.next(lease.ChangeHoldStarted, key)
	bID := b.enter(t)
	w.ended(key, "hold ran out")
	if g := w.next(lease.ChangeGranted, key); g.Info.Holder != bID {
		t.Fatalf("granted %q, want B", g.Info.Holder)
	}
	c := startHolding(t, cs[2], key, plain)
	adv39WaitQueued(t, srv, key, 1)
	close(b.release)
	if err := <-b.done; err != nil {
		t.Fatal(err)
	}
	w.next(lease.ChangeHoldStarted, key)
	if res, err := op.ForceRelease(ctx, key, bID); err != nil || res != lease.ForceHoldEnded {
		t.Fatalf("ForceRelease of B's hold = %v, %v", res, err)
	}
	cID := c.enter(t)
	w.ended(key, "hold ended")
	if g := w.next(lease.ChangeGranted, key); g.Info.Holder != cID {
		t.Fatalf("granted %q, want C", g.Info.Holder)
	}
	d := startHolding(t, cs[3], key, plain)
	adv39WaitQueued(t, srv, key, 1)
	close(c.release)
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	dID := d.enter(t)
	w.ended(key, "handed over")
	if g := w.next(lease.ChangeGranted, key); g.Info.Holder != dID {
		t.Fatalf("granted %q, want D", g.Info.Holder)
	}
	close(d.release)
	if err := <-d.done; err != nil {
		t.Fatal(err)
	}
	w.ended(key, "released")
}

// TestAdversary71_RefusedSetChangesNothing: a release by a user whose ACL
// refuses SET (everywhere, or only on the tombstones) is refused before
// it writes anything, for every kind of release, below and at maxmemory:
// the keys stay as they were (no handover half done, no mark).
func TestAdversary71_RefusedSetChangesNothing(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	adv71Load(t, admin)
	oom := maxmemoryFull(t, admin)
	ctx := context.Background()
	// Writes everywhere under lease: but the tombstones (":r:").
	noTombRules := append(without(leastPrivilege, "~lease:*"), "%R~lease:*",
		"%W~lease:{*}:l", "%W~lease:{*}:c", "%W~lease:{*}:f", "%W~lease:{*}:q", "%W~lease:{*}:x")
	users := map[string]*redis.Client{
		"noset":  aclClient(t, srv, "noset71", without(leastPrivilege, "+set")...),
		"notomb": aclClient(t, srv, "notomb71", noTombRules...),
	}
	key := "adv71noset"
	k := adv71Keys(key, adv71A)
	mB := adv71Member(adv71B, true)
	for _, user := range []string{"noset", "notomb"} {
		for _, a7 := range []string{"1", "l", "x"} {
			for _, hold := range []int{0, 4000} {
				for _, queued := range []bool{false, true} {
					for _, atMax := range []bool{false, true} {
						if a7 == "x" && hold > 0 {
							continue
						}
						name := fmt.Sprintf("%s/a7=%s/hold=%d/queued=%v/maxmemory=%v", user, a7, hold, queued, atMax)
						oom(false)
						admin.FlushAll(ctx)
						admin.Set(ctx, k[0], adv71A+":3", 20*time.Second)
						admin.Set(ctx, k[3], "3", time.Hour)
						if queued {
							adv71Queue(t, admin, key, mB)
						}
						before := adv40Dump(t, admin)
						oom(atMax)
						res, err := lease.ReleaseScript.EvalSha(ctx, users[user], k, adv71A, hold, "PUBLISH", 60000, 600000, "", a7).Result()
						oom(false)
						after := adv40Dump(t, admin)
						if err == nil || !permissionError(err) {
							t.Errorf("%s: answered %v, %v; want a permission error", name, res, err)
						}
						if !slices.Equal(before, after) {
							t.Errorf("%s: the refused release wrote:\n before %q\n after  %q", name, before, after)
						}
					}
				}
			}
		}
	}
}
