package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Owners and keys made of the characters the runtime's formats use as
// separators ('|' in a handover's message and a queue member, ':' and '/'
// in the lock's value, '~' its hold mark, '{' '}' the hash tag, '%' the
// escape). Claims: Leader and WatchLeader report the owner exactly as
// given (LeadSpec.Owner: "It is stored with the lease while the candidate
// leads; Leader and WatchLeader report it"), and a step-down hands over
// at once by the release's message (terms and re-checks last a minute, so
// a handover within seconds can only come from the message, which must
// parse whatever the owner holds).
func TestAdversary72b_SeparatorOwnersHandOver(t *testing.T) {
	t.Parallel()
	const long = time.Minute
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	key := "k|1:2/{x}%~" + uniqueKey(t)
	owners := []string{"~a|1|2|3:4/5%41{t}", "b\x00|\n:9"}
	cands := newCandidates(t, srv, 2, lease.WithRecheck(long))
	observer, _ := newClient(t, srv.Client(t), lease.WithRecheck(long))
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch := observer.WatchLeader(wctx, key)
	type term struct {
		owner string
		tok   lease.Token
		at    time.Time
	}
	entered := make(chan term, 4)
	cancels := make([]context.CancelFunc, 2)
	dones := make([]chan error, 2)
	for i, cd := range cands {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i], dones[i] = cancel, make(chan error, 1)
		owner := owners[i]
		go func() {
			dones[i] <- cd.c.Lead(ctx, key, lease.LeadSpec{TTL: long, Owner: owner}, func(fctx context.Context) error {
				tok, _ := lease.TokenFrom(fctx)
				entered <- term{owner, tok, time.Now()}
				<-fctx.Done()
				return nil
			})
		}()
		if i == 0 {
			select {
			case tm := <-entered:
				if tm.owner != owners[0] {
					t.Fatalf("first term %q", tm.owner)
				}
				l, err := observer.Leader(context.Background(), key)
				if err != nil || l.Owner != owners[0] || l.Term != tm.tok {
					t.Fatalf("Leader = %+v, %v; want owner %q term %d", l, err, owners[0], tm.tok)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no first term")
			}
		}
	}
	// The queue's key: '%', '{' and '}' of the key are escaped (%XX).
	q := "lease:{" + strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(key) + "}:q"
	if !waitFor(5*time.Second, func() bool { return rdb.ZCard(context.Background(), q).Val() == 1 }) {
		t.Fatalf("the second candidate never queued (%s: %v; keys %v)", q, rdb.ZCard(context.Background(), q).Val(), rdb.Keys(context.Background(), "*").Val())
	}
	expect := func(owner string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		var got []lease.Leader
		for {
			select {
			case l := <-watch:
				got = append(got, l)
				if l.Owner == owner && l.Err == nil {
					return
				}
			case <-deadline:
				t.Fatalf("watch: no report of owner %q within 5s; reports %+v", owner, got)
			}
		}
	}
	expect(owners[0])
	stopAt := time.Now()
	cancels[0]()
	select {
	case tm := <-entered:
		if tm.owner != owners[1] {
			t.Fatalf("second term %q", tm.owner)
		}
		if d := tm.at.Sub(stopAt); d > 2*time.Second {
			t.Errorf("handover took %v: the release's message did not hand the lease over", d)
		}
		l, err := observer.Leader(context.Background(), key)
		if err != nil || l.Owner != owners[1] || l.Term != tm.tok {
			t.Errorf("Leader = %+v, %v; want owner %q term %d", l, err, owners[1], tm.tok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no handover within 5s (terms and re-checks last a minute)")
	}
	expect(owners[1])
	cancels[1]()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Errorf("Lead = %v", err)
		}
	}
}

// A lease the Client keeps (a Do with Spec.Keep on the key) and a Lead on
// the same key in the same Client. The kept lease is not a term: the
// campaign must start a term of its own (a new token, greater than the
// kept lease's; the owner stored) and soon — the kept lease is "released
// as soon as" a waiter needs it and no call uses it, not held for its
// whole Keep while a candidate waits.
func TestAdversary72b_LeadBehindOwnKeptLease(t *testing.T) {
	t.Parallel()
	const keep = 6 * time.Second
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	key := uniqueKey(t)
	var kept lease.Token
	if err := c.Do(context.Background(), key, lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Fence: true, Keep: keep}, func(ctx context.Context) error {
		kept, _ = lease.TokenFrom(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	in := make(chan lease.Token, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Lead(ctx, key, lease.LeadSpec{TTL: time.Second, Owner: "me"}, func(fctx context.Context) error {
			tok, _ := lease.TokenFrom(fctx)
			in <- tok
			<-fctx.Done()
			return nil
		})
	}()
	select {
	case tok := <-in:
		d := time.Since(start)
		t.Logf("term %d started %v after the campaign (kept lease token %d, Keep %v)", tok, d.Round(time.Millisecond), kept, keep)
		if tok <= kept {
			t.Errorf("term token %d, want greater than the kept lease's %d (a new term)", tok, kept)
		}
		l, err := c.Leader(context.Background(), key)
		if err != nil || l.Owner != "me" || l.Term != tok {
			t.Errorf("Leader = %+v, %v; want owner me, term %d", l, err, tok)
		}
		if d > 2*time.Second {
			t.Errorf("the campaign waited %v behind its own Client's kept lease (Keep %v)", d, keep)
		}
	case <-time.After(keep + 4*time.Second):
		t.Fatal("no term")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Lead = %v", err)
	}
}

// The only candidate leads when redis-server is killed, stays down for
// 2s, then comes back empty on the same port. Claims: the leader is told
// it lost its term (ErrLost) within its TTL of the kill (its validity
// clock: no renewal can be confirmed); Lead keeps campaigning (it does
// not return) and, with its backoff capped at the TTL, leads again within
// about a TTL of the server's return, with a greater token (tokens are
// floored by the server's clock, the counter being gone); a watch reports
// an error while Redis is down (once the last leader's lease ran out) and
// the new term once it is back.
func TestAdversary72b_LeaderAcrossServerKill(t *testing.T) {
	t.Parallel()
	const ttl, recheck = 800 * time.Millisecond, 100 * time.Millisecond
	const slack = 400 * time.Millisecond
	st := watchStalls(t, 5*time.Millisecond)
	srv := leasetest.StartRedis(t)
	key := uniqueKey(t)
	c, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	observer, _ := newClient(t, srv.Client(t), lease.WithRecheck(recheck))
	type term struct {
		tok      lease.Token
		from, to time.Time
		cause    error
	}
	entered, ended := make(chan *term, 8), make(chan *term, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Lead(ctx, key, lease.LeadSpec{TTL: ttl, Owner: "solo", Backoff: 50 * time.Millisecond}, func(fctx context.Context) error {
			x := &term{from: time.Now()}
			x.tok, _ = lease.TokenFrom(fctx)
			entered <- x
			<-fctx.Done()
			x.to, x.cause = time.Now(), context.Cause(fctx)
			ended <- x
			return nil
		})
	}()
	var first *term
	select {
	case first = <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no term")
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch := observer.WatchLeader(wctx, key)
	var reports []watched
	collect := func(until time.Time, stop func(lease.Leader) bool) bool {
		for {
			select {
			case l := <-watch:
				reports = append(reports, watched{l, time.Now()})
				if stop(l) {
					return true
				}
			case <-time.After(time.Until(until)):
				return false
			}
		}
	}
	if !collect(time.Now().Add(2*time.Second), func(l lease.Leader) bool { return l.Term == first.tok }) {
		t.Fatalf("watch never reported the term; reports %+v", reports)
	}
	killedAt := time.Now()
	srv.Kill()
	select {
	case x := <-ended:
		if !errors.Is(x.cause, lease.ErrLost) {
			t.Errorf("term ended with %v, want ErrLost", x.cause)
		}
		if d := x.to.Sub(killedAt) - st.lost(killedAt, x.to); d > ttl+slack {
			t.Errorf("leader told %v after the kill, want within the TTL %v", d, ttl)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the leader was not told it lost its term with Redis down")
	}
	if !collect(killedAt.Add(3*time.Second), func(l lease.Leader) bool { return l.Err != nil }) {
		t.Errorf("watch reported no error with Redis down; reports %+v", reports)
	}
	time.Sleep(time.Until(killedAt.Add(2 * time.Second)))
	select {
	case err := <-done:
		t.Fatalf("Lead returned %v with Redis down; want it to keep campaigning", err)
	default:
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	var second *term
	select {
	case second = <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no term within 5s of Redis coming back")
	}
	if d := second.from.Sub(backAt) - st.lost(backAt, second.from); d > ttl+slack {
		t.Errorf("led again %v after Redis came back, want within about a TTL (%v: the backoff's cap)", d, ttl)
	}
	if second.tok <= first.tok {
		t.Errorf("term after the restart has token %d <= %d", second.tok, first.tok)
	}
	if !collect(time.Now().Add(3*time.Second), func(l lease.Leader) bool { return l.Term == second.tok && l.Err == nil }) {
		t.Errorf("watch never reported the new term %d; reports %+v", second.tok, reports)
	}
	t.Logf("told after %v; led again %v after Redis came back", first.to.Sub(killedAt).Round(time.Millisecond), second.from.Sub(backAt).Round(time.Millisecond))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Lead = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Lead did not return")
	}
}
