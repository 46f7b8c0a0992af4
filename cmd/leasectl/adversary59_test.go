package main

// Adversary round 59 (leasectl, on c0278af): JSON and text output of
// strings other than the key, and of keys the text output could confuse;
// each failed before its fix.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv59Lead leads key with owner until the test ends; it returns once the
// term started.
func adv59Lead(t *testing.T, c *lease.Client, key, owner string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	over := make(chan struct{})
	go func() {
		defer close(over)
		_ = c.Lead(ctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: owner}, func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-over })
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatalf("lead %q as %q: no term", key, owner)
	}
}

// A leader's owner (LeadSpec.Owner; KeyPart leaves bytes >= 0x80 as they
// are) that is not UTF-8 makes holder and owner non-UTF-8. -json gave them
// with U+FFFD only: the holder show -json printed was not the holder, so
// `release -id <holder from -json>` refused, and two leaders' owners
// "pod-\xff" and "pod-\xfe" printed alike. holder_base64 and owner_base64
// carry their bytes.
func TestAdversary59_JSONNonUTF8HolderOwner(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adv59Lead(t, c, "lead:a", "pod-\xff")
	adv59Lead(t, c, "lead:b", "pod-\xfe")
	owners := map[string]string{}
	for _, k := range []string{"lead:a", "lead:b"} {
		info, err := c.Inspect(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := leasectl(t, "", "show", "-url", srv.URL(), "-json", k)
		if code != 0 {
			t.Fatalf("show %s: %d %q", k, code, errOut)
		}
		var j leaseJSON
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatal(err)
		}
		holder, owner := adv59Bytes(t, j.Holder, j.HolderBase64), adv59Bytes(t, j.Owner, j.OwnerBase64)
		owners[k] = owner
		if holder != info.Holder || owner != info.Owner {
			t.Errorf("show -json %s: holder %q, owner %q from %s; they are %q, %q", k, holder, owner, strings.TrimSpace(out), info.Holder, info.Owner)
		}
		code, out, errOut = leasectl(t, "", "release", "-url", srv.URL(), "-yes", "-id", holder, k)
		if code != 0 {
			t.Errorf("release -yes -id <holder from show -json> %s = %d\nstdout %q\nstderr %q", k, code, out, errOut)
		}
	}
	if owners["lead:a"] == owners["lead:b"] {
		t.Errorf("show -json: owners pod-\\xff and pod-\\xfe both read as %q", owners["lead:a"])
	}
}

// adv59Bytes is a -json string's bytes: its _base64 form when there is one.
func adv59Bytes(t *testing.T, s, b64 string) string {
	t.Helper()
	if b64 == "" {
		return s
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("base64 %q: %v", b64, err)
	}
	return string(b)
}

// show's text output printed a waiter's identity bare (printInfo), not
// through shown: a Lead candidate's identity carries its owner, so a
// waiter whose owner is not UTF-8 (or holds a bidi override) printed raw,
// where the holder line above it is quoted; -json lost its bytes.
func TestAdversary59_ShowWaiterIdentityQuotedAndExact(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "lead:w"
	adv59Lead(t, c, key, "pod-\xff")
	// a second candidate waits in the queue
	ctx, cancel := context.WithCancel(context.Background())
	over := make(chan struct{})
	go func() {
		defer close(over)
		_ = c.Lead(ctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: "pod-\xfe\u202e"}, func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		})
	}()
	defer func() { cancel(); <-over }()
	var info lease.Info
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		info, _ = c.Inspect(context.Background(), key)
		if len(info.Waiters) > 0 {
			break
		}
	}
	if len(info.Waiters) == 0 {
		t.Fatalf("no waiter queued: %+v", info)
	}
	code, out, errOut := leasectl(t, "", "show", "-url", srv.URL(), key)
	if code != 0 {
		t.Fatalf("show: %d %q", code, errOut)
	}
	t.Logf("show:\n%s", out)
	id := info.Waiters[0].Identity
	if strings.Contains(out, id) && shown(id) != id {
		t.Errorf("show prints waiter identity %q bare; shown gives %s (holder line is quoted)", id, shown(id))
	}
	// -json: waiter identity loses its bytes too
	code, out, _ = leasectl(t, "", "show", "-url", srv.URL(), "-json", key)
	var j leaseJSON
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil || len(j.Waiters) == 0 {
		t.Fatalf("show -json: %d %q", code, out)
	}
	if got := adv59Bytes(t, j.Waiters[0].Identity, j.Waiters[0].IdentityBase64); got != id {
		t.Errorf("show -json: waiter identity %q, it is %q", got, id)
	}
}

// release's prompt and messages printed the holder with %s, not shown:
// the holder the operator is asked to confirm was printed raw (non-UTF-8
// bytes, a bidi override), though printInfo above it quotes it.
func TestAdversary59_ReleaseMessagesQuoteTheHolder(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "lead:r"
	adv59Lead(t, c, key, "pod-\u202e\xff")
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := leasectl(t, "no\n", "release", "-url", srv.URL(), key)
	t.Logf("release (no): %d\nstdout %q\nstderr %q", code, out, errOut)
	if strings.Contains(errOut, "from holder "+info.Holder+"?") {
		t.Errorf("release prompt prints holder %q raw; shown gives %s", info.Holder, shown(info.Holder))
	}
	code, out, errOut = leasectl(t, "", "release", "-url", srv.URL(), "-yes", "-id", "0123456789abcdef0123456789abcdef", key)
	t.Logf("release -id other: %d\nstdout %q\nstderr %q", code, out, errOut)
	if strings.Contains(errOut, "is held by "+info.Holder+" ") {
		t.Errorf("release -id error prints holder %q raw", info.Holder)
	}
	code, out, errOut = leasectl(t, "", "release", "-url", srv.URL(), "-yes", key)
	t.Logf("release -yes: %d\nstdout %q\nstderr %q", code, out, errOut)
	if strings.Contains(out, "from holder "+info.Holder+" ") {
		t.Errorf("release message prints holder %q raw", info.Holder)
	}
}

// adv59PauseReader answers the confirmation once it paused the server's
// writes: the force release is sent and gets no reply (ErrUnknown).
type adv59PauseReader struct {
	pause func()
	done  bool
}

func (r *adv59PauseReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	r.done = true
	r.pause()
	return copy(p, "yes\n"), nil
}

// When a force release's outcome is unknown, release told the operator
// to "run 'leasectl show KEY'" with the key bare: a key that holds a
// space or a shell quote gave a command line naming another key. The key
// is now quoted for a shell.
func TestAdversary59_ReleaseUnknownHintQuotesTheKey(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "orders:42 ' ; leasectl release -yes 'orders:7"
	a17Hold(t, c, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute})
	rdb := srv.Client(t)
	in := &adv59PauseReader{pause: func() {
		if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", "1500", "WRITE").Err(); err != nil {
			t.Errorf("pause: %v", err)
		}
	}}
	var out, errb strings.Builder
	code := run(context.Background(), []string{"release", "-url", srv.URL(), "-timeout", "300ms", key}, in, &out, &errb, func(string) string { return "" })
	t.Logf("exit %d\nstdout %q\nstderr %s", code, out.String(), errb.String())
	if want := `run leasectl show -- 'orders:42 '\'' ; leasectl release -yes '\''orders:7'`; code != 1 || !strings.Contains(errb.String(), want) {
		t.Errorf("exit %d, stderr %q: want the hint %s", code, errb.String(), want)
	}
	time.Sleep(1600 * time.Millisecond)
}

// list's text output is a table padded with spaces (tabwriter, padding
// 2): shown quoted a key with a tab or an edge space, not one with two
// spaces in a row, so a key could carry its own columns. The key
// "col:1  <hex>  7  4.9s  -  0" listed as a row that read "col:1 held by
// <hex>, token 7".
func TestAdversary59_ListTextKeyCannotForgeColumns(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forged := "col:1  0123456789abcdef0123456789abcdef  7      4.9s  -     0"
	a17Hold(t, c, forged, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute})
	code, out, errOut := leasectl(t, "", "list", "-url", srv.URL(), "col:*")
	t.Logf("list: %d\n%s%s", code, out, errOut)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "col:1  ") {
			t.Errorf("key %q printed bare: its row begins %q", forged, line[:len(forged)])
		}
	}
}
