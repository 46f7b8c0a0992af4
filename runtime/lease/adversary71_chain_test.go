package lease_test

// Round 71: the handover's mark on the releasing identity's tombstone
// ("1>", "l>"; a forced release's stays "x", commit 706b129), attacked
// with release scripts run directly on a real server: chains of
// handovers that Watch cannot see one by one (run in one MULTI/EXEC, so
// that no look of Watch falls between them), with and without the
// releases' messages, with tiny and huge Watch intervals.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv71Keys are the release script's keys of key under the default
// prefix, with id's tombstone.
func adv71Keys(key, id string) []string {
	p := "lease:{" + key + "}:"
	return []string{p + "l", p + "c", p + "r:" + id, p + "f", p + "q", p + "x"}
}

// adv71ID is a grant's identity (32 hex digits) for test n, i.
func adv71ID(n, i int) string { return fmt.Sprintf("%016x%016x", 0x71000000+n, i+1) }

// adv71Member is id's queue entry: identity|ttl|fence|claim|inbox (an
// inbox nobody listens on: the handover gives the claim).
func adv71Member(id string, fenced bool) string {
	f := "0"
	if fenced {
		f = "1"
	}
	return id + "|30000|" + f + "|5000|lease:{%probe-adv71-" + id[:8] + "}:c"
}

// adv71Queue queues members (live for a minute) behind key's holder.
func adv71Queue(t *testing.T, rdb *redis.Client, key string, members ...string) {
	t.Helper()
	ctx := context.Background()
	k := adv71Keys(key, "")
	now := time.Now().UnixMilli()
	for i, m := range members {
		if err := rdb.ZAdd(ctx, k[4], redis.Z{Score: float64(now*1000 + int64(i)), Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, k[5], m, fmt.Sprintf("%d:%d", now+60000, i+1)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// adv71Step is one release script run: identity id releases key (hold ms,
// member, tombstone value a7).
type adv71Step struct {
	id, a7 string
	hold   int
}

// adv71Load loads the release script on rdb's server.
func adv71Load(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := lease.ReleaseScript.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
}

func adv71Args(s adv71Step) []any {
	return []any{s.id, s.hold, "PUBLISH", 60000, 600000, "", s.a7}
}

// adv71Chain runs the steps on key in one MULTI/EXEC as rdb's user and
// returns each step's answer (the script loaded before: adv71Load).
func adv71Chain(t *testing.T, rdb *redis.Client, key string, steps ...adv71Step) []int64 {
	t.Helper()
	ctx := context.Background()
	cmds := make([]*redis.Cmd, len(steps))
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range steps {
			cmds[i] = lease.ReleaseScript.EvalSha(ctx, p, adv71Keys(key, s.id), adv71Args(s)...)
		}
		return nil
	}); err != nil {
		t.Fatalf("chain on %q: %v", key, err)
	}
	out := make([]int64, len(steps))
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			t.Fatalf("chain step %d: %v", i, err)
		}
		out[i] = n
	}
	return out
}

// TestAdversary71_WatchChainBetweenLooks: several handovers in a row that
// no look of Watch falls between (one MULTI/EXEC). Watch saw the first
// holder and next sees the last one, or the key free: the first holder's
// ending is named by its tombstone ("handed over" for its own or a leader
// term's handover, "force-released" for a forced one), whatever the
// later holders did, with the messages published (Watch looks on the
// first, which names a holder long gone) or refused (a user without the
// channels: Watch finds the change by its listing), with an interval of
// 5ms, 300ms, or an hour (messages only). The last holder's own release
// with nobody waiting is then "released". Each handover leaves the mark
// with the release's tombstone PX (the lock's remaining TTL more for a
// forced one).
func TestAdversary71_WatchChainBetweenLooks(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	mute := aclClient(t, srv, "mute71", append(without(leastPrivilege, "&lease:*"), "+multi", "+exec")...)
	watcher, _ := newClient(t, srv.Client(t))
	ctx := context.Background()
	adv71Load(t, admin)
	type scenario struct {
		name   string
		a7     []string // each holder's release, in turn ("h" a hold-min)
		last   bool     // the last holder (the key's after the chain) is not released
		how    string   // the first holder's ending
		fenced bool
	}
	scenarios := []scenario{
		{"own x3", []string{"1", "1", "1"}, true, "handed over", false},
		{"own x3 fenced", []string{"1", "1", "1"}, true, "handed over", true},
		{"own then free", []string{"1", "1", "1"}, false, "handed over", false},
		{"leader x3", []string{"l", "l", "l"}, true, "handed over", true},
		{"leader then free", []string{"l", "l"}, false, "handed over", false},
		{"forced then own", []string{"x", "1", "1"}, true, "force-released", false},
		{"forced then free", []string{"x", "1"}, false, "force-released", false},
		{"own then forced", []string{"1", "x", "1"}, true, "handed over", false},
		{"own then hold-min", []string{"1", "h"}, true, "handed over", false},
		{"own then leader", []string{"1", "l", "x"}, true, "handed over", false},
	}
	n := 0
	for _, every := range []time.Duration{5 * time.Millisecond, 300 * time.Millisecond, time.Hour} {
		for _, publish := range []bool{true, false} {
			if every == time.Hour && !publish {
				continue // nothing would make Watch look
			}
			for _, sc := range scenarios {
				n++
				name := fmt.Sprintf("%s/every=%v/publish=%v", sc.name, every, publish)
				t.Run(name, func(t *testing.T) {
					key := fmt.Sprintf("adv71chain-%d", n)
					rdb := admin
					if !publish {
						rdb = mute
					}
					// Holders: ids[0] holds; one waiter per release after it
					// (the last release of a chain that ends free has none).
					waiters := len(sc.a7)
					if !sc.last {
						waiters--
					}
					ids := make([]string, waiters+1)
					for i := range ids {
						ids[i] = adv71ID(n, i)
					}
					k := adv71Keys(key, ids[0])
					if err := admin.Set(ctx, k[0], ids[0]+":0", 30*time.Second).Err(); err != nil {
						t.Fatal(err)
					}
					var ms []string
					for _, id := range ids[1:] {
						ms = append(ms, adv71Member(id, sc.fenced))
					}
					adv71Queue(t, admin, key, ms...)
					w := startWatch(t, watcher, key, every)
					w.next(lease.ChangeHeld, key)

					var steps []adv71Step
					for i, a7 := range sc.a7 {
						s := adv71Step{id: ids[i], a7: a7}
						if a7 == "h" {
							s.a7, s.hold = "1", 20000
						}
						steps = append(steps, s)
					}
					res := adv71Chain(t, rdb, key, steps...)
					for i, r := range res {
						want := int64(1)
						if steps[i].hold > 0 {
							want = 2
						}
						if !publish {
							want += 10 // the release's (or the waiter's) message refused
						}
						if r != want && !(!publish && r == want-10) {
							t.Errorf("step %d (%+v) answered %d, want %d", i, steps[i], r, want)
						}
					}
					// Each releaser's tombstone: marked by its handover,
					// with the tombstone's PX.
					for i, s := range steps {
						tk := adv71Keys(key, s.id)[2]
						v := admin.Get(ctx, tk).Val()
						pttl := admin.PTTL(ctx, tk).Val()
						handed := i < len(steps)-1 || sc.last
						want := s.a7
						switch {
						case s.hold > 0:
							want = "h"
						case handed && s.a7 != "x":
							want += ">"
						}
						if v != want {
							t.Errorf("step %d (%+v): tombstone %q, want %q", i, s, v, want)
						}
						lo, hi := 50*time.Second, 60*time.Second
						if s.a7 == "x" { // the lock's remaining TTL (up to 30s) more
							lo, hi = 50*time.Second, 90*time.Second
						}
						if pttl < lo || pttl > hi {
							t.Errorf("step %d (%+v): tombstone PTTL %v, want within [%v, %v]", i, s, pttl, lo, hi)
						}
					}
					ch := w.next(lease.ChangeEnded, key)
					if ch.Info.Holder != ids[0] || ch.How != sc.how {
						t.Fatalf("ended: holder %q how %q, want %q %q", ch.Info.Holder, ch.How, ids[0], sc.how)
					}
					if !sc.last {
						return
					}
					g := w.next(lease.ChangeGranted, key)
					lastID := ids[len(steps)] // the last release's waiter
					if steps[len(steps)-1].hold > 0 {
						lastID = ids[len(steps)-1] // holds its hold-min
					}
					if g.Info.Holder != lastID {
						t.Fatalf("granted %q, want the chain's last holder %q", g.Info.Holder, lastID)
					}
					if sc.fenced {
						if g.Info.Token == 0 || g.Info.Token != g.Info.LastToken {
							t.Errorf("fenced chain: granted token %d, counter %d", g.Info.Token, g.Info.LastToken)
						}
					}
					if steps[len(steps)-1].hold > 0 {
						return // the last holder holds the hold-min
					}
					// The last holder's own release, nobody waiting: a
					// leader's says "r" (Watch with an hour's interval
					// looks on it).
					a7 := "1"
					if every == time.Hour {
						a7 = "l"
					}
					if r := adv71Chain(t, rdb, key, adv71Step{id: lastID, a7: a7}); r[0]%10 != 1 {
						t.Fatalf("last release answered %d", r[0])
					}
					if v := admin.Get(ctx, adv71Keys(key, lastID)[2]).Val(); v != a7 {
						t.Errorf("last release's tombstone %q, want %q", v, a7)
					}
					w.ended(key, "released")
				})
			}
		}
	}
}

// TestAdversary71_WatchOwnEndingThenOthersHandover: the first holder A's
// lease ends without a handover (its own release with nobody waiting, a
// leader term's, a hold-min that ran out, or its TTL ran out), then,
// before Watch looks, B takes the free key and hands it to C (the message
// naming C makes Watch look). Watch sees A, then C: A's ending is named by
// A's tombstone ("1", "l": "released"; "h": "hold ran out"; none within a
// second of the last look: "expired", or "" when unsure), not "handed
// over": the message names C, the holder Watch finds, but it is B's
// handover, not A's. Since the handover's mark, A's tombstone tells
// whether A handed over; the message is only a clue for when the
// tombstone is gone. Likewise when B is then force-released with nobody
// waiting (ForceRelease says "x" on the key's channel): A's ending is not
// "force-released" (A expired) nor "hold ended" (A's hold ran out).
func TestAdversary71_WatchOwnEndingThenOthersHandover(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	watcher, _ := newClient(t, srv.Client(t))
	ctx := context.Background()
	adv71Load(t, admin)
	for i, how := range []string{"own", "leader", "hold-min", "ttl", "ttl-then-forced", "hold-min-then-forced"} {
		for _, every := range []time.Duration{300 * time.Millisecond, time.Hour} {
			t.Run(fmt.Sprintf("%s/every=%v", how, every), func(t *testing.T) {
				key := fmt.Sprintf("adv71own-%d-%v", i, every)
				a, b, c := adv71ID(900+i, 0), adv71ID(900+i, 1), adv71ID(900+i, 2)
				k := adv71Keys(key, a)
				aTTL := 30 * time.Second
				if how == "ttl" || how == "ttl-then-forced" {
					aTTL = 400 * time.Millisecond
				}
				forced := strings.HasSuffix(how, "-then-forced")
				if err := admin.Set(ctx, k[0], a+":0", aTTL).Err(); err != nil {
					t.Fatal(err)
				}
				w := startWatch(t, watcher, key, every)
				w.next(lease.ChangeHeld, key)
				want := []string{"released"}
				switch how {
				case "own":
					// A's release is in the MULTI below.
				case "leader":
					// A's release says "r": Watch may look before B takes
					// the key (then A ended "released", the key free).
				case "hold-min", "hold-min-then-forced":
					// A releases with a hold of 100ms (Watch hears "h"
					// and sees the hold start); it runs out.
					if r := adv71Chain(t, admin, key, adv71Step{id: a, a7: "1", hold: 100}); r[0] != 2 {
						t.Fatalf("hold-min release answered %d", r[0])
					}
					w.next(lease.ChangeHoldStarted, key)
					if !waitFor(5*time.Second, func() bool { return admin.Exists(ctx, k[0]).Val() == 0 }) {
						t.Fatal("the hold did not run out")
					}
					want = []string{"hold ran out"}
				case "ttl", "ttl-then-forced":
					if !waitFor(5*time.Second, func() bool { return admin.Exists(ctx, k[0]).Val() == 0 }) {
						t.Fatal("A's lease did not run out")
					}
					want = []string{"expired", ""}
				}
				// Before Watch looks (with an hour's interval it looks only
				// on a message): A's own release, if any, B's fresh grant,
				// C queued, B's handover to C (a message naming C).
				if _, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
					switch how {
					case "own", "leader":
						a7 := "1"
						if how == "leader" {
							a7 = "l"
						}
						lease.ReleaseScript.EvalSha(ctx, p, k, adv71Args(adv71Step{id: a, a7: a7})...)
					}
					p.Set(ctx, k[0], b+":0", 30*time.Second)
					if forced {
						// ForceRelease of B, nobody waiting: the release
						// script ("x"), then "x" on the key's channel.
						lease.ReleaseScript.EvalSha(ctx, p, adv71Keys(key, b), adv71Args(adv71Step{id: b, a7: "x"})...)
						p.Publish(ctx, k[1], "x")
						return nil
					}
					now := time.Now().UnixMilli()
					m := adv71Member(c, false)
					p.ZAdd(ctx, k[4], redis.Z{Score: float64(now * 1000), Member: m})
					p.HSet(ctx, k[5], m, fmt.Sprintf("%d:1", now+60000))
					lease.ReleaseScript.EvalSha(ctx, p, adv71Keys(key, b), adv71Args(adv71Step{id: b, a7: "1"})...)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if v := admin.Get(ctx, k[0]).Val(); !forced && v != c+":0" || forced && v != "" {
					t.Fatalf("lock %q, want C's (free after a ForceRelease of B)", v)
				}
				ch := w.next(lease.ChangeEnded, key)
				if ch.Info.Holder != a || !slices.Contains(want, ch.How) {
					t.Errorf("A (tombstone %q) ended %q, want one of %q: the handover was B's", admin.Get(ctx, k[2]).Val(), ch.How, want)
				}
			})
		}
	}
}
