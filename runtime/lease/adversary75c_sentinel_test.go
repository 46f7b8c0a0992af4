package lease_test

// Adversary round 75c: the operator paths (Inspect, List, ForceRelease,
// Watch) on a Sentinel deployment, across a failover.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv75cFailover runs SENTINEL FAILOVER once the primary's replicas have
// its writes, and returns the new primary.
func adv75cFailover(t *testing.T, sn *leasetest.Sentinel) *leasetest.Server {
	t.Helper()
	ctx := context.Background()
	old, err := sn.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := old.WaitSync(sctx, sn.Data[1:]...); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 12*time.Second)
	defer fcancel()
	np, err := sn.Failover(fctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failed over from %s to %s", old.Addr(), np.Addr())
	return np
}

// adv75cRetry calls f (each with a budget of per) until it returns nil or
// within has passed; it returns f's last error.
func adv75cRetry(within, per time.Duration, f func(ctx context.Context) error) error {
	until := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), per)
		err := f(ctx)
		cancel()
		if err == nil || time.Now().After(until) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adv75cLeader is a Lead running in the background.
type adv75cLeader struct {
	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	terms   []lease.Token // tokens of the terms entered
	causes  []error       // why each term's ctx ended
	entered chan lease.Token
	ended   chan error
}

func adv75cLead(t *testing.T, c *lease.Client, key string, spec lease.LeadSpec) *adv75cLeader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &adv75cLeader{cancel: cancel, done: make(chan error, 1), entered: make(chan lease.Token, 16), ended: make(chan error, 16)}
	go func() {
		l.done <- c.Lead(ctx, key, spec, func(fctx context.Context) error {
			tok, _ := lease.TokenFrom(fctx)
			l.mu.Lock()
			l.terms = append(l.terms, tok)
			l.mu.Unlock()
			l.entered <- tok
			<-fctx.Done()
			l.ended <- context.Cause(fctx)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(10 * time.Second):
		}
	})
	return l
}

// A Sentinel failover (SENTINEL FAILOVER, the old primary alive) under
// four leases of one holder: a running call, a kept lease (Spec.Keep), a
// leader's term (Lead) and a hold-min. An operator's Client, made before
// the failover, then inspects each (the same holder as before: nothing
// missed, nothing reported free) and force-releases it. Each holder must
// learn of it as documented: ForceRelease's doc, "its next renewal
// (within a third of its TTL) or its release finds the lease gone, its
// function's context is cancelled with a cause wrapping ErrLost that says
// it was released from outside, and its Do returns an error wrapping
// ErrLost"; Spec.Keep's, "A lease released from outside (ForceRelease) ...
// its calls get ErrLost from then on" (the next call acquires afresh);
// a hold-min's end (ForceHoldEnded) leaves the key free. Nobody may be
// told released while the key still holds the identity on the primary.
func TestAdversary75c_SentinelForceReleaseAfterFailover(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	f := &adv75cFour{ttl: 4500 * time.Millisecond}
	f.a, f.recA = newClient(t, sn.FailoverClient(t, adv56ShortDial), lease.WithRecheck(200*time.Millisecond))
	f.op, _ = newClient(t, sn.FailoverClient(t, adv56ShortDial))
	f.b, _ = newClient(t, sn.FailoverClient(t, adv56ShortDial))
	adv75cHoldFour(t, f, [4]string{"adv75c:s:plain", "adv75c:s:kept", "adv75c:s:lead", "adv75c:s:hold"}, 10*time.Second)
	np := adv75cFailover(t, sn)
	select {
	case c := <-f.hp.cause:
		t.Fatalf("the plain holder lost its lease in the failover itself (not this round's subject): %v", c)
	default:
	}
	f.forceAfterFailover(t, np.Client(t), 3*time.Second, 500*time.Millisecond)
}

// adv75cChanges collects a Watch's changes.
type adv75cChanges struct {
	mu  sync.Mutex
	chs []lease.Change
}

func (w *adv75cChanges) add(ch lease.Change) {
	w.mu.Lock()
	w.chs = append(w.chs, ch)
	w.mu.Unlock()
}

func (w *adv75cChanges) all() []lease.Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]lease.Change(nil), w.chs...)
}

// find returns the first change of key of kind k.
func (w *adv75cChanges) find(key string, k lease.ChangeKind) (lease.Change, bool) {
	for _, ch := range w.all() {
		if ch.Info.Key == key && ch.Kind == k {
			return ch, true
		}
	}
	return lease.Change{}, false
}

// keys returns the keys of the changes seen.
func (w *adv75cChanges) keys() map[string]bool {
	m := map[string]bool{}
	for _, ch := range w.all() {
		m[ch.Info.Key] = true
	}
	return m
}

// of returns the changes of key, as "kind(how)@holder-prefix" strings.
func (w *adv75cChanges) of(key string) []string {
	var out []string
	for _, ch := range w.all() {
		if ch.Info.Key != key {
			continue
		}
		s := ch.Kind.String()
		if ch.How != "" {
			s += "(" + ch.How + ")"
		}
		h := ch.Info.Holder
		if len(h) > 8 {
			h = h[:8]
		}
		out = append(out, s+"@"+h)
	}
	return out
}

// A Watch (and a List) of an operator's Client made before a Sentinel
// failover, while one holder keeps three leases held through it (renewed
// on the new primary). Watch's doc: it "reports every lease held
// (ChangeHeld), then grants, hold-min releases and endings as it sees
// them"; a failed read "ends the watch with its error". So across the
// failover it either goes on, with no ending and no new grant of a lease
// held throughout (no false "expired", nothing reported twice), or ends
// with an error; and when it goes on, a handover after the failover is
// reported. List after the failover lists every held lease once.
func TestAdversary75c_SentinelWatchAcrossFailover(t *testing.T) {
	t.Parallel()
	const ttl = 4500 * time.Millisecond
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	a, _ := newClient(t, sn.FailoverClient(t, adv56ShortDial), lease.WithRecheck(200*time.Millisecond))
	b, _ := newClient(t, sn.FailoverClient(t, adv56ShortDial), lease.WithRecheck(200*time.Millisecond))
	op, _ := newClient(t, sn.FailoverClient(t, adv56ShortDial))
	keys := []string{"adv75c:w:1", "adv75c:w:2", "adv75c:w:3"}
	for _, k := range keys {
		holdUntil(t, a, k, lease.Spec{TTL: ttl, Deadline: time.Minute, Fence: true})
	}
	moved := "adv75c:w:moved"
	hm := holdUntil(t, a, moved, lease.Spec{TTL: ttl, Deadline: time.Minute})

	var w adv75cChanges
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wdone := make(chan error, 1)
	go func() { wdone <- op.Watch(wctx, "adv75c:w:*", 200*time.Millisecond, w.add) }()
	if !waitFor(5*time.Second, func() bool { return len(w.all()) >= len(keys)+1 }) {
		t.Fatalf("the watch's first listing: %v", w.all())
	}
	adv75cFailover(t, sn)
	// Let the watch look a few times on the new primary.
	time.Sleep(1500 * time.Millisecond)
	var werr error
	running := true
	select {
	case werr = <-wdone:
		running = false
		t.Logf("the watch ended with its error (allowed): %v", werr)
		if werr == nil {
			t.Errorf("the watch returned nil while its ctx was live")
		}
	default:
	}
	if running {
		// A handover after the failover: B queues, A releases.
		hb := startHolding(t, b, moved, lease.Spec{TTL: ttl, Deadline: time.Minute, Wait: 10 * time.Second})
		time.Sleep(300 * time.Millisecond)
		close(hm.release)
		hb.enter(t)
		if !waitFor(3*time.Second, func() bool {
			got := w.of(moved)
			return len(got) >= 3 && strings.HasPrefix(got[len(got)-1], "granted")
		}) {
			t.Errorf("watch after the failover: the handover of %s not reported within 3s: %v", moved, w.of(moved))
		}
	}
	for _, k := range keys {
		got := w.of(k)
		if len(got) != 1 || !strings.HasPrefix(got[0], "held@") {
			t.Errorf("watch across the failover, %s (held throughout by one holder): %v, want one held", k, got)
		}
	}
	// List after the failover.
	seen := map[string]int{}
	for cursor := ""; ; {
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
		page, next, err := op.List(lctx, "adv75c:w:*", cursor)
		lcancel()
		if err != nil {
			t.Fatalf("List after the failover: %v", err)
		}
		for _, in := range page {
			seen[in.Key]++
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("List after the failover: %s listed %d times: %v", k, seen[k], seen)
		}
	}
	wcancel()
	if running {
		select {
		case err := <-wdone:
			if err != nil {
				t.Errorf("watch after its ctx ended: %v", err)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("watch still running 3s after its ctx ended")
		}
	}
}
