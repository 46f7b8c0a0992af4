package lease_test

// Adversary round 75c: the forced-release tests' shared part, on Sentinel
// and on Cluster: one holder's four leases, and what an operator's
// ForceRelease of each must bring about after a failover.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv75cFour is one holder's four leases: a running call (plain), a kept
// lease (kept), a leader's term (lead) and a hold-min (hold), taken by A;
// B is another Client of the same service, op an operator's.
type adv75cFour struct {
	ttl                     time.Duration
	plain, kept, lead, hold string
	a, b, op                *lease.Client
	recA                    *leasetest.Recorder
	hp                      *holding
	keepSpec                lease.Spec
	keptTok, termTok        lease.Token
	ld                      *adv75cLeader
	before                  map[string]lease.Info // each lease as op inspected it
}

// adv75cHoldFour has a take the four leases on keys (plain, kept, lead,
// hold), a kept call's budget keepDeadline, and op inspect them.
func adv75cHoldFour(t *testing.T, f *adv75cFour, keys [4]string, keepDeadline time.Duration) {
	t.Helper()
	ctx := context.Background()
	f.plain, f.kept, f.lead, f.hold = keys[0], keys[1], keys[2], keys[3]
	f.hp = holdUntil(t, f.a, f.plain, lease.Spec{TTL: f.ttl, Deadline: time.Minute, Fence: true})
	f.keepSpec = lease.Spec{TTL: f.ttl, Deadline: keepDeadline, Keep: time.Minute, Fence: true}
	if err := f.a.Do(ctx, f.kept, f.keepSpec, func(ctx context.Context) error { f.keptTok, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	f.ld = adv75cLead(t, f.a, f.lead, lease.LeadSpec{TTL: f.ttl, Owner: "adv75c-a", Backoff: 100 * time.Millisecond})
	select {
	case f.termTok = <-f.ld.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no term")
	}
	if err := f.a.Do(ctx, f.hold, lease.Spec{TTL: f.ttl, Deadline: time.Minute, HoldMin: time.Minute}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.before = map[string]lease.Info{}
	for _, k := range keys {
		f.before[k] = inspect(t, f.op, k)
		if f.before[k].Free() {
			t.Fatalf("%s free before the failover", k)
		}
	}
}

func (f *adv75cFour) keys() []string { return []string{f.plain, f.kept, f.lead, f.hold} }

// forceAfterFailover checks, after a failover to primary (a client of the
// node that now holds the keys), that op inspects each lease as before it,
// and force-releases each (each call retried within retry, per try, while
// the deployment settles): ForceReleased, and ForceHoldEnded for the hold,
// with the primary's key no longer holding the identity. Each holder must
// then learn of it as documented, within a third of the TTL plus slack of
// its forced release: the running call's and the term's causes wrap ErrLost
// (released from outside), the call's Do returns ErrLost, the candidate
// begins a term with a greater token, the kept lease reports EventLost and
// its next call does not run on the released grant, and the held key is
// free for B.
func (f *adv75cFour) forceAfterFailover(t *testing.T, primary redis.Cmdable, retry, per time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, k := range f.keys() {
		var info lease.Info
		err := adv75cRetry(retry, per, func(ctx context.Context) (err error) {
			info, err = f.op.Inspect(ctx, k)
			return err
		})
		if err != nil {
			t.Fatalf("Inspect(%s) after the failover: %v", k, err)
		}
		if b := f.before[k]; info.Holder != b.Holder || info.Token != b.Token || info.Hold != b.Hold {
			t.Errorf("Inspect(%s) after the failover: holder %q token %d hold %v; before it: %q %d %v", k, info.Holder, info.Token, info.Hold, b.Holder, b.Token, b.Hold)
		}
	}
	want := map[string]lease.ForceResult{f.plain: lease.ForceReleased, f.kept: lease.ForceReleased, f.lead: lease.ForceReleased, f.hold: lease.ForceHoldEnded}
	forcedAt := map[string]time.Time{}
	for _, k := range f.keys() {
		var res lease.ForceResult
		err := adv75cRetry(retry, per, func(ctx context.Context) (err error) {
			res, err = f.op.ForceRelease(ctx, k, f.before[k].Holder)
			return err
		})
		forcedAt[k] = time.Now()
		if err != nil {
			t.Errorf("ForceRelease(%s) after the failover: %v", k, err)
			continue
		}
		if res != want[k] {
			t.Errorf("ForceRelease(%s) after the failover: %v, want %v", k, res, want[k])
		}
		// Told released: the primary's key must not hold that identity.
		if v, _ := primary.Get(ctx, lockKey(k)).Result(); v != "" && strings.Contains(v, f.before[k].Holder) {
			t.Errorf("ForceRelease(%s) answered %v, but the primary still holds %q", k, res, v)
		}
	}
	bound := f.ttl/3 + 1500*time.Millisecond
	told := func(what string, err error, from time.Time) {
		t.Helper()
		t.Logf("%s told %v after the forced release: %v", what, time.Since(from).Round(time.Millisecond), err)
		if !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "released from outside") {
			t.Errorf("%s: %v, want ErrLost, released from outside", what, err)
		}
	}
	// The running call.
	select {
	case c := <-f.hp.cause:
		told("plain holder", c, forcedAt[f.plain])
		if err := <-f.hp.done; !errors.Is(err, lease.ErrLost) {
			t.Errorf("plain holder's Do: %v, want ErrLost", err)
		}
	case <-time.After(time.Until(forcedAt[f.plain].Add(bound))):
		t.Errorf("plain holder not told within %v of the forced release", bound)
	}
	// The leader's term.
	select {
	case c := <-f.ld.ended:
		told("leader term", c, forcedAt[f.lead])
	case <-time.After(time.Until(forcedAt[f.lead].Add(bound))):
		t.Errorf("leader not told within %v of the forced release", bound)
	}
	select {
	case tok := <-f.ld.entered:
		if tok <= f.termTok {
			t.Errorf("the next term's token %d, not above the forced-out term's %d", tok, f.termTok)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the candidate began no new term within 5s of its term's forced end")
	}
	// The kept lease: a loss event, and the next call acquires afresh.
	if !waitFor(time.Until(forcedAt[f.kept].Add(bound)), func() bool {
		for _, e := range f.recA.Events() {
			if e.Kind == lease.EventLost && e.Key == f.kept && e.At.After(forcedAt[f.kept].Add(-time.Second)) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no EventLost for the kept lease within %v of its forced release", bound)
	}
	var nextTok lease.Token
	err := f.a.Do(ctx, f.kept, f.keepSpec, func(ctx context.Context) error { nextTok, _ = lease.TokenFrom(ctx); return nil })
	switch {
	case errors.Is(err, lease.ErrLost):
	case err != nil:
		t.Errorf("the kept key's next call: %v", err)
	case nextTok == f.keptTok:
		t.Errorf("the kept key's next call, after the forced release was reported, ran on the released grant (token %d)", f.keptTok)
	}
	// The hold: the key is free for another caller.
	if err := f.b.Do(ctx, f.hold, lease.Spec{TTL: time.Second, Deadline: 2 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("a call on the key whose hold was ended: %v", err)
	}
}
