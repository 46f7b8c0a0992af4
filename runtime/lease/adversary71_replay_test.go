package lease_test

// Round 71: a replay of a release (go-redis re-sends a script whose reply
// was lost) after the handover's mark (commit 706b129), run directly with
// the same arguments: for every kind of release, as the admin, as the
// README's least-privilege user and as one without the channels, below
// and at maxmemory, and with the key moved on between the first run and
// the replay (the new holder released it, a third holds it, the new
// holder set a hold-min, or was forced out to a third).

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

const (
	adv71A = "a71a71a71a71a71a71a71a71a71a71a7" // the releaser
	adv71B = "b71b71b71b71b71b71b71b71b71b71b7" // the waiter
	adv71C = "c71c71c71c71c71c71c71c71c71c71c7" // a third
)

// adv71Norm is the value of a script answer less a refused message's +10.
func adv71Norm(n int64) int64 {
	if n >= 10 {
		return n - 10
	}
	return n
}

// TestAdversary71_ReplayMatrix: the first run of each kind of release
// answers as intended and leaves the intended tombstone ("1>"/"l>" after
// a handover only, "x" for a forced one, "h" a hold-min's), with the
// tombstone's PX (a forced one's: the lock's remaining TTL more); a
// replay with the same arguments answers as the first run (less +10) and
// writes nothing, whatever happened to the key in between. One
// exception, older than the mark and harmless (a giving-up waiter's
// answer is not read, see giveUp): a waiter's give-up replayed after the
// key was released answers "not held" (0) instead of "held by another"
// (-1); it is asserted as such.
func TestAdversary71_ReplayMatrix(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	users := map[string]*redis.Client{
		"admin": admin,
		"least": aclClient(t, srv, "least71", leastPrivilege...),
		"mute":  aclClient(t, srv, "mute71r", without(leastPrivilege, "&lease:*")...),
	}
	ctx := context.Background()
	adv71Load(t, admin)
	oom := maxmemoryFull(t, admin)
	// A subscriber on the subscribed waiter's inbox: it gets the full TTL.
	const subInbox = "lease:{%probe-adv71sub}:c"
	sub := srv.Client(t).Subscribe(ctx, subInbox)
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })

	key := "adv71replay"
	k := adv71Keys(key, adv71A)
	member := func(id, fence, inbox string) string { return id + "|30000|" + fence + "|5000|" + inbox }
	mB := member(adv71B, "0", "lease:{%probe-adv71b}:c")
	mBf := member(adv71B, "1", "lease:{%probe-adv71b}:c")
	mBs := member(adv71B, "0", subInbox)
	mA := member(adv71A, "0", "lease:{%probe-adv71a}:c")
	mC := member(adv71C, "0", "lease:{%probe-adv71c}:c")
	type kind struct {
		name   string
		lock   string   // the lock's value before ("" free)
		queue  []string // members, live ("-" prefix: dead)
		hold   int
		mem    string // the caller's member
		a7     string
		res    int64  // the first run's answer (less +10)
		tomb   string // A's tombstone after ("" none)
		holder string // the lock's identity after ("" free)
		ctr    string // the fence counter before ("" none)
	}
	kinds := []kind{
		{name: "own-handover", lock: adv71A + ":0", queue: []string{mB}, a7: "1", res: 1, tomb: "1>", holder: adv71B},
		{name: "own-handover-subscribed", lock: adv71A + ":0", queue: []string{mBs}, a7: "1", res: 1, tomb: "1>", holder: adv71B},
		{name: "own-handover-fenced", lock: adv71A + ":7", queue: []string{mBf}, a7: "1", res: 1, tomb: "1>", holder: adv71B, ctr: "7"},
		{name: "leader-handover", lock: adv71A + ":7", queue: []string{mBf}, a7: "l", res: 1, tomb: "l>", holder: adv71B, ctr: "7"},
		{name: "forced-handover", lock: adv71A + ":0", queue: []string{mB}, a7: "x", res: 1, tomb: "x", holder: adv71B},
		{name: "own-free", lock: adv71A + ":0", a7: "1", res: 1, tomb: "1"},
		{name: "leader-free", lock: adv71A + ":0", a7: "l", res: 1, tomb: "l"},
		{name: "forced-free", lock: adv71A + ":0", a7: "x", res: 1, tomb: "x"},
		{name: "own-dead-only", lock: adv71A + ":0", queue: []string{"-" + mB}, a7: "1", res: 1, tomb: "1"},
		{name: "own-self-only", lock: adv71A + ":0", queue: []string{mA}, a7: "1", res: 1, tomb: "1"},
		{name: "own-dead-then-live", lock: adv71A + ":0", queue: []string{"-" + mC, mB}, a7: "1", res: 1, tomb: "1>", holder: adv71B},
		{name: "own-fence-refused", lock: adv71A + ":0", queue: []string{mBf}, a7: "1", res: 1, tomb: "1", ctr: "9223372036854775807"},
		{name: "holdmin", lock: adv71A + ":0", queue: []string{mB}, hold: 5000, a7: "1", res: 2, tomb: "h", holder: adv71A},
		{name: "holdmin-leader", lock: adv71A + ":0", queue: []string{mB}, hold: 5000, a7: "l", res: 2, tomb: "h", holder: adv71A},
		{name: "giveup-waiting", lock: adv71B + ":0", queue: []string{mA}, mem: mA, a7: "1", res: -1, holder: adv71B},
		{name: "giveup-claimed", lock: adv71A + ":0", queue: []string{mB}, mem: mA, a7: "1", res: 1, tomb: "1>", holder: adv71B},
		{name: "giveup-claimed-still-queued", lock: adv71A + ":0", queue: []string{mA, mB}, mem: mA, a7: "1", res: 1, tomb: "1>", holder: adv71B},
		{name: "giveup-claimed-alone", lock: adv71A + ":0", queue: []string{mA}, mem: mA, a7: "1", res: 1, tomb: "1"},
	}
	// What happens to the key between the first run and the replay (as
	// the admin, below maxmemory).
	moves := []string{"none", "released", "third", "holdmin", "forced"}
	move := func(m string) {
		cur := admin.Get(ctx, k[0]).Val()
		id, _, _ := strings.Cut(strings.TrimPrefix(cur, "~"), ":")
		switch m {
		case "released":
			if id != "" {
				admin.Del(ctx, k[0], k[4], k[5])
			}
		case "third":
			admin.Set(ctx, k[0], adv71C+":0", 20*time.Second)
		case "holdmin":
			if id != "" && !strings.HasPrefix(cur, "~") {
				if _, err := lease.ReleaseScript.EvalSha(ctx, admin, adv71Keys(key, id), id, 4000, "PUBLISH", 60000, 600000, "", "1").Result(); err != nil {
					t.Fatal(err)
				}
			}
		case "forced":
			if id != "" && !strings.HasPrefix(cur, "~") {
				adv71Queue(t, admin, key, mC)
				if _, err := lease.ReleaseScript.EvalSha(ctx, admin, adv71Keys(key, id), id, 0, "PUBLISH", 60000, 600000, "", "x").Result(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	runs, bad := 0, 0
	for _, kd := range kinds {
		for _, user := range []string{"admin", "least", "mute"} {
			for _, atMax := range []bool{false, true} {
				for _, mv := range moves {
					name := fmt.Sprintf("%s/%s/maxmemory=%v/then=%s", kd.name, user, atMax, mv)
					rdb := users[user]
					oom(false)
					if err := admin.FlushAll(ctx).Err(); err != nil {
						t.Fatal(err)
					}
					if kd.lock != "" {
						admin.Set(ctx, k[0], kd.lock, 20*time.Second)
					}
					if kd.ctr != "" {
						admin.Set(ctx, k[3], kd.ctr, time.Hour)
					}
					now := time.Now().UnixMilli()
					for i, m := range kd.queue {
						exp := now + 60000
						if strings.HasPrefix(m, "-") {
							m, exp = m[1:], now-1000
						}
						admin.ZAdd(ctx, k[4], redis.Z{Score: float64(i + 1), Member: m})
						admin.HSet(ctx, k[5], m, fmt.Sprintf("%d:%d", exp, i+1))
					}
					argv := []any{adv71A, kd.hold, "PUBLISH", 60000, 600000, kd.mem, kd.a7}
					oom(atMax)
					first, err := lease.ReleaseScript.EvalSha(ctx, rdb, k, argv...).Int64()
					oom(false)
					runs++
					fail := func(f string, a ...any) {
						bad++
						if bad <= 20 {
							t.Errorf(name+": "+f, a...)
						}
					}
					if err != nil {
						fail("first run: %v", err)
						continue
					}
					if adv71Norm(first) != kd.res {
						fail("first run answered %d, want %d", first, kd.res)
					}
					tomb := admin.Get(ctx, k[2]).Val()
					if tomb != kd.tomb {
						fail("tombstone %q, want %q", tomb, kd.tomb)
					}
					if tomb != "" {
						lo, hi := 55*time.Second, 60*time.Second
						if kd.a7 == "x" { // the lock's remaining TTL (20s) more
							lo, hi = 75*time.Second, 80*time.Second
						}
						if p := admin.PTTL(ctx, k[2]).Val(); p < lo || p > hi {
							fail("tombstone %q PTTL %v, want within [%v, %v]", tomb, p, lo, hi)
						}
					}
					v := admin.Get(ctx, k[0]).Val()
					if id, _, _ := strings.Cut(strings.TrimPrefix(v, "~"), ":"); id != kd.holder {
						fail("lock %q, want %q's", v, kd.holder)
					}
					move(mv)
					before := adv40Dump(t, admin)
					oom(atMax)
					again, err := lease.ReleaseScript.EvalSha(ctx, rdb, k, argv...).Int64()
					oom(false)
					after := adv40Dump(t, admin)
					if err != nil {
						fail("replay: %v", err)
						continue
					}
					want := kd.res
					if kd.name == "giveup-waiting" && (mv == "released") {
						want = 0 // older than the mark: see the test's comment
					}
					if again != want {
						fail("replay answered %d, first %d, want %d", again, first, want)
					}
					if !slices.Equal(before, after) {
						fail("the replay wrote:\n before %q\n after  %q", before, after)
					}
				}
			}
		}
	}
	t.Logf("%d first runs and replays, %d bad", runs, bad)
}
