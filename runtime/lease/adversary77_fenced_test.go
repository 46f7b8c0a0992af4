package lease_test

// Adversary round 77: fenced waiters, whose queue entry ends in
// "|<counter ttl ms>" (57be76c, 8e87e4a), through every path that reads a
// queue entry besides the handover: kept leases, a hold-min and
// ForceRelease with fenced and unfenced waiters of several Clients,
// waiters that give up, Inspect, Watch's account of the endings.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Spec.Keep: "A waiter in another process makes the Client release it as
// soon as no call uses it." The waiter announces itself with "w" at each
// look; a fenced waiter's entry carries its counter TTL, and the keeper's
// release hands it the key and tells it on its inbox: it enters about a
// round trip after it asked (its re-check is 4s), with a token above the
// keeper's and its own Client's counter TTL.
func TestAdversary77_KeptLeaseHandsToFencedWaiter(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	for _, tc := range []struct {
		name                     string
		keeperFence, waiterFence bool
	}{
		{"fenced-keeper/fenced-waiter", true, true},
		{"unfenced-keeper/fenced-waiter", false, true},
		{"fenced-keeper/unfenced-waiter", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			admin := shared.Client(t)
			key := "adv77-keep-" + strings.ReplaceAll(tc.name, "/", "-")
			counter := "lease:{" + key + "}:f"
			keeper, _ := sharedClient(t)
			waiter, wrec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(3*time.Second))
			var ktok lease.Token
			if err := keeper.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Keep: 20 * time.Second, Fence: tc.keeperFence}, func(ctx context.Context) error {
				ktok, _ = lease.TokenFrom(ctx)
				return nil
			}); err != nil {
				t.Fatalf("keeper: %v", err)
			}
			info, err := keeper.Inspect(ctx, key)
			if err != nil || info.Free() {
				t.Fatalf("the kept lease: %+v %v", info, err)
			}
			start := time.Now()
			wdone := adv76Waiter(waiter, adv76PTTL(admin), key, counter,
				lease.Spec{TTL: 5 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second, Fence: tc.waiterFence}, 0)
			var e adv76Entry
			select {
			case e = <-wdone:
			case <-time.After(14 * time.Second):
				t.Fatal("the waiter never entered")
			}
			if e.err != nil {
				t.Fatalf("waiter: %v", e.err)
			}
			after := e.at.Sub(start)
			t.Logf("keeper token %d; waiter entered %v after it called (waiting events %d), token %d, counter PTTL %v", ktok, after.Round(time.Millisecond), wrec.Count(lease.EventWaiting), e.tok, e.cttl)
			if after > 1500*time.Millisecond {
				t.Errorf("the waiter entered %v after it asked for a kept lease (re-check %v): the keeper did not hand it over at once (Spec.Keep: \"A waiter in another process makes the Client release it as soon as no call uses it\")", after.Round(time.Millisecond), recheck)
			}
			if tc.waiterFence {
				if e.tok == 0 || e.tok <= ktok {
					t.Errorf("fenced waiter's token %d after the keeper's %d", e.tok, ktok)
				}
				if e.cttl > 3*time.Second || e.cttl < 1500*time.Millisecond {
					t.Errorf("counter PTTL %v inside the waiter's call; its Client's WithCounterTTL is 3s", e.cttl)
				}
			} else if e.tok != 0 {
				t.Errorf("unfenced waiter got token %d", e.tok)
			}
		})
	}
}

// One key, a holder with HoldMin, and five waiters of three Clients: X has
// a fenced and an unfenced one (one inbox, two entries that differ in
// their trailing field), Y a fenced one, Z an unfenced and a fenced one;
// every re-check is 4s. Three ways the holder's time ends: the hold-min
// runs out ("h" told every inbox), ForceRelease ends the hold ("x" told
// every inbox), ForceRelease of the running holder (a handover, then each
// release hands on). Every waiter enters, one after the other, without
// waiting for a re-check; fenced tokens increase; each fenced grant's
// counter lives its own Client's WithCounterTTL; Inspect lists the five
// with their fence flags; Watch names each ending.
func TestAdversary77_HoldMinAndForceMixedClients(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	const work = 150 * time.Millisecond
	for _, mode := range []string{"hold-runs-out", "force-ends-hold", "force-holder"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			key := "adv77-mixed-" + mode
			counter := "lease:{" + key + "}:f"
			admin := shared.Client(t)
			pt := adv76PTTL(admin)
			holder, _ := sharedClient(t, lease.WithCounterTTL(time.Second))
			x, xrec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(3*time.Second))
			y, yrec := sharedClient(t, lease.WithRecheck(recheck))
			z, zrec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(7*time.Second))
			op, _ := sharedClient(t)

			var changes adv75cChanges
			wctx, wcancel := context.WithCancel(ctx)
			wdone := make(chan error, 1)
			go func() { wdone <- op.Watch(wctx, key, 200*time.Millisecond, changes.add) }()

			holdMin := 1500 * time.Millisecond
			if mode != "hold-runs-out" {
				holdMin = 8 * time.Second
			}
			rel := make(chan struct{})
			granted := time.Now()
			hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, HoldMin: holdMin, Fence: true}, rel)
			type who struct {
				name  string
				c     *lease.Client
				n     int // its Client's waiting events before it
				fence bool
				maxC  time.Duration
			}
			ws := []who{
				{"x-fenced", x, 1, true, 3 * time.Second},
				{"x-unfenced", x, 2, false, 0},
				{"y-fenced", y, 1, true, 24 * time.Hour},
				{"z-unfenced", z, 1, false, 0},
				{"z-fenced", z, 2, true, 7 * time.Second},
			}
			recs := map[*lease.Client]*leasetest.Recorder{x: xrec, y: yrec, z: zrec}
			dones := make([]<-chan adv76Entry, len(ws))
			for i, w := range ws {
				dones[i] = adv76Waiter(w.c, pt, key, counter, lease.Spec{TTL: 5 * time.Second, Deadline: 25 * time.Second, Wait: 20 * time.Second, Fence: w.fence}, work)
				rec := recs[w.c]
				if !waitFor(3*time.Second, func() bool { return rec.Count(lease.EventWaiting) >= w.n }) {
					t.Fatalf("%s never waited", w.name)
				}
			}
			time.Sleep(200 * time.Millisecond)
			info, err := op.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var flags []bool
			for _, w := range info.Waiters {
				flags = append(flags, w.Fence)
				if len(w.Identity) != 32 || w.TTL != 5*time.Second {
					t.Errorf("Inspect's waiter %+v: want a 32-hex identity and TTL 5s", w)
				}
			}
			if fmt.Sprint(flags) != "[true false true false true]" {
				t.Errorf("Inspect's waiters' Fence %v, want [true false true false true] (queue %q)", flags, admin.ZRange(ctx, "lease:{"+key+"}:q", 0, -1).Val())
			}

			var want time.Time // when the holder's time ended
			switch mode {
			case "hold-runs-out":
				close(rel)
				if err := <-hdone; err != nil {
					t.Fatalf("holder: %v", err)
				}
				want = granted.Add(holdMin)
			case "force-ends-hold":
				close(rel)
				if err := <-hdone; err != nil {
					t.Fatalf("holder: %v", err)
				}
				time.Sleep(300 * time.Millisecond)
				hi, err := op.Inspect(ctx, key)
				if err != nil || !hi.Hold {
					t.Fatalf("Inspect during the hold: %+v %v", hi, err)
				}
				want = time.Now()
				if r, err := op.ForceRelease(ctx, key, hi.Holder); err != nil || r != lease.ForceHoldEnded {
					t.Fatalf("ForceRelease of the hold: %v %v", r, err)
				}
			case "force-holder":
				hi, err := op.Inspect(ctx, key)
				if err != nil || hi.Hold || hi.Free() {
					t.Fatalf("Inspect of the holder: %+v %v", hi, err)
				}
				want = time.Now()
				if r, err := op.ForceRelease(ctx, key, hi.Holder); err != nil || r != lease.ForceReleased {
					t.Fatalf("ForceRelease of the holder: %v %v", r, err)
				}
			}
			type got struct {
				who
				adv76Entry
			}
			var all []got
			for i, w := range ws {
				select {
				case e := <-dones[i]:
					if e.err != nil {
						t.Fatalf("%s: %v", w.name, e.err)
					}
					all = append(all, got{w, e})
				case <-time.After(20 * time.Second):
					t.Fatalf("%s never entered", w.name)
				}
			}
			if mode == "force-holder" {
				close(rel)
				if err := <-hdone; !errors.Is(err, lease.ErrLost) {
					t.Errorf("forced-out holder's Do: %v, want ErrLost", err)
				}
			}
			sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
			var log []string
			var last lease.Token
			for _, g := range all {
				log = append(log, fmt.Sprintf("%s +%v tok %d counter %v", g.name, g.at.Sub(want).Round(time.Millisecond), g.tok, g.adv76Entry.cttl.Round(time.Millisecond)))
				if g.fence {
					if g.tok == 0 || g.tok <= last {
						t.Errorf("%s: token %d after %d", g.name, g.tok, last)
					}
					last = g.tok
					if g.adv76Entry.cttl > g.maxC || g.adv76Entry.cttl < g.maxC-2*time.Second {
						t.Errorf("%s: counter PTTL %v inside its call; its Client's WithCounterTTL is %v", g.name, g.adv76Entry.cttl, g.maxC)
					}
				} else if g.tok != 0 {
					t.Errorf("%s (unfenced): token %d", g.name, g.tok)
				}
			}
			t.Logf("%s: entries %s", mode, strings.Join(log, "; "))
			if first := all[0].at.Sub(want); first > time.Second {
				t.Errorf("the first waiter entered %v after the holder's time ended (re-check %v): the waiters were not told", first.Round(time.Millisecond), recheck)
			}
			// Each later one is handed the key by the one before.
			for i := 1; i < len(all); i++ {
				if gap := all[i].at.Sub(all[i-1].at); gap > work+time.Second {
					t.Errorf("%s entered %v after %s began (which held %v): not told of the handover", all[i].name, gap.Round(time.Millisecond), all[i-1].name, work)
				}
			}
			time.Sleep(500 * time.Millisecond)
			wcancel()
			if err := <-wdone; err != nil {
				t.Errorf("Watch: %v", err)
			}
			hows := map[string]int{}
			for _, ch := range changes.all() {
				if ch.Kind == lease.ChangeEnded {
					hows[ch.How]++
				}
			}
			t.Logf("Watch: %q", changes.of(key))
			wantHow := map[string]string{"hold-runs-out": "hold ran out", "force-ends-hold": "hold ended", "force-holder": "force-released"}[mode]
			if hows[wantHow] != 1 {
				t.Errorf("Watch's endings %v: want one %q", hows, wantHow)
			}
			if hows["handed over"] < len(ws)-2 {
				t.Errorf("Watch's endings %v: want the handovers between the five waiters named (at least %d)", hows, len(ws)-2)
			}
			if q := admin.Exists(ctx, "lease:{"+key+"}:q", "lease:{"+key+"}:x", "lease:{"+key+"}:l").Val(); q != 0 {
				t.Errorf("%d of the key's lock/queue keys left after every waiter ran", q)
			}
		})
	}
}

// A fenced waiter that gives up (its ctx ends) or whose Client closes
// takes its entry, the one with the trailing counter TTL, out of the
// queue: the release then hands the key to the next waiter at once (were
// the dead entry left, the release would give it a claim of re-check +
// 100ms and the next waiter would enter about 4s later). No entry of the
// one that left is left in the queue.
func TestAdversary77_FencedWaiterLeavesQueue(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			admin := shared.Client(t)
			key := "adv77-leave-" + how
			qkey := "lease:{" + key + "}:q"
			holder, _ := sharedClient(t)
			quitter, qrec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(90*time.Second))
			next, nrec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(4*time.Second))
			rel := make(chan struct{})
			hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, rel)
			qctx, qcancel := context.WithCancel(ctx)
			defer qcancel()
			qdone := make(chan error, 1)
			go func() {
				qdone <- quitter.Do(qctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second, Fence: true}, func(context.Context) error {
					return errors.New("the quitter entered")
				})
			}()
			a75WaitEvent(t, qrec, lease.EventWaiting, 1, 3*time.Second)
			ndone := adv76Waiter(next, adv76PTTL(admin), key, "lease:{"+key+"}:f", lease.Spec{TTL: 5 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second, Fence: true}, 0)
			a75WaitEvent(t, nrec, lease.EventWaiting, 1, 3*time.Second)
			before := admin.ZRange(ctx, qkey, 0, -1).Val()
			if len(before) != 2 || !strings.HasSuffix(before[0], "}:c|90000") || !strings.HasSuffix(before[1], "}:c|4000") {
				t.Errorf("queue %q: want two fenced entries ending in their counter TTLs", before)
			}
			if how == "cancel" {
				qcancel()
			} else {
				quitter.Close()
			}
			select {
			case err := <-qdone:
				t.Logf("quitter's Do: %v", err)
				if err == nil || strings.Contains(err.Error(), "entered") {
					t.Errorf("quitter's Do returned %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the quitter's Do did not return")
			}
			if !waitFor(2*time.Second, func() bool { return len(admin.ZRange(ctx, qkey, 0, -1).Val()) == 1 }) {
				t.Errorf("queue after the fenced waiter left: %q", admin.ZRange(ctx, qkey, 0, -1).Val())
			}
			released := time.Now()
			close(rel)
			if err := <-hdone; err != nil {
				t.Fatal(err)
			}
			e := <-ndone
			if e.err != nil {
				t.Fatalf("next: %v", e.err)
			}
			after := e.at.Sub(released)
			t.Logf("%s: next entered %v after the release, token %d, counter %v", how, after.Round(time.Millisecond), e.tok, e.cttl)
			if after > time.Second {
				t.Errorf("the next waiter entered %v after the release: the one that left (%s) was handed the key first", after.Round(time.Millisecond), how)
			}
			if e.cttl > 4*time.Second || e.cttl < 2*time.Second {
				t.Errorf("counter PTTL %v; the grantee's WithCounterTTL is 4s", e.cttl)
			}
		})
	}
}

// Prefixes that look like a queue entry's fields ("a|5000|1|600|",
// "7|", "|12|"): Inspect of a queue holding a fenced and an unfenced
// waiter under each reads identity, TTL and Fence right, and the release
// hands the key to each in turn at once.
func TestAdversary77_PrefixLikeEntryFields(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for i, prefix := range []string{"a|5000|1|600|", "7|", "|12|", "q|9|0|", "lease|3000"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			key := fmt.Sprintf("adv77-pfx-%d", i)
			holder, _ := sharedClient(t, lease.WithPrefix(prefix))
			a, arec := sharedClient(t, lease.WithPrefix(prefix), lease.WithRecheck(recheck), lease.WithCounterTTL(2*time.Second))
			b, brec := sharedClient(t, lease.WithPrefix(prefix), lease.WithRecheck(recheck))
			rel := make(chan struct{})
			hdone := hold(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true}, rel)
			ad := adv76Waiter(a, nil, key, "", lease.Spec{TTL: 3 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second, Fence: true}, 100*time.Millisecond)
			a75WaitEvent(t, arec, lease.EventWaiting, 1, 3*time.Second)
			bd := adv76Waiter(b, nil, key, "", lease.Spec{TTL: 4 * time.Second, Deadline: 15 * time.Second, Wait: 10 * time.Second}, 0)
			a75WaitEvent(t, brec, lease.EventWaiting, 1, 3*time.Second)
			info, err := b.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Waiters) != 2 || !info.Waiters[0].Fence || info.Waiters[0].TTL != 3*time.Second || info.Waiters[1].Fence || info.Waiters[1].TTL != 4*time.Second ||
				!hex.MatchString(info.Waiters[0].Identity) || !hex.MatchString(info.Waiters[1].Identity) {
				t.Errorf("prefix %q: Inspect's waiters %+v; want fenced TTL 3s, then unfenced TTL 4s, 32-hex identities", prefix, info.Waiters)
			}
			start := time.Now()
			close(rel)
			if err := <-hdone; err != nil {
				t.Fatal(err)
			}
			ea, eb := <-ad, <-bd
			if ea.err != nil || eb.err != nil {
				t.Fatalf("prefix %q: waiters: %v / %v", prefix, ea.err, eb.err)
			}
			t.Logf("prefix %q: a +%v tok %d; b +%v tok %d", prefix, ea.at.Sub(start).Round(time.Millisecond), ea.tok, eb.at.Sub(start).Round(time.Millisecond), eb.tok)
			if ea.at.Sub(start) > time.Second || eb.at.Sub(start) > 100*time.Millisecond+1500*time.Millisecond {
				t.Errorf("prefix %q: a waiter was not told of its handover", prefix)
			}
			if ea.tok == 0 || eb.tok != 0 {
				t.Errorf("prefix %q: tokens %d %d, want fenced then 0", prefix, ea.tok, eb.tok)
			}
		})
	}
}

// Lead terms are fenced: a standby's queue entry ends in its counter TTL.
// WatchLeader (on a third Client) reports the standby as leader about a
// round trip after the leader steps down (its term ends with its ctx),
// not at a re-check; the standby's owner, with '|' and digits in it,
// comes back as given; Inspect lists the standby as a fenced waiter with
// its identity and escaped owner.
func TestAdversary77_WatchLeaderFencedStandby(t *testing.T) {
	t.Parallel()
	const recheck = 4 * time.Second
	ctx := context.Background()
	key := "adv77-leader"
	a, arec := sharedClient(t, lease.WithRecheck(recheck), lease.WithCounterTTL(2*time.Second))
	b, brec := sharedClient(t, lease.WithRecheck(recheck))
	w, _ := sharedClient(t, lease.WithRecheck(recheck))
	type term struct {
		tok        lease.Token
		start, end time.Time
	}
	run := func(c *lease.Client, owner string) (context.CancelFunc, chan term, chan error) {
		tctx, cancel := context.WithCancel(ctx)
		terms, done := make(chan term, 2), make(chan error, 1)
		go func() {
			done <- c.Lead(tctx, key, lease.LeadSpec{TTL: 6 * time.Second, Owner: owner}, func(ctx context.Context) error {
				tr := term{start: time.Now()}
				tr.tok, _ = lease.TokenFrom(ctx)
				<-ctx.Done()
				tr.end = time.Now()
				terms <- tr
				return nil
			})
		}()
		return cancel, terms, done
	}
	acancel, aterms, adone := run(a, "a|1:2")
	a75WaitEvent(t, arec, lease.EventAcquired, 1, 5*time.Second)
	bcancel, bterms, bdone := run(b, "b|22/x")
	defer bcancel()
	a75WaitEvent(t, brec, lease.EventWaiting, 1, 5*time.Second)
	info, err := w.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 1 || !info.Waiters[0].Fence || !strings.HasSuffix(info.Waiters[0].Identity, "/b%7C22%2Fx") {
		t.Errorf("Inspect's waiters %+v: want the standby, fenced, identity ending in its escaped owner", info.Waiters)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	lch := w.WatchLeader(wctx, key)
	first := <-lch
	if first.Owner != "a|1:2" || first.Err != nil {
		t.Fatalf("WatchLeader's first report %+v, want owner a|1:2", first)
	}
	acancel()
	ta := <-aterms
	if err := <-adone; err != nil {
		t.Fatalf("leader a: %v", err)
	}
	var next lease.Leader
	deadline := time.After(8 * time.Second)
	for next.Owner != "b|22/x" {
		select {
		case next = <-lch:
			if next.Err != nil {
				t.Fatalf("WatchLeader: %v", next.Err)
			}
		case <-deadline:
			t.Fatalf("WatchLeader did not report b within 8s (last %+v)", next)
		}
	}
	seen := time.Now()
	bcancel()
	tb := <-bterms
	<-bdone
	t.Logf("a's term %d ended; b's term %d began +%v, WatchLeader reported b +%v", ta.tok, tb.tok, tb.start.Sub(ta.end).Round(time.Millisecond), seen.Sub(ta.end).Round(time.Millisecond))
	if next.Term != tb.tok || tb.tok <= ta.tok {
		t.Errorf("terms: a %d, b %d, WatchLeader reported %d", ta.tok, tb.tok, next.Term)
	}
	if g := seen.Sub(ta.end); g > time.Second {
		t.Errorf("WatchLeader reported the new leader %v after the old one's term ended (re-check %v)", g.Round(time.Millisecond), recheck)
	}
}
