package lease_test

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv38WireHook writes every argument that has a wire form
// (encoding.BinaryMarshaler, as go-redis's own writer checks for) into
// its bytes, in the command itself, before the command goes on: a hook
// that journals or signs commands by their wire bytes, or normalizes them
// for a proxy. go-redis then writes those bytes, on the first send and on
// every re-send after a lost reply.
// With stringer set it writes them by fmt.Stringer instead (the text a
// log shows), which marshals nothing.
type adv38WireHook struct{ stringer bool }

func (adv38WireHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (adv38WireHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (w adv38WireHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		for i, a := range args {
			if s, ok := a.(fmt.Stringer); ok && w.stringer {
				args[i] = s.String()
			} else if m, ok := a.(encoding.BinaryMarshaler); ok {
				if b, err := m.MarshalBinary(); err == nil {
					args[i] = string(b)
				}
			}
		}
		return next(ctx, cmd)
	}
}

// adv38ReplayHook carries out key's first acquire once while another
// identity holds the key (busy: the call joins the queue), frees the key,
// and sends the same command again, as go-redis does after a lost reply
// (the method of TestFirstGrantLeavesNoEntry).
type adv38ReplayHook struct {
	admin *redis.Client
	key   string

	mu       sync.Mutex
	firsts   []string
	members  []string // each release's ARGV[6] (and its error)
	queued   int64
	replayed bool
}

func (h *adv38ReplayHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv38ReplayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *adv38ReplayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || cmd.Name() != "evalsha" && cmd.Name() != "eval" || fmt.Sprint(args[3]) != lockKey(h.key) {
			return next(ctx, cmd)
		}
		if fmt.Sprint(args[2]) == "6" {
			err := next(ctx, cmd)
			h.mu.Lock()
			h.members = append(h.members, fmt.Sprintf("%s(%v)", args[3+6+5], err))
			h.mu.Unlock()
			return err
		}
		if fmt.Sprint(args[2]) != "4" {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.firsts = append(h.firsts, fmt.Sprint(args[len(args)-1]))
		if h.replayed {
			return err
		}
		h.replayed = true
		h.queued = h.admin.ZCard(ctx, "lease:{"+h.key+"}:q").Val()
		h.admin.Del(ctx, lockKey(h.key))
		err = next(ctx, cmd)
		h.firsts = append(h.firsts, fmt.Sprint(args[len(args)-1]))
		return err
	}
}

// Round 38 attacked 6c2affc, which let a waiting call granted by the
// first send of its first acquire skip the ZREM of its queue entry (in the
// grant and the release), telling a first send by a "firstArg" that
// counted its MarshalBinary calls. These attacks broke it, and 6c2affc
// was reverted: every grant and release of a call that may wait takes its
// entry out again. They stay as regression tests of what the call leaves
// in the queue after lost replies and re-sends.
//
// Attack 1: firstArg counts MarshalBinary calls, not sends. A hook that
// writes the arguments into their wire bytes (adv38WireHook) marshals the
// first argument once ("1"); go-redis's re-send after a lost reply then
// writes the same "1" again. The busy first send queued the call, the
// re-send is granted with ARGV[9] = "1" (no ZREM), the call counts one
// write (grantedFirst) and its release names no member: the finished
// call's entry stays, and the next release hands the key to it while a
// live waiter Q waits.
func TestAdversary38_WireBytesHookReplayLeavesEntry(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)

	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { wrdb.Close() })
	rh := &adv38ReplayHook{admin: admin, key: key}
	wrdb.AddHook(adv38WireHook{}) // outermost: the command is in wire bytes from here on
	wrdb.AddHook(rh)
	// W's re-check of 3s: an entry lives 6.1s after its last busy answer.
	wc, _ := newClient(t, wrdb, lease.WithRecheck(3*time.Second))
	hc, _ := adv23Client(t, srv.Addr())
	qc, qrec := adv23Client(t, srv.Addr())
	warm38(t, wc)
	warm38(t, hc)
	warm38(t, qc)

	if err := admin.Set(ctx, lockKey(key), "someone:1", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	var wid string
	var inFn []string
	err := wc.Do(ctx, key, lease.Spec{TTL: 4 * time.Second, Deadline: 30 * time.Second, Wait: 20 * time.Second}, func(ctx context.Context) error {
		l, _ := lease.FromContext(ctx)
		wid = l.Owner()
		m, x := adv23Queue(t, admin, key)
		inFn = adv23EntriesOf(m, x, wid)
		return nil
	})
	if err != nil {
		t.Fatalf("W: %v", err)
	}
	rh.mu.Lock()
	firsts, queued, members := rh.firsts, rh.queued, rh.members
	rh.mu.Unlock()
	if queued != 1 {
		t.Fatalf("the busy first send left %d entries, want 1: the scenario did not happen", queued)
	}
	afterW := admin.Get(ctx, lockKey(key)).Val()
	afterWTTL := admin.PTTL(ctx, lockKey(key)).Val()
	m, x := adv23Queue(t, admin, key)
	left := adv23EntriesOf(m, x, wid)
	t.Logf("after W returned the key holds %q for %v", afterW, afterWTTL)
	t.Logf("W's releases named members %q", members)
	t.Logf("W's acquire sends said %v; W's entries in fn %v, after W returned %v", firsts, inFn, left)

	// H takes the key (its first send granted), Q waits behind whatever is
	// queued, H releases: Q must get the key at once.
	hIn, hRelease, hDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		hDone <- hc.Do(ctx, key, lease.Spec{TTL: 4 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(context.Context) error {
			close(hIn)
			<-hRelease
			return nil
		})
	}()
	hStart := time.Now()
	select {
	case <-hIn:
	case <-time.After(9 * time.Second):
		t.Fatal("H never got the key")
	}
	hLag := time.Since(hStart)
	t.Logf("H entered %v after it started", hLag.Round(time.Millisecond))
	if strings.HasPrefix(afterW, wid+":") {
		t.Errorf("W's own release handed the key to W's finished call: the key held %q for %v; H waited %v", afterW, afterWTTL, hLag.Round(time.Millisecond))
	}
	qIn, qDone := make(chan time.Time, 1), make(chan error, 1)
	go func() {
		qDone <- qc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 15 * time.Second, Wait: 12 * time.Second}, func(context.Context) error {
			qIn <- time.Now()
			return nil
		})
	}()
	if !waitFor(5*time.Second, func() bool { return qrec.Count(lease.EventWaiting) > 0 }) {
		t.Fatal("Q never waited")
	}
	released := time.Now()
	close(hRelease)
	if err := <-hDone; err != nil {
		t.Fatalf("H: %v", err)
	}
	holder := admin.Get(ctx, lockKey(key)).Val()
	var lag time.Duration
	select {
	case at := <-qIn:
		lag = at.Sub(released)
	case <-time.After(14 * time.Second):
		t.Fatal("Q never got the key")
	}
	if err := <-qDone; err != nil {
		t.Errorf("Q: %v", err)
	}
	t.Logf("after H's release the key held %q (W was %q); Q entered %v after it", holder, wid, lag.Round(time.Millisecond))
	if len(left) != 0 {
		t.Errorf("W's call returned with its entry still queued: %v", left)
	}
	if strings.HasPrefix(holder, wid+":") {
		t.Errorf("H's release handed the key to W's finished call %q", wid)
	}
	if lag > time.Second {
		t.Errorf("Q entered %v after H's release, want at once", lag.Round(time.Millisecond))
	}
}

// adv38CutHook arms a proxy to cut the reply of key's first acquire (the
// server carries it out; go-redis sees EOF and sends it again after its
// retry backoff), and makes the holder's key expire before that re-send.
type adv38CutHook struct {
	admin *redis.Client
	p     *leasetest.Proxy
	key   string

	mu     sync.Mutex
	armed  bool
	firsts []string
	dials  []string
	queued int64
}

func (h *adv38CutHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		if h.armed {
			q := h.admin.ZRange(ctx, "lease:{"+h.key+"}:q", 0, -1).Val()
			h.queued = max(h.queued, int64(len(q)))
			h.dials = append(h.dials, fmt.Sprintf("dial: key %q queue %v", h.admin.Get(ctx, lockKey(h.key)).Val(), q))
		}
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}
func (h *adv38CutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *adv38CutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || cmd.Name() != "evalsha" || fmt.Sprint(args[2]) != "4" || fmt.Sprint(args[3]) != lockKey(h.key) {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		first := !h.armed
		h.armed = true
		h.mu.Unlock()
		if first {
			// The holder's lease runs out 150ms from now: after the first
			// send, before go-redis's re-send (300ms backoff).
			h.admin.PExpire(ctx, lockKey(h.key), 150*time.Millisecond)
			h.p.Set(leasetest.CutNextReply)
		}
		err := next(ctx, cmd)
		h.mu.Lock()
		h.firsts = append(h.firsts, fmt.Sprint(args[len(args)-1]))
		h.mu.Unlock()
		return err
	}
}

// Attack 1b: as attack 1, with go-redis's own re-send after a reply the
// network lost (a proxy cuts it; the first send ran busy and queued the
// call), and the holder's lease running out before the re-send. With
// no argument-writing hook the claim's mechanism must hold: the re-send
// says "0" and W leaves no entry. With a hook that writes the arguments by
// fmt.Stringer (nothing marshalled: the re-send says "1" too, the grant
// skips its ZREM, but the call does not count a single write and its
// release names its member) the entry is there during fn only.
func TestAdversary38_LostReplyResend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		wire, stringer bool
	}{{"noHook", false, false}, {"stringerHook", true, true}, {"wireHook", true, false}} {
		wire := tc.wire
		t.Run(tc.name, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			ctx := context.Background()
			key := uniqueKey(t)
			p := leasetest.StartProxy(t, srv.Addr())
			wrdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true,
				MinRetryBackoff: 300 * time.Millisecond, MaxRetryBackoff: 300 * time.Millisecond})
			t.Cleanup(func() { wrdb.Close() })
			ch := &adv38CutHook{admin: admin, p: p, key: key}
			if wire {
				wrdb.AddHook(adv38WireHook{stringer: tc.stringer})
			}
			wrdb.AddHook(ch)
			wc, _ := newClient(t, wrdb, lease.WithRecheck(3*time.Second))
			hc, _ := adv23Client(t, srv.Addr())
			warm38(t, wc)
			warm38(t, hc)
			time.Sleep(100 * time.Millisecond)
			if err := admin.Set(ctx, lockKey(key), "someone:1", 10*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			var wid string
			var inFn []string
			err := wc.Do(ctx, key, lease.Spec{TTL: 4 * time.Second, Deadline: 30 * time.Second, Wait: 20 * time.Second}, func(ctx context.Context) error {
				l, _ := lease.FromContext(ctx)
				wid = l.Owner()
				m, x := adv23Queue(t, admin, key)
				inFn = adv23EntriesOf(m, x, wid)
				return nil
			})
			if err != nil {
				t.Fatalf("W: %v", err)
			}
			ch.mu.Lock()
			firsts := ch.firsts
			t.Logf("before go-redis re-sent: %q", ch.dials)
			ch.mu.Unlock()
			afterW := admin.Get(ctx, lockKey(key)).Val()
			afterWTTL := admin.PTTL(ctx, lockKey(key)).Val()
			m, x := adv23Queue(t, admin, key)
			t.Logf("proxy cut %d replies; W's acquires said %v (the hook sees one per go-redis process, re-sends inside); W's entries in fn %v; after W: key %q for %v, queue %v %v",
				p.Cut(), firsts, inFn, afterW, afterWTTL, m, x)
			if p.Cut() != 1 {
				t.Fatalf("the proxy cut %d replies, want 1: the scenario did not happen", p.Cut())
			}
			ch.mu.Lock()
			queued := ch.queued
			ch.mu.Unlock()
			if queued != 1 {
				t.Fatalf("before the re-send the queue held %d entries, want W's: the first send was not carried out busy, the scenario did not happen", queued)
			}
			hStart := time.Now()
			hIn := make(chan struct{})
			if err := hc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(context.Context) error {
				close(hIn)
				return nil
			}); err != nil {
				t.Fatalf("H: %v", err)
			}
			hLag := time.Since(hStart)
			t.Logf("H, started after W returned, entered after %v", hLag.Round(time.Millisecond))
			if wid != "" && strings.HasPrefix(afterW, wid+":") {
				t.Errorf("W's own release handed the key to W's finished call: the key held %q for %v; H waited %v", afterW, afterWTTL, hLag.Round(time.Millisecond))
			}
			if left := adv23EntriesOf(m, x, wid); len(left) != 0 {
				t.Errorf("W's call returned with its entry still queued: %v", left)
			}
			if hLag > time.Second {
				t.Errorf("H waited %v for a key nobody used", hLag.Round(time.Millisecond))
			}
		})
	}
}

var _ = errors.Is

// warm38 loads the acquire and release scripts (a waiting call's) and
// opens c's connections.
func warm38(t *testing.T, c *lease.Client) {
	t.Helper()
	if err := c.Do(context.Background(), "warm38", lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("warm: %v", err)
	}
}

// adv38PipeCutHook is adv38CutHook for a pipeline (lease.WithReplicas
// sends the acquire and WAIT in one).
type adv38PipeCutHook struct{ *adv38CutHook }

func (h adv38PipeCutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ours := false
		for _, cmd := range cmds {
			args := cmd.Args()
			if len(args) >= 4 && cmd.Name() == "evalsha" && fmt.Sprint(args[2]) == "4" && fmt.Sprint(args[3]) == lockKey(h.key) {
				ours = true
			}
		}
		if ours {
			h.mu.Lock()
			first := !h.armed
			h.armed = true
			h.mu.Unlock()
			if first {
				h.admin.PExpire(ctx, lockKey(h.key), 150*time.Millisecond)
				h.p.Set(leasetest.CutNextReply)
			}
		}
		return next(ctx, cmds)
	}
}

// Control (claim holds): lease.WithReplicas's pipeline (acquire + WAIT)
// whose reply is cut after the busy first send queued the call, re-sent by
// go-redis after the holder's lease ran out: the re-send says "0", and W
// leaves no entry behind; H enters at once.
func TestAdversary38_ReplicatedPipelineLostReply(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	srv.WaitReplicas(t, rep)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	p := leasetest.StartProxy(t, srv.Addr())
	wrdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true,
		MinRetryBackoff: 300 * time.Millisecond, MaxRetryBackoff: 300 * time.Millisecond})
	t.Cleanup(func() { wrdb.Close() })
	ch := &adv38CutHook{admin: admin, p: p, key: key}
	wrdb.AddHook(adv38PipeCutHook{ch})
	wc, _ := newClient(t, wrdb, lease.WithRecheck(3*time.Second), lease.WithReplicas(1, 2*time.Second))
	hc, _ := adv23Client(t, srv.Addr())
	warm38(t, wc)
	warm38(t, hc)
	time.Sleep(100 * time.Millisecond)
	if err := admin.Set(ctx, lockKey(key), "someone:1", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	var wid string
	var inFn []string
	if err := wc.Do(ctx, key, lease.Spec{TTL: 4 * time.Second, Deadline: 30 * time.Second, Wait: 20 * time.Second}, func(ctx context.Context) error {
		l, _ := lease.FromContext(ctx)
		wid = l.Owner()
		m, x := adv23Queue(t, admin, key)
		inFn = adv23EntriesOf(m, x, wid)
		return nil
	}); err != nil {
		t.Fatalf("W: %v", err)
	}
	ch.mu.Lock()
	queued, dials := ch.queued, ch.dials
	ch.mu.Unlock()
	afterW := admin.Get(ctx, lockKey(key)).Val()
	m, x := adv23Queue(t, admin, key)
	t.Logf("proxy cut %d; before the re-send %q; W's entries in fn %v; after W: key %q, queue %v", p.Cut(), dials, inFn, afterW, m)
	if p.Cut() != 1 || queued != 1 {
		t.Fatalf("cut %d replies, %d entries before the re-send: the scenario did not happen", p.Cut(), queued)
	}
	hStart := time.Now()
	if err := hc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("H: %v", err)
	}
	hLag := time.Since(hStart)
	t.Logf("H entered after %v", hLag.Round(time.Millisecond))
	if left := adv23EntriesOf(m, x, wid); len(left) != 0 || len(inFn) != 0 {
		t.Errorf("W's entries: in fn %v, after %v", inFn, left)
	}
	if strings.HasPrefix(afterW, wid+":") || hLag > time.Second {
		t.Errorf("W's finished call held the key (%q); H waited %v", afterW, hLag.Round(time.Millisecond))
	}
}

// Attack 2 (kept leases): as TestAdversary23_StaleRestartLeavesGrantedEntry,
// but W keeps its lease (Spec.Keep) instead of waiting in fn. W queued
// behind H; Redis saves a snapshot; H hands the key to W; W's fn returns
// and its Client keeps the lease. Redis restarts from the snapshot: H's
// key and W's entry are back. The kept lease is found lost, and nothing
// took W's entry out (a kept lease's release named no member, and a lost
// one sent none): the next release (Z's, with Q waiting) handed the key to
// W's identity for W's TTL (3s). Failed before and after 6c2affc; fixed by
// dropEntry (a kept lease found lost takes its call's entry out) and
// releaseKept naming the member.
func TestAdversary38_KeptLeaseStaleRestartEntry(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	key := uniqueKey(t)
	hc, _ := adv23Client(t, srv.Addr())
	// W's re-check of 5s: its entry lives 10.1s after its last busy answer.
	wc, _ := adv23Client(t, srv.Addr(), lease.WithRecheck(5*time.Second))
	zc, _ := adv23Client(t, srv.Addr())
	qc, qrec := adv23Client(t, srv.Addr())
	for _, c := range []*lease.Client{hc, wc, zc, qc} {
		warm38(t, c)
	}
	release := make(chan struct{})
	hdone := hold(t, hc, key, lease.Spec{TTL: time.Second, Deadline: 20 * time.Second}, release)
	wID, wDone := make(chan string, 1), make(chan error, 1)
	go func() {
		wDone <- wc.Do(ctx, key, lease.Spec{TTL: 3 * time.Second, Deadline: 20 * time.Second, Wait: 15 * time.Second, Keep: 20 * time.Second}, func(ctx context.Context) error {
			l, _ := lease.FromContext(ctx)
			wID <- l.Owner()
			return nil
		})
	}()
	if !waitFor(5*time.Second, func() bool { return admin.ZCard(ctx, "lease:{"+key+"}:q").Val() == 1 }) {
		t.Fatal("W never queued")
	}
	time.Sleep(100 * time.Millisecond)
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	close(release)
	if err := <-hdone; err != nil {
		t.Fatalf("H: %v", err)
	}
	var id string
	select {
	case id = <-wID:
	case <-time.After(5 * time.Second):
		t.Fatal("W was not handed the key")
	}
	if err := <-wDone; err != nil {
		t.Fatalf("W: %v", err)
	}
	t.Logf("W (%s) returned, its lease kept: key %q", id, admin.Get(ctx, lockKey(key)).Val())
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	// The snapshot was taken with W's entry the only one queued; H's key
	// back shows it was loaded (W's Client may take the entry out again
	// before this looks: the fix).
	restored := admin.Get(ctx, lockKey(key)).Val()
	m, _ := adv23Queue(t, admin, key)
	t.Logf("after the restart: holder %q, queue %v", restored, m)
	if restored == "" || strings.HasPrefix(restored, id+":") {
		t.Fatalf("the key after the restart is %q, not H's: the snapshot was not loaded, the scenario did not happen", restored)
	}
	zIn, zRelease, zDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		zDone <- zc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(ctx context.Context) error {
			close(zIn)
			<-zRelease
			return nil
		})
	}()
	select {
	case <-zIn:
	case <-time.After(5 * time.Second):
		t.Fatal("Z never got the key")
	}
	qIn, qDone := make(chan time.Time, 1), make(chan error, 1)
	go func() {
		qDone <- qc.Do(ctx, key, lease.Spec{TTL: 2 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}, func(ctx context.Context) error {
			qIn <- time.Now()
			return nil
		})
	}()
	if !waitFor(5*time.Second, func() bool { return qrec.Count(lease.EventWaiting) > 0 }) {
		t.Fatal("Q never waited")
	}
	m, _ = adv23Queue(t, admin, key)
	t.Logf("before Z's release: queue %v", m)
	released := time.Now()
	close(zRelease)
	if err := <-zDone; err != nil {
		t.Fatalf("Z: %v", err)
	}
	holder := admin.Get(ctx, lockKey(key)).Val()
	holderTTL := admin.PTTL(ctx, lockKey(key)).Val()
	var lag time.Duration
	select {
	case at := <-qIn:
		lag = at.Sub(released)
	case <-time.After(9 * time.Second):
		t.Fatal("Q never got the key")
	}
	<-qDone
	t.Logf("after Z's release the key held %q for %v; Q entered %v after it", holder, holderTTL, lag.Round(time.Millisecond))
	if strings.HasPrefix(holder, id+":") {
		t.Errorf("Z's release handed the key to W's finished call %q (entry from the snapshot, W's lease kept at the restart)", id)
	}
	if lag > time.Second {
		t.Errorf("Q entered %v after Z's release, want at once", lag.Round(time.Millisecond))
	}
}
