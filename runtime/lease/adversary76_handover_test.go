package lease_test

// Adversary round 76: the fenced waiter's queue entry that ends in
// "|<counter ttl ms>" (57be76c), and every script that reads an entry.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv76Wait runs one waiting call on c in the background; it reports when
// it entered, with its token and the counter's PTTL read inside.
type adv76Entry struct {
	at   time.Time
	tok  lease.Token
	cttl time.Duration
	err  error
}

func adv76Waiter(c *lease.Client, pttl func(context.Context, string) time.Duration, key, counter string, s lease.Spec, hold time.Duration) <-chan adv76Entry {
	done := make(chan adv76Entry, 1)
	go func() {
		var e adv76Entry
		e.err = c.Do(context.Background(), key, s, func(ctx context.Context) error {
			e.at = time.Now()
			e.tok, _ = lease.TokenFrom(ctx)
			if pttl != nil {
				e.cttl = pttl(ctx, counter)
			}
			time.Sleep(hold)
			return nil
		})
		done <- e
	}()
	return done
}

// adv76PTTL reads a key's PTTL through rdb.
func adv76PTTL(rdb *redis.Client) func(context.Context, string) time.Duration {
	return func(ctx context.Context, k string) time.Duration { return rdb.PTTL(ctx, k).Val() }
}

// README (Release): "with hold-min: the TTL is shortened to the remaining
// hold, and waiters are told"; hub.go: '"h" (a hold-min release: the lease
// ends sooner) wakes every waiter of the key to look at the new expiry'.
// endhold.lua (ForceRelease during a hold-min): "wake the key's waiters to
// try again". A waiter with a long re-check enters at the hold's end (or
// at once after ForceRelease ended it), not at its next re-check: fenced
// or not. The fenced waiter's entry now ends in "|<counter ttl>", and
// the two scripts that tell every waiter read its inbox as all after the
// fourth "|".
func TestAdversary76_HoldMinTellsFencedWaiters(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	for _, tc := range []struct {
		name  string
		fence bool
		force bool // ForceRelease ends the hold
	}{
		{"hold-runs-out/unfenced", false, false},
		{"hold-runs-out/fenced", true, false},
		{"force-ends-hold/unfenced", false, true},
		{"force-ends-hold/fenced", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			key := "adv76-hold-" + strings.ReplaceAll(tc.name, "/", "-")
			holder, _ := sharedClient(t)
			waiter, wrec := sharedClient(t, lease.WithRecheck(recheck))
			op, _ := sharedClient(t)
			holdMin := 1500 * time.Millisecond
			if tc.force {
				holdMin = 8 * time.Second
			}
			rel := make(chan struct{})
			granted := time.Now()
			hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, HoldMin: holdMin}, rel)
			wdone := adv76Waiter(waiter, nil, key, "", lease.Spec{TTL: 5 * time.Second, Deadline: 25 * time.Second, Wait: 20 * time.Second, Fence: tc.fence}, 0)
			a75WaitEvent(t, wrec, lease.EventWaiting, 1, 3*time.Second)
			time.Sleep(300 * time.Millisecond) // the waiter sleeps, until its re-check (4s)
			close(rel)
			if err := <-hdone; err != nil {
				t.Fatalf("holder: %v", err)
			}
			released := time.Now()
			want := granted.Add(holdMin) // the hold runs out
			if tc.force {
				time.Sleep(500 * time.Millisecond)
				info, err := op.Inspect(ctx, key)
				if err != nil || !info.Hold {
					t.Fatalf("Inspect during the hold: %+v %v", info, err)
				}
				r, err := op.ForceRelease(ctx, key, info.Holder)
				if err != nil || r != lease.ForceHoldEnded {
					t.Fatalf("ForceRelease of the hold: %v %v", r, err)
				}
				want = time.Now()
			}
			var e adv76Entry
			select {
			case e = <-wdone:
			case <-time.After(15 * time.Second):
				t.Fatal("the waiter never entered")
			}
			if e.err != nil {
				t.Fatalf("waiter: %v", e.err)
			}
			late := e.at.Sub(want)
			t.Logf("released %v after the grant; waiter entered %v after the hold ended (re-check %v)", released.Sub(granted).Round(time.Millisecond), late.Round(time.Millisecond), recheck)
			if late > time.Second {
				what := "the hold-min release's \"h\""
				if tc.force {
					what = "ForceRelease's end of the hold (\"x\")"
				}
				t.Errorf("fence=%v: the waiter entered %v after the hold ended, at its re-check: it was not told of %s (README: \"with hold-min ... waiters are told\")", tc.fence, late.Round(time.Millisecond), what)
			}
		})
	}
}

// Prefixes with "|", digits, ":c" and none: the fenced waiter's entry is
// identity|ttl|fence|claim|<prefix>{%probe-…}:c|<counter ttl>. The
// release must still split inbox and counter TTL: the waiter is told at
// once (it enters long before its 4s re-check) and its counter lives its
// own Client's WithCounterTTL; Inspect shows it as a fenced waiter.
func TestAdversary76_PrefixShapesHandover(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	for i, prefix := range []string{"lease:", "p|", "a|1|", "|", "z:c|5", "99", "ü|ñ:", "", "x:c", "q|12345", "|:c|7"} {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			admin := shared.Client(t)
			key := fmt.Sprintf("adv76-prefix-%d", i)
			counter := prefix + "{" + key + "}:f"
			holder, _ := sharedClient(t, lease.WithPrefix(prefix)) // counter TTL 24h
			waiter, wrec := sharedClient(t, lease.WithPrefix(prefix), lease.WithCounterTTL(3*time.Second), lease.WithRecheck(recheck))
			op, _ := sharedClient(t, lease.WithPrefix(prefix))
			rel := make(chan struct{})
			hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, rel)
			wdone := adv76Waiter(waiter, adv76PTTL(admin), key, counter,
				lease.Spec{TTL: 5 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second, Fence: true}, 0)
			a75WaitEvent(t, wrec, lease.EventWaiting, 1, 3*time.Second)
			time.Sleep(200 * time.Millisecond)
			info, err := op.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Waiters) != 1 || !info.Waiters[0].Fence || info.Waiters[0].TTL != 5*time.Second || len(info.Waiters[0].Identity) != 32 {
				t.Errorf("prefix %q: Inspect's waiters %+v; want one fenced waiter, TTL 5s, a 32-hex identity", prefix, info.Waiters)
			}
			members := admin.ZRange(ctx, prefix+"{"+key+"}:q", 0, -1).Val()
			released := time.Now()
			close(rel)
			if err := <-hdone; err != nil {
				t.Fatalf("holder: %v", err)
			}
			e := <-wdone
			if e.err != nil {
				t.Fatalf("prefix %q: waiter: %v (entry %q)", prefix, e.err, members)
			}
			after := e.at.Sub(released)
			t.Logf("prefix %q: entry %q; entered %v after the release; token %d; counter PTTL %v", prefix, members, after.Round(time.Millisecond), e.tok, e.cttl)
			if e.tok == 0 {
				t.Errorf("prefix %q: no token", prefix)
			}
			if after > time.Second {
				t.Errorf("prefix %q: the fenced waiter entered %v after the release (its re-check is %v): the release did not tell it on its inbox", prefix, after.Round(time.Millisecond), recheck)
			}
			if e.cttl > 3*time.Second || e.cttl < 2*time.Second {
				t.Errorf("prefix %q: counter PTTL %v inside the grantee's call; its Client's WithCounterTTL is 3s", prefix, e.cttl)
			}
		})
	}
}

// One queue, waiters of three Clients: an unfenced one (no field), a fenced
// one with WithCounterTTL(2s), a fenced one with the default 24h, in that
// order. Each release hands the key on, at once, and each fenced grant's
// counter lives its own Client's TTL, not the releaser's.
func TestAdversary76_MixedQueueCounterTTLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const recheck = 4 * time.Second
	key := "adv76-mixed"
	counter := "lease:{" + key + "}:f"
	admin := shared.Client(t)
	pt := adv76PTTL(admin)
	holder, _ := sharedClient(t, lease.WithCounterTTL(50*time.Millisecond))
	a, arec := sharedClient(t, lease.WithRecheck(recheck))
	b, brec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(2*time.Second))
	c, crec := sharedClient(t, lease.WithRecheck(recheck))
	op, _ := sharedClient(t)
	rel := make(chan struct{})
	hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true}, rel)
	const work = 300 * time.Millisecond
	ad := adv76Waiter(a, pt, key, counter, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second}, work)
	a75WaitEvent(t, arec, lease.EventWaiting, 1, 3*time.Second)
	bd := adv76Waiter(b, pt, key, counter, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second, Fence: true}, work)
	a75WaitEvent(t, brec, lease.EventWaiting, 1, 3*time.Second)
	cd := adv76Waiter(c, pt, key, counter, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second, Fence: true}, work)
	a75WaitEvent(t, crec, lease.EventWaiting, 1, 3*time.Second)
	time.Sleep(200 * time.Millisecond)
	info, err := op.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 3 || info.Waiters[0].Fence || !info.Waiters[1].Fence || !info.Waiters[2].Fence {
		t.Errorf("Inspect: waiters %+v; want unfenced, fenced, fenced", info.Waiters)
	}
	t.Logf("queue: %q", admin.ZRange(ctx, "lease:{"+key+"}:q", 0, -1).Val())
	start := time.Now()
	close(rel)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}
	ea, eb, ec := <-ad, <-bd, <-cd
	for _, x := range []struct {
		n string
		e adv76Entry
	}{{"a", ea}, {"b", eb}, {"c", ec}} {
		if x.e.err != nil {
			t.Fatalf("%s: %v", x.n, x.e.err)
		}
	}
	t.Logf("entered at +%v (tok %d), +%v (tok %d, counter %v), +%v (tok %d, counter %v)",
		ea.at.Sub(start).Round(time.Millisecond), ea.tok, eb.at.Sub(start).Round(time.Millisecond), eb.tok, eb.cttl, ec.at.Sub(start).Round(time.Millisecond), ec.tok, ec.cttl)
	if !(ea.at.Before(eb.at) && eb.at.Before(ec.at)) {
		t.Errorf("not handed over in queue order")
	}
	if ec.at.Sub(start) > 3*work+1500*time.Millisecond {
		t.Errorf("three handovers took %v (re-check %v): a waiter was not told at once", ec.at.Sub(start).Round(time.Millisecond), recheck)
	}
	if ea.tok != 0 || eb.tok == 0 || ec.tok <= eb.tok {
		t.Errorf("tokens %d %d %d: want 0, then increasing", ea.tok, eb.tok, ec.tok)
	}
	if eb.cttl > 2*time.Second || eb.cttl < time.Second {
		t.Errorf("b (WithCounterTTL 2s), handed the key by an unfenced call's release: counter PTTL %v", eb.cttl)
	}
	if ec.cttl < 23*time.Hour {
		t.Errorf("c (default 24h), handed the key by b (2s): counter PTTL %v", ec.cttl)
	}
}

// A queue entry written by hand as an older Client writes it (no counter
// field; no inbox at all) is handed the key with the releaser's counter
// TTL; one in the new format with its own. Extremes of the field: 1 ms and
// the largest WithCounterTTL.
func TestAdversary76_HandWrittenEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const id = "0123456789abcdef0123456789abcdef"
	for i, tc := range []struct {
		member   string // after "id|"
		min, max time.Duration
	}{
		{"5000|1|600|lease:{%probe-old}:c", 6 * time.Second, 7 * time.Second},          // older Client: the releaser's (7s)
		{"5000|1|600", 6 * time.Second, 7 * time.Second},                               // oldest: no inbox
		{"5000|1|600|lease:{%probe-new}:c|3000", 2 * time.Second, 3 * time.Second},     // new
		{"5000|1|600|lease:{%probe-new}:c|1", 0, time.Millisecond},                     // WithCounterTTL(1ms): gone at once or 1ms
		{"5000|1|600|lease:{%probe-new}:c|9223372036854", 9e12 * time.Millisecond, -1}, // ms(MaxInt64)
		{"5000|1|600|p|1{%probe-x}:c|4000", 3 * time.Second, 4 * time.Second},          // a prefix "p|1"
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			admin := shared.Client(t)
			key := fmt.Sprintf("adv76-hand-%d", i)
			holder, _ := sharedClient(t, lease.WithCounterTTL(7*time.Second))
			rel := make(chan struct{})
			hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, rel)
			m := id + "|" + tc.member
			now := time.Now()
			if err := admin.ZAdd(ctx, "lease:{"+key+"}:q", redis.Z{Score: float64(now.UnixMicro()), Member: m}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.HSet(ctx, "lease:{"+key+"}:x", m, fmt.Sprintf("%d:1", now.Add(10*time.Second).UnixMilli())).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				admin.Del(context.Background(), "lease:{"+key+"}:q", "lease:{"+key+"}:x", "lease:{"+key+"}:l", "lease:{"+key+"}:f")
			})
			close(rel)
			if err := <-hdone; err != nil {
				t.Fatalf("release to the entry %q: %v", m, err)
			}
			v := admin.Get(ctx, "lease:{"+key+"}:l").Val()
			pttl := admin.PTTL(ctx, "lease:{"+key+"}:f").Val()
			t.Logf("entry %q: lock %q, counter PTTL %v", m, v, pttl)
			if !strings.HasPrefix(v, id+":") || strings.HasSuffix(v, ":0") {
				t.Fatalf("entry %q: the release did not hand the key over with a token: lock %q", m, v)
			}
			if pttl > 0 && pttl < tc.min || tc.max > 0 && pttl > tc.max || tc.max < 0 && pttl < tc.min || pttl == -1 {
				t.Errorf("entry %q: counter PTTL %v, want %v..%v", m, pttl, tc.min, tc.max)
			}
		})
	}
}

// Lead terms are always fenced: a term handed over from a Client with the
// default counter TTL to one with WithCounterTTL(2s), and on to one with
// 24h, keeps the counter for the new leader's Client's TTL; each standby
// starts its term about one round trip after the release (README), not at
// its re-check.
func TestAdversary76_LeadHandoverCounterTTL(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	key := "adv76-lead"
	counter := "lease:{" + key + "}:f"
	admin := shared.Client(t)
	ttls := []time.Duration{24 * time.Hour, 2 * time.Second, 24 * time.Hour}
	opts := [][]lease.Option{{lease.WithRecheck(recheck)}, {lease.WithRecheck(recheck), lease.WithCounterTTL(2 * time.Second)}, {lease.WithRecheck(recheck), lease.WithCounterTTL(5 * time.Minute)}}
	ttls[2] = 5 * time.Minute
	type term struct {
		start, end time.Time
		cttl       time.Duration
		tok        lease.Token
	}
	terms := make([]chan term, 3)
	cancels := make([]context.CancelFunc, 3)
	done := make([]chan error, 3)
	recs := make([]*leasetest.Recorder, 3)
	for i := range 3 {
		c, rec := sharedClient(t, opts[i]...)
		recs[i] = rec
		terms[i] = make(chan term, 4)
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		done[i] = make(chan error, 1)
		go func() {
			done[i] <- c.Lead(ctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: fmt.Sprintf("cand|%d", i)}, func(ctx context.Context) error {
				tr := term{start: time.Now()}
				tr.tok, _ = lease.TokenFrom(ctx)
				// Not on ctx: the test cancels the term as soon as its
				// grant is observed, which may be before fn runs (CI: a
				// PTTL on the cancelled ctx failed and read as 0s).
				tr.cttl = admin.PTTL(context.WithoutCancel(ctx), counter).Val()
				<-ctx.Done()
				tr.end = time.Now()
				terms[i] <- tr
				return nil
			})
		}()
		if i == 0 {
			select {
			case <-time.After(5 * time.Second):
				t.Fatal("no first term")
			case <-waitCount(recs[0], lease.EventAcquired, 1):
			}
		} else {
			a75WaitEvent(t, rec, lease.EventWaiting, 1, 3*time.Second)
		}
	}
	time.Sleep(300 * time.Millisecond)
	cancels[0]()
	t0 := <-terms[0]
	if err := <-done[0]; err != nil {
		t.Fatal(err)
	}
	var t1 term
	select {
	case t1 = <-terms[1]:
		t.Fatal("terms[1] ended early")
	case <-waitCount(recs[1], lease.EventAcquired, 1):
	case <-time.After(6 * time.Second):
		t.Fatal("no second term")
	}
	cancels[1]()
	t1 = <-terms[1]
	<-done[1]
	select {
	case <-waitCount(recs[2], lease.EventAcquired, 1):
	case <-time.After(6 * time.Second):
		t.Fatal("no third term")
	}
	cancels[2]()
	t2 := <-terms[2]
	<-done[2]
	t.Logf("terms: tok %d counter %v; +%v tok %d counter %v; +%v tok %d counter %v", t0.tok, t0.cttl,
		t1.start.Sub(t0.end).Round(time.Millisecond), t1.tok, t1.cttl, t2.start.Sub(t1.end).Round(time.Millisecond), t2.tok, t2.cttl)
	for i, tr := range []term{t0, t1, t2} {
		if tr.cttl > ttls[i] || tr.cttl < ttls[i]-time.Second {
			t.Errorf("term %d: counter PTTL %v; its Client's WithCounterTTL is %v", i, tr.cttl, ttls[i])
		}
	}
	if g := t1.start.Sub(t0.end); g > time.Second {
		t.Errorf("second term began %v after the first ended (re-check %v): not told", g, recheck)
	}
	if g := t2.start.Sub(t1.end); g > time.Second {
		t.Errorf("third term began %v after the second ended (re-check %v): not told", g, recheck)
	}
	if !(t0.tok < t1.tok && t1.tok < t2.tok) {
		t.Errorf("term numbers %d %d %d not increasing", t0.tok, t1.tok, t2.tok)
	}
}

func waitCount(rec *leasetest.Recorder, k lease.EventKind, n int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for end := time.Now().Add(20 * time.Second); rec.Count(k) < n && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
		close(ch)
	}()
	return ch
}
