package lease_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv39WaitQueued waits until key's queue holds n entries.
func adv39WaitQueued(t *testing.T, srv *leasetest.Server, key string, n int64) {
	t.Helper()
	admin := srv.Client(t)
	q := strings.TrimSuffix(lockKey(key), ":l") + ":q"
	for i := 0; i < 500; i++ {
		if admin.ZCard(context.Background(), q).Val() >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d waiters did not queue on %q", n, key)
}

// A server at maxmemory (noeviction) refuses a script's first write when
// that write may grow memory (SET), not once the script wrote anything
// (ZREM included, even one that removes nothing). The old release.lua
// began, for a call that had queued (ARGV[6] != ""), with ZREM of that
// call's own entry, so its tombstone SET and the handover's SET ran
// afterwards even at maxmemory: the release of a call that had waited
// went through (and handed the key to the next waiter). a4b4af6 moved the
// ZREM after the tombstone SET, which became the script's first write and
// was refused with OOM: the release failed, the key stayed held by a call
// that returned, and the next waiter waited for its TTL. Fixed by writing
// the tombstone after the release's first write that frees memory (see
// TestAdversary39_OOMRelease).
func TestAdversary39_OOMReleaseOfAWaitedCall(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	full := maxmemoryFull(t, admin)
	defer full(false)
	hc, _ := newClient(t, srv.Client(t))
	wc, _ := newClient(t, srv.Client(t))
	w2c, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	s := lease.Spec{TTL: 4 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second}

	release := make(chan struct{})
	hdone := hold(t, hc, key, s, release)
	wres := make(chan error, 1)
	go func() {
		wres <- wc.Do(ctx, key, s, func(ctx context.Context) error {
			// W got the key by handover (it had queued); W2 queues behind.
			adv39WaitQueued(t, srv, key, 1)
			full(true)
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 1)
	w2got := make(chan time.Time, 1)
	w2res := make(chan error, 1)
	go func() {
		w2res <- w2c.Do(ctx, key, s, func(ctx context.Context) error {
			w2got <- time.Now()
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 2)
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}
	werr := <-wres
	returned := time.Now()
	held := admin.Get(ctx, lockKey(key)).Val()
	t.Logf("W's Do at maxmemory = %v; key after it: %q", werr, held)
	var got time.Time
	var w2err error
	w2done := false
	select {
	case w2err = <-w2res:
		w2done = true
	case <-time.After(6 * time.Second):
	}
	select {
	case got = <-w2got:
	default:
	}
	full(false)
	if got.IsZero() {
		t.Fatalf("W2 did not get the key within 6s of W's return (W2's Do: done %v, %v; key %q)", w2done, w2err, held)
	}
	if w2err != nil {
		t.Errorf("W2: %v", w2err)
	}
	wait := got.Sub(returned)
	t.Logf("W2 got the key %v after W's Do returned", wait)
	if werr != nil || wait > time.Second {
		t.Errorf("the release of a call that had waited failed at maxmemory (Do = %v; W2 waited %v, the key %q stayed held); before a4b4af6 its ZREM was the script's first write and the release went through", werr, wait, held)
	}
}

// The queue key of another type (written from outside) while a call that
// had queued holds the key: its release is a WRONGTYPE error, before and
// after a4b4af6. Before, the error came from the ZREM of its own entry,
// the script's first command, so nothing was written; a4b4af6 wrote the
// tombstone first (as for a call that never queued), so that a later
// release of the same identity (after the key expired) answered
// "released" where it answered "not held". The tombstone stays the
// release's first write (a refusal of it, by an ACL without SET, must
// leave everything as it was: TestAdversary17_ACLMissingCommandsRefusesCleanly,
// which failed when it came after the DEL), so it is left here, as it is
// for a call that never queued: the key stays W's, and a replay of the
// release runs again and fails the same way (round 40). Checked: the
// error, and the key still W's.
func TestAdversary39_WrongTypeQueueTombstone(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	hc, _ := newClient(t, srv.Client(t))
	wc, wrec := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	s := lease.Spec{TTL: 4 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second}
	release := make(chan struct{})
	hdone := hold(t, hc, key, s, release)
	wres := make(chan error, 1)
	go func() {
		wres <- wc.Do(ctx, key, s, func(ctx context.Context) error {
			admin.Del(ctx, base+":q")
			admin.Set(ctx, base+":q", "junk", time.Minute)
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 1)
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}
	werr := <-wres
	held := admin.Get(ctx, lockKey(key)).Val()
	wid, _, _ := strings.Cut(held, ":")
	tomb := admin.Get(ctx, base+":r:"+wid).Val()
	t.Logf("W's Do = %v; key %q; W's tombstone %q; %d events", werr, held, tomb, len(wrec.Events()))
	if wid == "" {
		t.Fatal("the key is not W's after its refused release")
	}
	if n := wrec.Count(lease.EventReleaseUnconfirmed); n != 1 {
		t.Errorf("W's release refused with WRONGTYPE: %d unconfirmed releases reported, want 1", n)
	}
}

// Fenced tokens along a chain of grants and handovers, with the counter
// pushed ahead of the clock (the rewrite path of takeTok) before some
// steps and between the two runs of a replayed acquire: each token is
// above every earlier one and above the counter as it was, and the token
// the function sees, the lock's value and the counter agree; a replay
// answers its first run's token.
func TestAdversary39_TokenChainCounterAhead(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Fence: true, Wait: 15 * time.Second}
	hc, _ := newClient(t, srv.Client(t))
	wc, _ := newClient(t, srv.Client(t))
	rdb := srv.Client(t)
	rh := &adv28Replay{}
	rdb.AddHook(rh)
	rc, _ := newClient(t, rdb)
	warm(t, hc, "warm39")
	warm(t, wc, "warm39")
	warm(t, rc, "warm39")

	var last uint64
	bump := func(d int64) uint64 {
		c, _ := admin.Get(ctx, base+":f").Uint64()
		if now := uint64(time.Now().UnixMicro()); now > c {
			c = now
		}
		c += uint64(d)
		admin.Set(ctx, base+":f", strconvU(c), time.Hour)
		return c
	}
	check := func(step string, ctx context.Context, floor uint64) {
		tok, _ := lease.TokenFrom(ctx)
		v := admin.Get(context.Background(), lockKey(key)).Val()
		c := admin.Get(context.Background(), base+":f").Val()
		if !strings.HasSuffix(v, ":"+strconvU(uint64(tok))) || c != strconvU(uint64(tok)) {
			t.Errorf("%s: token %d, lock %q, counter %s", step, tok, v, c)
		}
		if uint64(tok) <= last || uint64(tok) <= floor {
			t.Errorf("%s: token %d not above the last %d / the counter %d", step, tok, last, floor)
		}
		last = uint64(tok)
	}
	for round := 0; round < 4; round++ {
		var floor uint64
		if round%2 == 0 {
			floor = bump(3_600_000_000) // an hour ahead
		}
		release := make(chan struct{})
		held := make(chan struct{})
		hdone := make(chan error, 1)
		go func() {
			hdone <- hc.Do(ctx, key, s, func(ctx context.Context) error {
				check("grant", ctx, floor)
				close(held)
				<-release
				return nil
			})
		}()
		<-held
		// A waiter, the counter pushed ahead again: the handover's token.
		wdone := make(chan error, 1)
		go func() {
			wdone <- wc.Do(ctx, key, s, func(ctx context.Context) error {
				check("handover", ctx, floor)
				return nil
			})
		}()
		adv39WaitQueued(t, srv, key, 1)
		floor = bump(7_200_000_000)
		close(release)
		if err := <-hdone; err != nil {
			t.Fatal(err)
		}
		if err := <-wdone; err != nil {
			t.Fatal(err)
		}
		// A replayed grant; between its runs the counter goes further ahead.
		floor = bump(1_000_000)
		var bumped uint64
		rh.between = func() { bumped = bump(5_000_000_000) }
		rh.armed.Store(true)
		err := rc.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			if int64(tok) != rh.first.Load() {
				t.Errorf("round %d: replay answered %d, the first run %d", round, tok, rh.first.Load())
			}
			v := admin.Get(context.Background(), lockKey(key)).Val()
			if !strings.HasSuffix(v, ":"+strconvU(uint64(tok))) || uint64(tok) <= last || uint64(tok) <= floor {
				t.Errorf("round %d: replayed grant token %d, lock %q, last %d, floor %d", round, tok, v, last, floor)
			}
			last = uint64(tok)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		last = bumped // the next grant must pass the counter
		t.Logf("round %d: last token %d", round, last)
	}
}

// The same as TestAdversary39_OOMReleaseOfAWaitedCall, on the scripts
// alone: the caller holds the key and names its queue member (it had
// queued), another live waiter is queued, the server is at maxmemory.
// The old script (round 37's verbatim copy, which starts with the ZREM of
// the caller's member) hands the key over; a4b4af6's was refused with OOM
// at its tombstone's SET, and the key stayed the caller's; the current
// one hands it over. With a hold-min (its ZREM still first) both go
// through.
func TestAdversary39_OOMReleaseScripts(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	old, cur := releaseScripts37(t)
	otherMember := other37 + "|30000|0|2000|" + inboxD37
	for _, hold := range []string{"0", "5000"} {
		for which, s := range []*redis.Script{old, cur} {
			rdb.ConfigSet(ctx, "maxmemory", "0")
			rdb.Del(ctx, keys37...)
			rdb.Set(ctx, keys37[0], me37+":0", 30*time.Second)
			now := time.Now().UnixMilli()
			rdb.ZAdd(ctx, keys37[4], redis.Z{Score: 1, Member: otherMember})
			rdb.HSet(ctx, keys37[5], otherMember, strconv.FormatInt(now+60000, 10)+":1")
			rdb.ConfigSet(ctx, "maxmemory", "1")
			res, err := s.Run(ctx, rdb, keys37, me37, hold, "PUBLISH", "60000", "600000", mine37, "1").Result()
			rdb.ConfigSet(ctx, "maxmemory", "0")
			v := rdb.Get(ctx, keys37[0]).Val()
			t.Logf("hold %s, %s script: %v %v; key %q", hold, [...]string{"old", "new"}[which], res, err, v)
			if err != nil {
				t.Errorf("hold %s, %s script at maxmemory: %v (key %q)", hold, [...]string{"old", "new"}[which], err, v)
			}
		}
	}
}

// The rewrite path as a replica sees it (scripts replicate as their
// effects: SET NX, SET ... GET, SET counter, SET lock): after a fenced
// grant and a fenced handover with the counter ahead of the clock, the
// replica's lock value and counter are the master's, with the same
// expiries; promoted, the replica's next grant passes every token.
func TestAdversary39_RewritePathOnReplica(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	admin, radmin := srv.Client(t), rep.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	s := lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Fence: true, Wait: 20 * time.Second}
	hc, _ := newClient(t, srv.Client(t))
	wc, _ := newClient(t, srv.Client(t))
	ahead := uint64(time.Now().UnixMicro()) + 3_600_000_000
	admin.Set(ctx, base+":f", strconvU(ahead), time.Hour)
	compare := func(step string) {
		srv.WaitReplicas(t, rep)
		for _, k := range []string{lockKey(key), base + ":f"} {
			mv, rv := admin.Get(ctx, k).Val(), radmin.Get(ctx, k).Val()
			mp, rp := admin.PTTL(ctx, k).Val(), radmin.PTTL(ctx, k).Val()
			if mv != rv || mp-rp > time.Second || rp-mp > time.Second {
				t.Errorf("%s: %s master %q (%v), replica %q (%v)", step, k, mv, mp, rv, rp)
			}
		}
	}
	release := make(chan struct{})
	var toks []uint64
	held := make(chan struct{})
	hdone := make(chan error, 1)
	go func() {
		hdone <- hc.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			toks = append(toks, uint64(tok))
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	compare("grant")
	wdone := make(chan error, 1)
	checked := make(chan struct{})
	go func() {
		wdone <- wc.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			toks = append(toks, uint64(tok))
			compare("handover")
			close(checked)
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 1)
	admin.Set(ctx, base+":f", strconvU(ahead+3_600_000_000), time.Hour) // further ahead for the handover
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
	srv.WaitReplicas(t, rep)
	// Promote the replica; a grant there passes both tokens.
	if err := radmin.SlaveOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	pc, _ := newClient(t, rep.Client(t))
	if err := pc.Do(ctx, key, s, func(ctx context.Context) error {
		tok, _ := lease.TokenFrom(ctx)
		toks = append(toks, uint64(tok))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("tokens %v (counter set to %d, then %d)", toks, ahead, ahead+3_600_000_000)
	if len(toks) != 3 || toks[0] != ahead+1 || toks[1] != ahead+3_600_000_001 || toks[2] <= toks[1] {
		t.Errorf("tokens %v", toks)
	}
}

// Under the README's least-privilege recipes (the service's and
// leasectl's), with the counter ahead of the clock: a fenced grant, then
// a ForceRelease by the leasectl user that hands the key to a fenced
// waiter, both on takeTok's rewrite path (SET ... GET, then SET). The
// tokens are the counter's next, and Inspect (as leasectl) shows the
// waiter's token and the counter as its LastToken.
func TestAdversary39_ACLRecipesRewritePath(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ctlRules := strings.Fields("~lease:* &lease:* &lease:{*}:c -@all +ping +scan +evalsha +eval +get +set +del +exists +pttl +pexpire +time +type +publish +zcard +zrange +zrem +hget +hdel +psubscribe +punsubscribe")
	hc, _ := newClient(t, aclClient(t, srv, "leases39a", leastPrivilege...))
	wc, _ := newClient(t, aclClient(t, srv, "leases39b", leastPrivilege...))
	ctl, _ := newClient(t, aclClient(t, srv, "leasectl39", ctlRules...))
	key := uniqueKey(t)
	base := strings.TrimSuffix(lockKey(key), ":l")
	s := lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Fence: true, Wait: 20 * time.Second}
	ahead := uint64(time.Now().UnixMicro()) + 3_600_000_000
	admin.Set(ctx, base+":f", strconvU(ahead), time.Hour)

	held := make(chan lease.Token, 1)
	hdone := make(chan error, 1)
	go func() {
		hdone <- hc.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			held <- tok
			<-ctx.Done()
			return nil
		})
	}()
	var htok lease.Token
	select {
	case htok = <-held:
	case err := <-hdone:
		t.Fatalf("holder: %v", err)
	}
	if uint64(htok) != ahead+1 {
		t.Errorf("holder's token %d, want %d", htok, ahead+1)
	}
	wtok := make(chan lease.Token, 1)
	wdone := make(chan error, 1)
	wrelease := make(chan struct{})
	go func() {
		wdone <- wc.Do(ctx, key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			wtok <- tok
			<-wrelease
			return nil
		})
	}()
	adv39WaitQueued(t, srv, key, 1)
	admin.Set(ctx, base+":f", strconvU(ahead+3_600_000_000), time.Hour)
	info, err := ctl.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ctl.ForceRelease(ctx, key, info.Holder)
	if err != nil || r != lease.ForceReleased {
		t.Fatalf("ForceRelease: %v %v", r, err)
	}
	var got lease.Token
	select {
	case got = <-wtok:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not enter")
	}
	info2, err := ctl.Inspect(ctx, key)
	t.Logf("holder %d, waiter %d; inspect %+v %v", htok, got, info2, err)
	if uint64(got) != ahead+3_600_000_001 || info2.Token != got || uint64(info2.LastToken) != uint64(got) {
		t.Errorf("waiter's token %d, Inspect token %d last %d, want %d", got, info2.Token, info2.LastToken, ahead+3_600_000_001)
	}
	if v := admin.Get(ctx, lockKey(key)).Val(); !strings.HasSuffix(v, ":"+strconvU(uint64(got))) {
		t.Errorf("lock %q", v)
	}
	close(wrelease)
	if err := <-wdone; err != nil {
		t.Error(err)
	}
	if err := <-hdone; err == nil {
		t.Error("the forced-out holder's Do returned nil")
	}
}
