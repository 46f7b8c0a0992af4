package lease_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// quickrelease.lua may act only where release.lua would do exactly the
// same, and must change nothing anywhere else (the caller then sends
// release.lua). Over every combination of the lock's value, the queue,
// the identity's tombstone and the caller's queue member, a release by
// quickrelease.lua (then release.lua if it answered -9) leaves the same
// keys, values and expiries and answers the same as release.lua alone.
func TestReleaseQuickMatchesFull(t *testing.T) {
	rdb := shared.Client(t)
	ctx := context.Background()
	const me, other = "qm-me", "qm-other"
	mine := me + "|10000|0|1100|inbox-me"
	theirs := other + "|10000|1|1100|inbox-other"
	locks := map[string]func(l string){
		"absent":    func(string) {},
		"mine":      func(l string) { rdb.Set(ctx, l, me+":0", 0).Err() },
		"mine-tok":  func(l string) { rdb.Set(ctx, l, me+":1234567", 0).Err() },
		"other":     func(l string) { rdb.Set(ctx, l, other+":0", 0).Err() },
		"hold-mine": func(l string) { rdb.Set(ctx, l, "~"+me+":0", 0).Err() },
		"no-colon":  func(l string) { rdb.Set(ctx, l, me, 0).Err() },
		"wrongtype": func(l string) { rdb.HSet(ctx, l, "f", "v").Err() },
	}
	queues := map[string]func(q, qx string){
		"absent": func(string, string) {},
		"theirs": func(q, qx string) {
			rdb.ZAdd(ctx, q, redis.Z{Score: 1, Member: theirs})
			rdb.HSet(ctx, qx, theirs, "99999999999999")
		},
		"mine": func(q, qx string) {
			rdb.ZAdd(ctx, q, redis.Z{Score: 1, Member: mine})
			rdb.HSet(ctx, qx, mine, "99999999999999")
		},
		"wrongtype": func(q, _ string) { rdb.Set(ctx, q, "x", 0) },
	}
	tombs := []string{"", "1", "x", "h"}
	members := []string{"", mine}
	n := 0
	for _, ln := range slices.Sorted(maps.Keys(locks)) {
		for _, qn := range slices.Sorted(maps.Keys(queues)) {
			for _, tomb := range tombs {
				for _, member := range members {
					n++
					name := fmt.Sprintf("lock=%s queue=%s tomb=%q member=%v", ln, qn, tomb, member != "")
					var answers [2]string
					var snaps [2]map[string]string
					for i, quick := range []bool{false, true} {
						tag := fmt.Sprintf("qm%d-%d", n, i)
						k := quickKeys(tag, me)
						locks[ln](k[0])
						queues[qn](k[4], k[5])
						if tomb != "" {
							rdb.Set(ctx, k[2], tomb, 0)
						}
						var res int64
						var err error
						ran := "full"
						if quick {
							before := snapshot(t, rdb, tag)
							res, err = lease.QuickReleaseScript.Run(ctx, rdb, []string{k[0], k[2], k[4]}, me, "5000").Int64()
							ran = "quick"
							switch {
							case err != nil:
							case res == -9:
								// Nothing changed: release.lua decides.
								if after := snapshot(t, rdb, tag); !maps.Equal(before, after) {
									t.Errorf("%s: quickrelease answered -9 but changed\n%v\ninto\n%v", name, before, after)
								}
							case res != 1:
								t.Errorf("%s: quickrelease answered %d (1 or -9 only)", name, res)
							}
						}
						if !quick || err == nil && res == -9 {
							res, err = lease.ReleaseScript.Run(ctx, rdb, k, me, "0", "PUBLISH", "5000", "60000", member, "1").Int64()
						}
						answers[i] = fmt.Sprint(res)
						if err != nil {
							var rerr redis.Error
							if !errors.As(err, &rerr) {
								t.Fatalf("%s: %s: %v", name, ran, err)
							}
							answers[i] = "error"
						}
						snaps[i] = snapshot(t, rdb, tag)
					}
					if answers[0] != answers[1] {
						t.Errorf("%s: release.lua answered %s, quick then full %s", name, answers[0], answers[1])
					}
					if !maps.Equal(snaps[0], snaps[1]) {
						t.Errorf("%s: after release.lua\n%v\nafter quick then full\n%v", name, snaps[0], snaps[1])
					}
				}
			}
		}
	}
	t.Logf("%d states", n)
}

// quickKeys are a lease's six keys (release.lua's order: lock, channel,
// tombstone of id, fence counter, queue, queue expiries) under tag.
func quickKeys(tag, id string) []string {
	b := "lease:{" + tag + "}"
	return []string{b + ":l", b + ":c", b + ":r:" + id, b + ":f", b + ":q", b + ":x"}
}

var timeTok = regexp.MustCompile(`\d{16}`)

// snapshot is every key under tag: its type, value and whether it
// expires, with the tag taken out of the names and time tokens out of
// the values.
func snapshot(t *testing.T, rdb *redis.Client, tag string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range rdb.Keys(ctx, "lease:{"+tag+"}*").Val() {
		var v any
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "string":
			v = rdb.Get(ctx, k).Val()
		case "zset":
			v = rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "hash":
			v = rdb.HGetAll(ctx, k).Val()
		default:
			v = typ
		}
		// A fenced handover's token is the server's time in µs: told
		// apart from a counter's by its length only.
		out[strings.Replace(k, tag, "T", 1)] = timeTok.ReplaceAllString(fmt.Sprintf("%v expires=%v", v, rdb.PTTL(ctx, k).Val() > 0), "<µs>")
	}
	return out
}

// A user whose ACL lacks EXISTS (quickrelease.lua's only command that
// release.lua does not run) still releases: quickrelease.lua answers -9
// and release.lua releases. So does a holder whose key has a waiter
// queued: release.lua hands it over, and the waiter enters at once.
func TestQuickReleaseFallsBackToFull(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	t.Run("no exists", func(t *testing.T) {
		c, rec := newClient(t, aclClient(t, srv, "noexists", without(leastPrivilege, "+exists")...))
		key := uniqueKey(t)
		if err := c.Do(ctx, key, spec(10*time.Second, 20*time.Second), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Error("the key is still held after the release")
		}
		if rec.Count(lease.EventReleased) != 1 || rec.Count(lease.EventReleaseUnconfirmed) != 0 {
			t.Errorf("released %d, unconfirmed %d; want 1, 0", rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed))
		}
	})
	t.Run("waiter queued", func(t *testing.T) {
		holder, hrec := newClient(t, srv.Client(t))
		waiter, _ := newClient(t, srv.Client(t))
		key := uniqueKey(t)
		release := make(chan struct{})
		held := hold(t, holder, key, spec(30*time.Second, 60*time.Second), release)
		sentAt := make(chan time.Time, 1)
		go func() {
			// Once the waiter is queued.
			for admin.Exists(ctx, "lease:{"+key+"}:q").Val() == 0 {
				time.Sleep(time.Millisecond)
			}
			sentAt <- time.Now()
			close(release)
		}()
		err := waiter.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second}, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(<-sentAt); took > 500*time.Millisecond {
			t.Errorf("the waiter entered %v after the release was sent", took)
		}
		if err := <-held; err != nil || hrec.Count(lease.EventReleased) != 1 {
			t.Errorf("holder: %v, released %d", err, hrec.Count(lease.EventReleased))
		}
	})
}
