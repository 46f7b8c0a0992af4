package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 41: adversary on 4198a70 (the handover passes over the releasing
// identity's entry; takeTok reads only digits and refuses past 2^63 - 1).
// Failing on 4198a70 (bugs, kept failing):
//   - TestAdversary41_ForcedHolderGetsKeyBackBeforeItLooks: the forced-out
//     holder's brought-back entry behind a live waiter W survives the
//     ForceRelease; W's release hands the key back to it, and the holder
//     (renewals compare the identity only) is never told.
//   - TestAdversary41_RefusedHandoverKeepsWaiter: a handover refused (counter
//     at 2^63 - 1) still takes the fenced waiter's queue entry out; each
//     retry eats one more.
//   - TestAdversary41_RefusedHandoverEndToEnd: the holder's Do returns nil,
//     its key stays held for its whole TTL, an unfenced waiter behind waits
//     that long.
//   - TestAdversary41_LapsedHolderGetsKeyBackBeforeItLooks: the same as the
//     first without a ForceRelease (a lapsed holder's brought-back entry);
//     not touched by 4198a70.

const (
	adv41Me = "a1b2c3d4a1b2c3d4a1b2c3d4a1b2c3d4"
	adv41W1 = "e5f6a7b8e5f6a7b8e5f6a7b8e5f6a7b8"
	adv41W2 = "0123456789abcdef0123456789abcdef"
)

func adv41RelKeys(tag string) []string {
	p := "lease:{" + tag + "}:"
	return []string{p + "l", p + "c", p + "r:" + adv41Me, p + "f", p + "q", p + "x"}
}

func adv41Queue(t *testing.T, rdb *redis.Client, keys []string, members ...string) {
	t.Helper()
	ctx := context.Background()
	for i, m := range members {
		rdb.ZAdd(ctx, keys[4], redis.Z{Score: float64(i + 1), Member: m})
		rdb.HSet(ctx, keys[5], m, fmt.Sprintf("%d:3", time.Now().UnixMilli()+60000))
	}
}

// adv41Next is the decimal counter's value + 1 (nil: not decimal digits).
func adv41Next(cs string) *big.Int {
	if cs == "" || strings.Trim(cs, "0123456789") != "" {
		return nil
	}
	n, _ := new(big.Int).SetString(cs, 10)
	return n.Add(n, big.NewInt(1))
}

func adv41Counters(now int64) []string {
	ahead := strconv.FormatInt(now+3_600_000_000, 10)
	return []string{
		"", "0", "000", "+5", "5 ", " 7", "0x10", "1.5", "1e3", "-0", "٣",
		"9007199254740989", "9007199254740990", "9007199254740991", "9007199254740992", "9007199254740993",
		"0009007199254740991", "000" + ahead, ahead, "0" + strconv.FormatInt(now-1, 10),
		"99999999999999999", "999999999999999999", "9223372036854775805", "9223372036854775806",
		"09223372036854775806", "9223372036854775807", "00000009223372036854775807",
		"9223372036854775808", "18446744073709551615", strings.Repeat("9", 400),
		strings.Repeat("0", 30) + "12",
	}
}

// TestAdversary41_TakeTokCounterStrings: the fenced grant and the fenced
// handover (with and without SET ... GET) over counter strings at every
// boundary: a digit counter gives counter + 1 when at or past the clock,
// the time floor otherwise; anything else gives the time floor; a token
// that would pass 2^63 - 1 refuses (no lock, the counter unchanged, a
// handover leaving the key the holder's). Every token given parses as
// int64, is the lock's and the counter's, and the counter never goes down.
func TestAdversary41_TakeTokCounterStrings(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	acq, rel := tokScripts(t)
	maxI := new(big.Int).SetInt64(1<<63 - 1)
	refused := func(cs string) bool {
		next := adv41Next(cs)
		return next != nil && next.Cmp(maxI) > 0
	}
	check := func(name, cs string, before, after int64, tok string, err error, lock, owner, ctr string) {
		t.Helper()
		next := adv41Next(cs)
		if refused(cs) {
			if err == nil || !strings.Contains(err.Error(), "2^63") || ctr != cs {
				t.Errorf("%s %q: %q %v, counter %q; want refused, counter unchanged", name, cs, tok, err, ctr)
			}
			return
		}
		if err != nil {
			t.Errorf("%s %q: %v", name, cs, err)
			return
		}
		n, perr := strconv.ParseInt(tok, 10, 64)
		if perr != nil {
			t.Errorf("%s %q: token %q not an int64", name, cs, tok)
			return
		}
		if n < before-1000 {
			t.Errorf("%s %q: token %d below the time floor %d", name, cs, n, before)
		}
		if next != nil && big.NewInt(n).Cmp(next) < 0 {
			t.Errorf("%s %q: token %d not above the counter", name, cs, n)
		}
		if next != nil && next.Cmp(big.NewInt(after+1000)) <= 0 && n > after+1000 {
			t.Errorf("%s %q: token %d above the time with the counter behind", name, cs, n)
		}
		if lock != owner+":"+tok || ctr != tok {
			t.Errorf("%s %q: token %s, lock %q, counter %q", name, cs, tok, lock, ctr)
		}
	}
	for which := range acq {
		for _, cs := range adv41Counters(time.Now().UnixMicro()) {
			// The grant.
			keys := []string{"lease:{t}:l", "lease:{t}:f", "lease:{t}:q", "lease:{t}:x"}
			rdb.Del(ctx, keys...)
			if cs != "" {
				rdb.Set(ctx, keys[1], cs, time.Hour)
			}
			before := time.Now().UnixMicro()
			res, err := acq[which].Run(ctx, rdb, keys, adv41Me, 10000, "1", 600000, 0, "", "lease:{t}:c", 1).Result()
			after := time.Now().UnixMicro()
			name := fmt.Sprintf("grant/pre62=%v", which == 1)
			check(name, cs, before, after, fmt.Sprint(res), err, rdb.Get(ctx, keys[0]).Val(), adv41Me, rdb.Get(ctx, keys[1]).Val())
			if err != nil && rdb.Exists(ctx, keys[0]).Val() != 0 {
				t.Errorf("%s %q: a refused grant left the lock %q", name, cs, rdb.Get(ctx, keys[0]).Val())
			}
			if err != nil {
				// A replay of the refused grant: refused the same way.
				_, err2 := acq[which].Run(ctx, rdb, keys, adv41Me, 10000, "1", 600000, 0, "", "lease:{t}:c", 1).Result()
				if err2 == nil || rdb.Get(ctx, keys[1]).Val() != cs || rdb.Exists(ctx, keys[0]).Val() != 0 {
					t.Errorf("%s %q: replay of a refused grant: %v, counter %q", name, cs, err2, rdb.Get(ctx, keys[1]).Val())
				}
			}
			// The handover.
			rk := adv41RelKeys("t")
			rdb.Del(ctx, rk...)
			rdb.Set(ctx, rk[0], adv41Me+":5", 10*time.Second)
			if cs != "" {
				rdb.Set(ctx, rk[3], cs, time.Hour)
			}
			adv41Queue(t, rdb, rk, adv41W1+"|30000|1|2000|inbox:t")
			before = time.Now().UnixMicro()
			_, err = rel[which].Run(ctx, rdb, rk, adv41Me, 0, "PUBLISH", 60000, 600000, "", "1").Result()
			after = time.Now().UnixMicro()
			name = fmt.Sprintf("handover/pre62=%v", which == 1)
			v := rdb.Get(ctx, rk[0]).Val()
			if refused(cs) {
				// No token to give: the fenced waiter is passed over and
				// the release goes on (nobody else queued: the key is
				// deleted); the counter as it was.
				if err != nil || v != "" || rdb.Get(ctx, rk[3]).Val() != cs || rdb.ZCard(ctx, rk[4]).Val() != 0 {
					t.Errorf("%s %q: release %v, lock %q, counter %q, %d queued; want released, no lock, the counter as it was, the waiter passed over", name, cs, err, v, rdb.Get(ctx, rk[3]).Val(), rdb.ZCard(ctx, rk[4]).Val())
				}
				continue
			}
			tok, _ := strings.CutPrefix(v, adv41W1+":")
			check(name, cs, before, after, tok, err, v, adv41W1, rdb.Get(ctx, rk[3]).Val())
		}
	}
}

// TestAdversary41_RefusedHandoverPassesOver: a fenced waiter that cannot
// be given a token (the counter at 2^63 - 1, set from outside) is passed
// over as a dead one is. Round 41 found that 4198a70's release answered
// an error instead (ErrRefused to the holder: "nothing happened"), yet had
// taken the fenced waiter's entry out, left the key the holder's for its
// TTL and kept an unfenced waiter behind it, which needs no token, waiting.
// Now the unfenced waiter gets the key; the counter is left as it was; the
// fenced waiter's own acquire is refused with the reason.
func TestAdversary41_RefusedHandoverPassesOver(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	_, rel := tokScripts(t)
	for which, s := range rel {
		name := fmt.Sprintf("pre62=%v", which == 1)
		rk := adv41RelKeys("t")
		rdb.Del(ctx, rk...)
		rdb.Set(ctx, rk[0], adv41Me+":5", 10*time.Second)
		rdb.Set(ctx, rk[3], "9223372036854775807", time.Hour)
		m1 := adv41W1 + "|30000|1|2000|inbox:t"
		m2 := adv41W2 + "|30000|0|2000|inbox:t"
		adv41Queue(t, rdb, rk, m1, m2)
		res, err := s.Run(ctx, rdb, rk, adv41Me, 0, "PUBLISH", 60000, 600000, "", "1").Result()
		if err != nil || fmt.Sprint(res) != "1" {
			t.Errorf("%s: release = %v %v, want released (1)", name, res, err)
		}
		if v := rdb.Get(ctx, rk[0]).Val(); v != adv41W2+":0" {
			t.Errorf("%s: lock %q, want the unfenced waiter's", name, v)
		}
		if c := rdb.Get(ctx, rk[3]).Val(); c != "9223372036854775807" {
			t.Errorf("%s: counter %q, want it as it was", name, c)
		}
		if n := rdb.ZCard(ctx, rk[4]).Val(); n != 0 {
			t.Errorf("%s: %d entries left queued", name, n)
		}
	}
}

// TestAdversary41_IdentitySkip: a release (own or forced) with the
// releasing identity's entries anywhere in the queue (head, behind a dead
// entry, several of them, fenced and not) hands the key to the first live
// entry of another identity, with the right token, and never to the
// releaser; identities that only share a prefix with the releaser's (a
// leader's hex/owner against hex) are served as before.
func TestAdversary41_IdentitySkip(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	_, rel := tokScripts(t)
	own := func(f string) string { return adv41Me + "|30000|" + f + "|2000|inbox:t" }
	w1 := adv41W1 + "|30000|1|2000|inbox:t"
	pre := adv41Me[:31] + "|30000|0|2000|inbox:t" // a prefix of the releaser's identity
	cases := []struct {
		name  string
		queue []string
		dead  map[int]bool
		want  string // identity that must get the key ("" deleted)
	}{
		{"own at head", []string{own("0"), w1}, nil, adv41W1},
		{"own fenced at head", []string{own("1"), w1}, nil, adv41W1},
		{"own only", []string{own("1")}, nil, ""},
		{"dead then own then w1", []string{"deadbeefdeadbeefdeadbeefdeadbeef|30000|0|2000|inbox:t", own("0"), w1}, map[int]bool{0: true}, adv41W1},
		{"own twice then w1", []string{own("0"), own("1"), w1}, nil, adv41W1},
		{"prefix identity", []string{own("0"), pre}, nil, adv41Me[:31]},
		{"w1 then own", []string{w1, own("0")}, nil, adv41W1},
	}
	for which, s := range rel {
		for _, tomb := range []string{"1", "x", "l"} {
			for _, c := range cases {
				name := fmt.Sprintf("%s/tomb=%s/pre62=%v", c.name, tomb, which == 1)
				rk := adv41RelKeys("t")
				rdb.Del(ctx, rk...)
				rdb.Set(ctx, rk[0], adv41Me+":5", 10*time.Second)
				rdb.Set(ctx, rk[3], "7", time.Hour)
				adv41Queue(t, rdb, rk, c.queue...)
				for i := range c.dead {
					rdb.HSet(ctx, rk[5], c.queue[i], "1:1")
				}
				res, err := s.Run(ctx, rdb, rk, adv41Me, 0, "PUBLISH", 60000, 600000, "", tomb).Result()
				v := rdb.Get(ctx, rk[0]).Val()
				if err != nil || fmt.Sprint(res) != "1" {
					t.Errorf("%s: %v %v", name, res, err)
				}
				if c.want == "" {
					if v != "" {
						t.Errorf("%s: lock %q, want deleted", name, v)
					}
				} else if !strings.HasPrefix(v, c.want+":") {
					t.Errorf("%s: lock %q, want %s's", name, v, c.want)
				}
				for _, m := range rdb.ZRange(ctx, rk[4], 0, -1).Val() {
					if strings.HasPrefix(m, adv41Me+"|") && c.name != "w1 then own" {
						t.Errorf("%s: the releaser's entry %q still queued", name, m)
					}
				}
				// A handover marks the tombstone (TestWatchTellsHandoverWithoutItsMessage),
				// a forced one's stays "x".
				wantTomb := tomb
				if c.want != "" && tomb != "x" {
					wantTomb += ">"
				}
				if tb := rdb.Get(ctx, rk[2]).Val(); tb != wantTomb {
					t.Errorf("%s: tombstone %q, want %q", name, tb, wantTomb)
				}
				// A replay: answers as the first run, writes nothing.
				b := adv40Dump(t, rdb)
				res2, err2 := s.Run(ctx, rdb, rk, adv41Me, 0, "PUBLISH", 60000, 600000, "", tomb).Result()
				if a := adv40Dump(t, rdb); fmt.Sprint(a) != fmt.Sprint(b) || fmt.Sprint(res2) != fmt.Sprint(res) || (err2 == nil) != (err == nil) {
					t.Errorf("%s: replay %v %v (first %v): before %q after %q", name, res2, err2, res, b, a)
				}
			}
		}
	}
}

// TestAdversary41_ForcedHolderEntryBehindWaiter: as
// TestAdversary40_ForceReleaseHandsBackToHolder, but the holder's entry
// that Redis brought back (the holder had waited: its real member, with
// its Client's inbox) is not at the head: a live waiter W queued before
// it. The ForceRelease hands the key to W and leaves the holder's entry
// queued; the forced-out holder's call ends (ErrLost). When W releases,
// the key must not go back to the identity the ForceRelease forced out
// (a finished call: nobody confirms it, its Client's inbox is subscribed,
// so it would get the full TTL).
func TestAdversary41_ForcedHolderEntryBehindWaiter(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	bc, _ := newClient(t, srv.Client(t))
	hc, _ := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	fc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	rel := make(chan struct{})
	bdone := hold(t, bc, key, lease.Spec{TTL: 10 * time.Second, Deadline: 10 * time.Second}, rel)
	owner := make(chan string, 1)
	stop := make(chan struct{})
	hdone := make(chan error, 1)
	go func() {
		hdone <- hc.Do(ctx, key, lease.Spec{TTL: 3 * time.Second, Wait: 5 * time.Second, Deadline: 10 * time.Second}, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			owner <- l.Owner()
			select {
			case <-stop:
			case <-fctx.Done():
			}
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 1)
	hm := admin.ZRange(ctx, base+":q", 0, 0).Val()[0]
	close(rel)
	<-bdone
	id := <-owner
	if !strings.HasPrefix(hm, id+"|") {
		t.Fatalf("queued member %q is not the holder's %q", hm, id)
	}
	// Redis brings back the holder's entry, behind a live waiter W.
	w := adv41W1 + "|3000|0|3000|inbox:nobody"
	now := time.Now().UnixMilli()
	admin.ZAdd(ctx, base+":q", redis.Z{Score: 1, Member: w}, redis.Z{Score: 2, Member: hm})
	admin.HSet(ctx, base+":x", w, fmt.Sprintf("%d:1", now+60000), hm, fmt.Sprintf("%d:1", now+60000))
	res, err := fc.ForceRelease(ctx, key, id)
	t.Logf("ForceRelease = %v, %v; key %q; queue %q", res, err, admin.Get(ctx, lockKey(key)).Val(), admin.ZRange(ctx, base+":q", 0, -1).Val())
	var herr error
	select {
	case herr = <-hdone:
	case <-time.After(4 * time.Second):
		close(stop)
		herr = <-hdone
	}
	time.Sleep(200 * time.Millisecond)
	q := admin.ZRange(ctx, base+":q", 0, -1).Val()
	t.Logf("holder's Do = %v; queue after it %q", herr, q)
	if !errors.Is(herr, lease.ErrLost) {
		t.Errorf("the forced-out holder's Do = %v, want ErrLost", herr)
	}
	// W releases (its own release, with its member).
	_, rs := tokScripts(t)
	rk := []string{lockKey(key), base + ":c", base + ":r:" + adv41W1, base + ":f", base + ":q", base + ":x"}
	r, err := rs[0].Run(ctx, admin, rk, adv41W1, 0, "PUBLISH", 60000, 600000, w, "1").Result()
	v := admin.Get(ctx, lockKey(key)).Val()
	t.Logf("W's release = %v %v; key %q for %v", r, err, v, admin.PTTL(ctx, lockKey(key)).Val())
	if strings.HasPrefix(v, id+":") {
		t.Errorf("W's release handed the key back to the identity the ForceRelease forced out (its call ended: %v): %q for %v", herr, v, admin.PTTL(ctx, lockKey(key)).Val())
	}
}

// TestAdversary41_ForcedHolderGetsKeyBackBeforeItLooks: the sequence of
// TestAdversary41_ForcedHolderEntryBehindWaiter, but W (handed the key by
// the ForceRelease) releases at once, before the forced-out holder's next
// renewal looks at the key: W's handover takes the holder's brought-back
// entry and gives the key to the identity the ForceRelease forced out.
// The holder's renewals (which compare the identity only) then find the
// key its own again: it is never told it lost the lease, though W held
// it in between. Claim: the key is never handed back to the identity that
// gives it up, and the holder forced out learns it lost the lease.
func TestAdversary41_ForcedHolderGetsKeyBackBeforeItLooks(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	bc, _ := newClient(t, srv.Client(t))
	hc, _ := newClient(t, srv.Client(t))
	fc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	rel := make(chan struct{})
	bdone := hold(t, bc, key, lease.Spec{TTL: 10 * time.Second, Deadline: 10 * time.Second}, rel)
	owner := make(chan string, 1)
	stop := make(chan struct{})
	hdone := make(chan error, 1)
	var lostAt time.Time
	go func() {
		hdone <- hc.Do(ctx, key, lease.Spec{TTL: 3 * time.Second, Wait: 5 * time.Second, Deadline: 20 * time.Second}, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			owner <- l.Owner()
			select {
			case <-stop:
			case <-fctx.Done():
				lostAt = time.Now()
			}
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 1)
	hm := admin.ZRange(ctx, base+":q", 0, 0).Val()[0]
	close(rel)
	<-bdone
	id := <-owner
	w := adv41W1 + "|3000|0|3000|inbox:nobody"
	now := time.Now().UnixMilli()
	admin.ZAdd(ctx, base+":q", redis.Z{Score: 1, Member: w}, redis.Z{Score: 2, Member: hm})
	admin.HSet(ctx, base+":x", w, fmt.Sprintf("%d:1", now+60000), hm, fmt.Sprintf("%d:1", now+60000))
	res, err := fc.ForceRelease(ctx, key, id)
	afterForce := admin.Get(ctx, lockKey(key)).Val()
	_, rs := tokScripts(t)
	rk := []string{lockKey(key), base + ":c", base + ":r:" + adv41W1, base + ":f", base + ":q", base + ":x"}
	r, rerr := rs[0].Run(ctx, admin, rk, adv41W1, 0, "PUBLISH", 60000, 600000, w, "1").Result()
	afterW := admin.Get(ctx, lockKey(key)).Val()
	t.Logf("ForceRelease = %v %v, key %q; W's release = %v %v, key %q", res, err, afterForce, r, rerr, afterW)
	time.Sleep(4 * time.Second) // > TTL: several renewals
	close(stop)
	herr := <-hdone
	t.Logf("holder's Do = %v (lost at %v); key now %q", herr, lostAt, admin.Get(ctx, lockKey(key)).Val())
	if strings.HasPrefix(afterW, id+":") {
		t.Errorf("W's release handed the key back to the identity the ForceRelease forced out (%q)", afterW)
	}
	if !errors.Is(herr, lease.ErrLost) || lostAt.IsZero() {
		t.Errorf("the forced-out holder's Do = %v (context ended at %v), want ErrLost: it held on through W's tenure without being told", herr, lostAt)
	}
}

// TestAdversary41_RefusedHandoverEndToEnd: what the holder and a fenced
// waiter see when the handover is refused (the counter at 2^63 - 1, set
// from outside while the waiter waits), and an unfenced waiter queued
// behind the fenced one. On 4198a70 the release was refused: the holder
// saw an unconfirmed release and the unfenced waiter, which needs no
// token, waited the holder's whole TTL. Now the fenced waiter is passed
// over: the holder's release goes through, the unfenced waiter enters at
// once, and the fenced waiter's own acquire is refused with the reason.
func TestAdversary41_RefusedHandoverEndToEnd(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	hc, hrec := newClient(t, srv.Client(t))
	fc, _ := newClient(t, srv.Client(t))
	uc, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	rel := make(chan struct{})
	hdone := hold(t, hc, key, lease.Spec{TTL: 4 * time.Second, Deadline: 20 * time.Second}, rel)
	fdone := make(chan error, 1)
	go func() {
		fdone <- fc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Wait: 10 * time.Second, Deadline: 20 * time.Second, Fence: true}, func(context.Context) error { return nil })
	}()
	adv39WaitQueued(t, srv, key, 1)
	udone := make(chan error, 1)
	var uAt time.Duration
	start := time.Now()
	go func() {
		udone <- uc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Wait: 10 * time.Second, Deadline: 20 * time.Second}, func(context.Context) error {
			uAt = time.Since(start)
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 2)
	admin.Set(ctx, base+":f", "9223372036854775807", time.Hour)
	q := admin.ZRange(ctx, base+":q", 0, -1).Val()
	close(rel)
	herr := <-hdone
	relAt := time.Since(start)
	time.Sleep(50 * time.Millisecond)
	t.Logf("queue before the release %q; holder's Do = %v at %v; key then %q for %v; queue then %q", q, herr, relAt, admin.Get(ctx, lockKey(key)).Val(), admin.PTTL(ctx, lockKey(key)).Val(), admin.ZRange(ctx, base+":q", 0, -1).Val())
	for _, e := range hrec.Events() {
		if e.Err != nil {
			t.Logf("holder event %v: %v", e.Kind, e.Err)
		}
	}
	ferr, uerr := <-fdone, <-udone
	t.Logf("fenced waiter's Do = %v; unfenced waiter's Do = %v, entered %v after start (release at %v)", ferr, uerr, uAt, relAt)
	if uerr != nil || uAt-relAt > time.Second {
		t.Errorf("the unfenced waiter entered %v after the holder's release (Do %v): held up by a refused handover for the holder's TTL", uAt-relAt, uerr)
	}
	if !errors.Is(ferr, lease.ErrRefused) || !strings.Contains(ferr.Error(), "2^63") {
		t.Errorf("the fenced waiter's Do = %v, want ErrRefused naming the counter at 2^63 - 1", ferr)
	}
	if n := hrec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		t.Errorf("the holder's release unconfirmed (%d)", n)
	}
}

// TestAdversary41_HandoverTokenAtTheTop: a fenced waiter handed the key
// over (the holder's release, message and all) with the counter set from
// outside to 2^63 - 2 and to 2^53 enters with the next token (2^63 - 1,
// 2^53 + 1), read exactly from the message.
func TestAdversary41_HandoverTokenAtTheTop(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, ctr := range []string{"9223372036854775806", "0009007199254740992", "9007199254740991"} {
		hc, _ := newClient(t, srv.Client(t))
		wc, wrec := newClient(t, srv.Client(t))
		key := uniqueKey(t)
		base := strings.TrimSuffix(lockKey(key), ":l")
		rel := make(chan struct{})
		hdone := hold(t, hc, key, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Fence: true}, rel)
		var tok lease.Token
		wdone := make(chan error, 1)
		var took time.Duration
		start := time.Now()
		go func() {
			wdone <- wc.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Wait: 10 * time.Second, Deadline: 20 * time.Second, Fence: true}, func(fctx context.Context) error {
				took = time.Since(start)
				l, _ := lease.FromContext(fctx)
				tok = l.Token()
				return nil
			})
		}()
		adv39WaitQueued(t, srv, key, 1)
		admin.Set(ctx, base+":f", ctr, time.Hour)
		close(rel)
		<-hdone
		werr := <-wdone
		next := adv41Next(strings.TrimLeft(ctr, "0"))
		t.Logf("counter %s: waiter Do %v, token %v after %v", ctr, werr, tok, took)
		for _, e := range wrec.Events() {
			if e.Err != nil {
				t.Logf("  waiter event %v: %v", e.Kind, e.Err)
			}
		}
		if werr != nil || fmt.Sprint(int64(tok)) != next.String() || took > 3*time.Second {
			t.Errorf("counter %s: waiter Do %v with token %v after %v, want %s by the handover", ctr, werr, tok, took, next)
		}
	}
}
