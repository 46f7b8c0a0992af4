package main

// Adversary round 17: leasectl against real redis-servers (inspection and
// force-release). The tests marked "Found by the round" showed a defect,
// since fixed, and fail on the code before the fix; the others are
// attacks that held.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// a17Holder holds key on c until release is closed; cause gets fn's
// context cause if it ended first, done gets Do's result.
type a17Holder struct {
	release chan struct{}
	cause   chan error
	done    chan error
	token   lease.Token
	once    sync.Once
}

func (h *a17Holder) stop() { h.once.Do(func() { close(h.release) }) }

func a17Hold(t *testing.T, c *lease.Client, key string, s lease.Spec) *a17Holder {
	t.Helper()
	h := &a17Holder{release: make(chan struct{}), cause: make(chan error, 1), done: make(chan error, 1)}
	entered := make(chan lease.Token, 1)
	go func() {
		h.done <- c.Do(context.Background(), key, s, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			entered <- tok
			select {
			case <-h.release:
			case <-ctx.Done():
				h.cause <- context.Cause(ctx)
			}
			return nil
		})
	}()
	select {
	case h.token = <-entered:
	case err := <-h.done:
		t.Fatalf("hold %q: %v", key, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("hold %q: not held in 5s", key)
	}
	t.Cleanup(func() {
		h.stop()
		select {
		case err := <-h.done:
			h.done <- err
		case <-time.After(10 * time.Second):
		}
	})
	return h
}

// a17Queue starts a waiter on key and returns once it is in the queue;
// entered is closed when its fn runs.
func a17Queue(t *testing.T, c *lease.Client, key string, s lease.Spec) (entered chan struct{}, done chan error) {
	t.Helper()
	before, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	entered, done = make(chan struct{}), make(chan error, 1)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		done <- c.Do(context.Background(), key, s, func(ctx context.Context) error {
			close(entered)
			// Hold on, so that what the test reads after the handover is
			// the waiter's lease.
			select {
			case <-stop:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, err := c.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) > len(before.Waiters) {
			return entered, done
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter on %q never queued", key)
		}
	}
}

// Found by the round (fixed: leasectl accepts "hex/owner"). A leader's term is shown by Inspect with Holder "hex/owner"
// (Info.Holder's documented form), and Client.ForceRelease accepts that
// identity (TestInspectAndForceReleaseALeader). But `leasectl release`
// refuses it as a value "the runtime did not write", and `release -id`
// with the identity that list/show print cannot release it either: an
// operator cannot force a stuck leader off with leasectl.
func TestAdversary17_ReleaseLeaderTerm(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "jobs:settle"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan lease.Token, 8)
	causes := make(chan error, 8)
	over := make(chan struct{})
	go func() {
		defer close(over)
		_ = c.Lead(ctx, key, lease.LeadSpec{TTL: 3 * time.Second, Owner: "pod-7"}, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			terms <- tok
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		})
	}()
	defer func() { cancel(); <-over }()
	select {
	case <-terms:
	case <-time.After(5 * time.Second):
		t.Fatal("no term")
	}
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "pod-7" {
		t.Fatalf("Inspect: %+v", info)
	}
	// show and list print the identity to use with -id.
	code, out, errOut := leasectl(t, "", "show", "-url", srv.URL(), key)
	if code != 0 || !strings.Contains(out, info.Holder) {
		t.Fatalf("show = %d %q %q; want holder %s", code, out, errOut, info.Holder)
	}
	code, out, errOut = leasectl(t, "", "release", "-url", srv.URL(), "-yes", "-id", info.Holder, key)
	if code != 0 {
		t.Errorf("leasectl release -id %s %s = exit %d\nstdout %q\nstderr %q\nwant the leader's term force-released (exit 0)", info.Holder, key, code, out, errOut)
	}
	code, out, errOut = leasectl(t, "", "release", "-url", srv.URL(), "-yes", key)
	if code != 0 && !strings.Contains(out+errOut, "changed holder") && !strings.Contains(out+errOut, "not held") {
		t.Errorf("leasectl release %s = exit %d\nstdout %q\nstderr %q\nwant the leader's term force-released (exit 0)", key, code, out, errOut)
	}
	if t.Failed() {
		return
	}
	select {
	case cause := <-causes:
		if !strings.Contains(fmt.Sprint(cause), "released from outside") {
			t.Fatalf("term ended with %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the term did not end after leasectl release")
	}
}

// A server that stops answering (SIGSTOP) mid-session: every command ends
// within about its -timeout with exit status 1 and a message, none hangs.
func TestAdversary17_PausedServerBounded(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a17Hold(t, c, "p:1", lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
	srv.Pause()
	defer srv.Resume()
	for _, args := range [][]string{
		{"show", "p:1"},
		{"list"},
		{"release", "-yes", "p:1"},
		{"watch", "-for", "2s"},
	} {
		args = append([]string{args[0], "-url", srv.URL(), "-timeout", "400ms"}, args[1:]...)
		start := time.Now()
		code, out, errOut := leasectl(t, "", args...)
		took := time.Since(start)
		if code != 1 || took > 3*time.Second || !strings.Contains(errOut, "leasectl "+args[0]+":") {
			t.Errorf("%q against a paused server: exit %d after %v\nstdout %q\nstderr %q\nwant exit 1 within 3s with a message", args, code, took, out, errOut)
		}
	}
}

// The server stops answering after release has shown the lease and while
// it waits for "yes": the forced release gets no reply. leasectl must
// exit 1 in bounded time, and say what it knows: ForceRelease reads the
// key before it releases, so that read times out and nothing is released
// (refused, "nothing released"); had the release itself been sent, the
// outcome would be unknown. Once the server resumes, a release that was
// sent runs (or not) but never touches another holder; one that was not
// leaves the holder's lease as it was.
func TestAdversary17_PausedBetweenShowAndConfirm(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "p:2"
	h := a17Hold(t, c, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true})
	stdinR, stdinW, _ := os.Pipe()
	defer stdinR.Close()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	var errb strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"release", "-url", srv.URL(), "-timeout", "500ms", key}, stdinR, outW, &errb, func(string) string { return "" })
		outW.Close()
	}()
	var out strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "hold-min") {
		n, err := outR.Read(buf)
		if err != nil {
			t.Fatalf("reading release's output: %v (%q)", err, out.String())
		}
		out.Write(buf[:n])
	}
	srv.Pause()
	start := time.Now()
	fmt.Fprintln(stdinW, "yes")
	stdinW.Close()
	var got int
	select {
	case got = <-code:
	case <-time.After(5 * time.Second):
		srv.Resume()
		t.Fatalf("release hung against a paused server")
	}
	took := time.Since(start)
	srv.Resume()
	notSent := strings.Contains(errb.String(), "nothing released")
	if got != 1 || took > 3*time.Second || !notSent && !strings.Contains(errb.String(), "may or may not have happened") {
		t.Fatalf("release: exit %d after %v, stderr %q; want 1 within 3s, nothing released or the outcome unknown", got, took, errb.String())
	}
	// The release sent before the pause may now run: it is the holder's
	// own identity, so the holder learns it.
	time.Sleep(200 * time.Millisecond)
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if notSent {
		if info.Free() {
			t.Fatal("leasectl said nothing was released, but the key is free")
		}
		return
	}
	if !info.Free() {
		// The release did not run (timed out before it was written?).
		return
	}
	select {
	case cause := <-h.cause:
		if !strings.Contains(cause.Error(), "released from outside") {
			t.Fatalf("holder's cause %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told after the delayed force-release ran")
	}
}

// Found by the round (fixed: the scripts publish with pcall, after their
// writes, so a refused publish no longer fails a release that happened).
// An operator user whose ACL has the commands but not the lease
// channels (Redis 7's default for new users is resetchannels: a user
// made as "~lease:* +@all" may publish nowhere). Forcing the release of a
// lease with a waiter: release.lua hands the key to the waiter and bumps
// the fence counter, then its redis.call('PUBLISH', channel) is refused,
// the script aborts with its writes kept, and ForceRelease classifies the
// error as ErrRefused ("the request was not carried out"). leasectl says
// "refused" and exits 1, while the holder has in fact lost its lease and
// the waiter holds it. The same for a hold-min (endhold.lua deletes, then
// PUBLISH fails).
func TestAdversary17_NoChannelACLReleaseReportsWhatHappened(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	srv.ACLUser(t, "ops", "pw", "~lease:*", "+@all") // no &channels
	url := "redis://ops:pw@" + srv.Addr()
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	key := "acl:handover"
	h := a17Hold(t, c, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true})
	before, _ := c.Inspect(context.Background(), key)
	entered, _ := a17Queue(t, w, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second, Fence: true})
	code, out, errOut := leasectl(t, "", "release", "-url", url, "-yes", key)
	after, _ := c.Inspect(context.Background(), key)
	changed := after.Holder != before.Holder
	t.Logf("release: exit %d\nstdout %q\nstderr %q\nbefore %s, after %s", code, out, errOut, before.Holder, after.Holder)
	if changed && (code != 0 || strings.Contains(errOut, "refused")) {
		t.Errorf("the lease WAS force-released (holder %s -> %s, token %d -> %d) but leasectl reported exit %d: %q",
			before.Holder, after.Holder, before.Token, after.Token, code, errOut)
	}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
	}
	h.stop()

	// Hold-min: the hold is ended (key deleted) and reported refused.
	key2 := "acl:hold"
	if err := c.Do(context.Background(), key2, lease.Spec{TTL: 30 * time.Second, Deadline: time.Minute, HoldMin: 30 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = leasectl(t, "", "release", "-url", url, "-yes", key2)
	info, _ := c.Inspect(context.Background(), key2)
	if info.Free() && (code != 0 || strings.Contains(errOut, "refused")) {
		t.Errorf("the hold-min WAS ended (key now free) but leasectl reported exit %d: stdout %q stderr %q", code, out, errOut)
	}
}

// An operator user lacking commands the release needs (no EVAL/EVALSHA;
// no SET): a clear refusal, exit 1, and the lease untouched.
func TestAdversary17_ACLMissingCommandsRefusesCleanly(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "acl:cmds"
	h := a17Hold(t, c, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
	before, _ := c.Inspect(context.Background(), key)
	for _, tc := range []struct {
		user  string
		rules []string
		cmd   []string
		want  string
	}{
		{"noeval", []string{"~lease:*", "&lease:*", "+@all", "-eval", "-evalsha"}, []string{"show", key}, "NOPERM"},
		{"noeval", nil, []string{"release", "-yes", key}, "NOPERM"},
		{"noset", []string{"~lease:*", "&lease:*", "+@all", "-set"}, []string{"release", "-yes", key}, "can't run this command"},
		{"noping", []string{"~lease:*", "&lease:*", "+@all", "-ping"}, []string{"show", key}, "NOPERM"},
		{"nokeys", []string{"&lease:*", "+@all"}, []string{"list"}, "NOPERM"},
	} {
		if tc.rules != nil {
			srv.ACLUser(t, tc.user, "pw", tc.rules...)
		}
		args := append([]string{tc.cmd[0], "-url", "redis://" + tc.user + ":pw@" + srv.Addr(), "-timeout", "2s"}, tc.cmd[1:]...)
		start := time.Now()
		code, out, errOut := leasectl(t, "", args...)
		if code != 1 || !strings.Contains(errOut, tc.want) || time.Since(start) > 3*time.Second {
			t.Errorf("%s: %q = exit %d after %v\nstdout %q\nstderr %q\nwant 1 naming %s", tc.user, tc.cmd, code, time.Since(start), out, errOut, tc.want)
		}
		if now, _ := c.Inspect(context.Background(), key); now.Holder != before.Holder || now.Token != before.Token {
			t.Fatalf("%s: the lease changed: %+v, was %+v", tc.user, now, before)
		}
	}
	select {
	case cause := <-h.cause:
		t.Fatalf("the holder lost its lease: %v", cause)
	default:
	}
}

// Odd keys (spaces, unicode, braces, percent signs, glob metacharacters,
// a 4 KiB key) round-trip through list -json, show and release.
func TestAdversary17_OddKeys(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{
		"a b", " lead", "ключ:😀", "{brace}", "x}{y", "%7B", "100%", "a*b?[c]\\d", "-yes", "tab\there", "quote\"'",
		strings.Repeat("long:", 800),
	}
	holders := map[string]*a17Holder{}
	for _, k := range keys {
		holders[k] = a17Hold(t, c, k, lease.Spec{TTL: 1500 * time.Millisecond, Deadline: time.Minute, Fence: true})
	}
	code, out, errOut := leasectl(t, "", "list", "-url", srv.URL(), "-json")
	if code != 0 {
		t.Fatalf("list: %d %q", code, errOut)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var j leaseJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("list -json line %q: %v", line, err)
		}
		seen[j.Key] = true
	}
	for _, k := range keys {
		if !seen[k] {
			t.Errorf("list -json lacks key %q (listed %d)", k, len(seen))
		}
	}
	// A pattern with an escaped glob metacharacter matches literally.
	code, out, _ = leasectl(t, "", "list", "-url", srv.URL(), "-json", `a\*b*`)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"key":"a*b?[c]\\d"`) {
		t.Errorf("list 'a\\*b*' = %d %q", code, out)
	}
	for _, k := range keys {
		info, _ := c.Inspect(context.Background(), k)
		code, out, errOut := leasectl(t, "", "show", "-url", srv.URL(), "-json", "--", k)
		var j leaseJSON
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.Key != k || j.Holder != info.Holder {
			t.Errorf("show %q = %d %q %q", k, code, out, errOut)
			continue
		}
		code, out, errOut = leasectl(t, "", "release", "-url", srv.URL(), "-yes", "-id", info.Holder, "--", k)
		if code != 0 || !strings.Contains(out, "the key is free") {
			t.Errorf("release %q = %d %q %q", k, code, out, errOut)
		}
	}
	for _, k := range keys {
		select {
		case cause := <-holders[k].cause:
			if !strings.Contains(cause.Error(), "released from outside") {
				t.Errorf("%q: holder's cause %v", k, cause)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%q: holder not told", k)
		}
	}
}

// A Cluster: leases on keys in many slots (on all three masters), each
// with a queued waiter; list shows them all with their waiter; release
// hands each to its waiter (never deletes it) and the holder learns it.
func TestAdversary17_ClusterListAndRelease(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	addrs := cl.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	rdb := cl.Client(t)
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := lease.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 9
	masters := map[string]bool{}
	var keys []string
	holders := map[string]*a17Holder{}
	waiters := map[string]chan struct{}{}
	for i := range n {
		k := fmt.Sprintf("cl:%d", i)
		keys = append(keys, k)
		m, err := cl.MasterForKey(context.Background(), "lease:{"+k+"}:l")
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Addr()] = true
		// TTL 3s: a holder learns of the forced release at its next
		// renewal (TTL/3, see TestForceReleaseHolderLoses), which the
		// test waits for key by key (9 × 3.3s with a TTL of 10s).
		holders[k] = a17Hold(t, c, k, lease.Spec{TTL: 3 * time.Second, Deadline: time.Minute, Fence: true})
		waiters[k], _ = a17Queue(t, w, k, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second, Fence: true})
	}
	if len(masters) < 2 {
		t.Logf("keys on %d masters only", len(masters))
	}
	code, out, errOut := leasectl(t, "", "list", "-cluster", "-url", url, "-json", "cl:*")
	if code != 0 {
		t.Fatalf("list: %d %q", code, errOut)
	}
	listed := map[string]leaseJSON{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var j leaseJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		listed[j.Key] = j
	}
	for _, k := range keys {
		j, ok := listed[k]
		if !ok || len(j.Waiters) != 1 || j.Token == 0 || !j.Waiters[0].Fence {
			t.Errorf("list: %q = %+v (ok %v)", k, j, ok)
		}
	}
	for _, k := range keys {
		before, _ := c.Inspect(context.Background(), k)
		code, out, errOut := leasectl(t, "", "release", "-cluster", "-url", url, "-yes", "-id", before.Holder, k)
		if code != 0 || !strings.Contains(out, "now held by "+before.Waiters[0].Identity) {
			t.Errorf("release %q = %d %q %q", k, code, out, errOut)
		}
		select {
		case <-waiters[k]:
		case <-time.After(5 * time.Second):
			t.Errorf("%q: the waiter did not enter", k)
		}
		select {
		case cause := <-holders[k].cause:
			if !strings.Contains(cause.Error(), "released from outside") {
				t.Errorf("%q: holder's cause %v", k, cause)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%q: the holder was not told", k)
		}
	}
}

// show's output describes fenced vs unfenced holders, a hold-min, and
// queued waiters (fenced or not, in arrival order) accurately.
func TestAdversary17_ShowAccuracy(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w1, _ := lease.New(srv.Client(t))
	defer w1.Close()
	w2, _ := lease.New(srv.Client(t))
	defer w2.Close()
	h := a17Hold(t, c, "acc:1", lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
	a17Queue(t, w1, "acc:1", lease.Spec{TTL: 7 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second, Fence: true})
	a17Queue(t, w2, "acc:1", lease.Spec{TTL: 4 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second})
	info, _ := c.Inspect(context.Background(), "acc:1")
	code, out, _ := leasectl(t, "", "show", "-url", srv.URL(), "acc:1")
	if code != 0 || len(info.Waiters) != 2 || !strings.Contains(out, "0 (no fencing)") || !regexp.MustCompile(`(?m)^waiters +2$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  1\. +`+info.Waiters[0].Identity+`  .*asks ttl 7s, fenced$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  2\. +`+info.Waiters[1].Identity+`  .*asks ttl 4s$`).MatchString(out) {
		t.Errorf("show = %d\n%s\nwaiters %+v", code, out, info.Waiters)
	}
	h.stop()
	if err := c.Do(context.Background(), "acc:2", lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute, HoldMin: 20 * time.Second, Fence: true}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	code, out, _ = leasectl(t, "", "list", "-url", srv.URL(), "acc:2")
	if code != 0 || !strings.Contains(out, "HOLD") || strings.Contains(out, "~") {
		t.Errorf("list hold = %d %q", code, out)
	}
	code, out, _ = leasectl(t, "", "show", "-url", srv.URL(), "acc:2")
	if code != 0 || !regexp.MustCompile(`(?m)^hold-min +yes`).MatchString(out) || strings.Contains(out, "~") || strings.Contains(out, "no fencing") {
		t.Errorf("show hold = %d %q", code, out)
	}
}

var _ = redis.Nil
