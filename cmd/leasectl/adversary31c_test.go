package main

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// leasectl hides the password of -url (and $REDIS_URL) in its messages
// and its -h. A URL that does not parse must not be echoed with the
// password either: a malformed URL in $REDIS_URL would otherwise put the
// operator's password into a CI log or a terminal recording. Before, the
// parse error quoted the whole URL.
func TestAdversary31c_MalformedURLHidesPassword(t *testing.T) {
	t.Parallel()
	const secret = "Sup3rS3cret"
	for _, url := range []string{
		"redis://ops:" + secret + "%zz@127.0.0.1:1/0", // a bad escape in the password
		"redis://ops:" + secret + "@127.0.0.1:1/0%zz", // a bad escape elsewhere
		"redis://ops:" + secret + "@127.0.0.1:xx/0",   // a bad port
		"redis://ops:" + secret + "@127.0.0.1:1/0?nope=1",
		"redis://ops:" + secret + "@127.0.0.1:1/abc",
	} {
		for _, cluster := range []bool{false, true} {
			args := []string{"list", "-url", url}
			if cluster {
				args = []string{"list", "-cluster", "-url", url}
			}
			code, out, errOut := leasectl(t, "", args...)
			// A Cluster URL has no database: ParseClusterURL takes "/abc",
			// and the dial then fails (exit 1).
			if code == exitOK || code == exitUsage && !strings.Contains(errOut, "-url") {
				t.Errorf("%q: exit %d, stderr %q; want a failure, a usage error naming -url", args, code, errOut)
			}
			if strings.Contains(out+errOut, secret) || strings.Contains(out+errOut, "S3cret") {
				t.Errorf("%q: the password is in the output:\nstdout %q\nstderr %q", args, out, errOut)
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// -timeout bounds "each request to Redis", for every command. watch runs
// until -for or Ctrl-C, but its requests (the listings every -interval,
// the look at a key after its notification) are requests too: a server
// that stops answering mid-watch must end the watch with exit status 1
// and a message within about -timeout. Before, watch's requests were
// bounded only by go-redis's own read timeout and its retries (3 s each,
// and more with read_timeout=-1 in the URL), whatever -timeout said.
func TestAdversary31c_WatchHonoursTimeoutWhenServerStops(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a17Hold(t, c, "w31:1", lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"watch", "-url", srv.URL(), "-timeout", "300ms", "-interval", "100ms", "-for", "20s"},
			strings.NewReader(""), &out, &errOut, func(string) string { return "" })
	}()
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(out.String(), "w31:1"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("watch did not show the held lease in 3s: stdout %q stderr %q", out.String(), errOut.String())
		}
	}
	srv.Pause()
	defer srv.Resume()
	paused := time.Now()
	select {
	case code := <-done:
		took := time.Since(paused)
		if code != exitFailure || !strings.Contains(errOut.String(), "leasectl watch:") || took > 1500*time.Millisecond {
			t.Errorf("watch with -timeout 300ms ended %v after the server stopped answering, exit %d, stderr %q; want exit 1 with a message within about -timeout", took, code, errOut.String())
		}
	case <-time.After(4 * time.Second):
		srv.Resume()
		code := <-done
		t.Errorf("watch with -timeout 300ms still running 4s after the server stopped answering (then exit %d, stderr %q)", code, errOut.String())
	}
}

// list prints "one line per held lease", show one line per field and watch
// one line per change. A key is any string: one with a newline or a tab
// (a key template fed a request's value) must not break those lines, nor
// let the key's text pass for another lease's line, with a holder an
// operator might then release. Keys with control characters are shown
// quoted (as release's messages already quote keys); so is a key that
// begins with a quote, so that no key can look like another's quoted form.
func TestAdversary31c_TextOutputOneLinePerLease(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forged := "orders:42  0123456789abcdef0123456789abcdef  1  29.9s  -  0"
	keys := []string{"evil\n" + forged, "tab\there", `"quoted"`}
	for _, k := range keys {
		a17Hold(t, c, k, lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
	}
	code, out, errOut := leasectl(t, "", "list", "-url", srv.URL())
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(lines) != 1+len(keys) {
		t.Errorf("list: exit %d, %d lines for %d leases:\n%s\nstderr %q", code, len(lines), len(keys), out, errOut)
	}
	if !strings.Contains(out, strconv.Quote(keys[0])) {
		t.Errorf("list does not show the key %q quoted:\n%s", keys[0], out)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "orders:42") {
			t.Errorf("list shows a line for a lease nobody holds, made of a key's text: %q", l)
		}
	}
	for _, k := range keys {
		code, out, errOut := leasectl(t, "", "show", "-url", srv.URL(), "--", k)
		if n := strings.Count(out, "\n"); code != 0 || n != 7 || strings.Contains(out, "\norders:42") {
			t.Errorf("show %q: exit %d, %d lines (want 7):\n%s\nstderr %q", k, code, n, out, errOut)
		}
	}
	code, out, errOut = leasectl(t, "", "watch", "-url", srv.URL(), "-for", "300ms")
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(lines) != len(keys) {
		t.Errorf("watch: exit %d, %d lines for %d held leases:\n%s\nstderr %q", code, len(lines), len(keys), out, errOut)
	}
}

// Exit status 2 is for usage mistakes. A -timeout that is not positive
// bounds every request to nothing: leasectl must say the flag is wrong,
// not "cannot reach Redis" (exit 1) about a server that answers. A
// negative -for is no duration to watch for either; it must not mean
// "until interrupted", as the default does.
func TestAdversary31c_BadDurationsAreUsageErrors(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	for _, args := range [][]string{
		{"list", "-timeout", "0"},
		{"show", "-timeout", "-1s", "k"},
		{"release", "-timeout", "0", "-yes", "k"},
		{"watch", "-timeout", "0", "-for", "1s"},
		{"watch", "-for", "-1s"},
	} {
		args = append([]string{args[0], "-url", srv.URL()}, args[1:]...)
		done := make(chan struct{})
		var code int
		var errOut string
		go func() {
			code, _, errOut = leasectl(t, "", args...)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("%q still running after 3s", args)
		}
		flagName := args[3]
		if code != exitUsage || !strings.Contains(errOut, flagName) || strings.Contains(errOut, "cannot reach") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 naming %s", args, code, errOut, flagName)
		}
	}
}

// A Cluster with one master stopped (SIGSTOP): list scans every master, so
// it must fail (exit 1) within about -timeout, never exit 0 with the other
// masters' leases as if they were all; watch ends with an error too.
// list's error names the stopped master (before the metadata questions
// got a share of -timeout, a live master could be named).
func TestAdversary31c_ClusterOneMasterPaused(t *testing.T) {
	t.Parallel()
	cl, url, c := clusterWithClient(t)
	ctx := context.Background()
	byMaster := map[*leasetest.Server]string{}
	for i := 0; len(byMaster) < 2 && i < 50; i++ {
		k := "cp:" + strconv.Itoa(i)
		m, err := cl.MasterForKey(ctx, "lease:{"+k+"}:l")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byMaster[m]; !ok {
			byMaster[m] = k
			a17Hold(t, c, k, lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
		}
	}
	var paused *leasetest.Server
	for m := range byMaster {
		paused = m
		break
	}
	paused.Pause()
	defer paused.Resume()
	for _, args := range [][]string{{"list"}, {"list", "-json"}, {"watch", "-for", "5s"}} {
		args = append([]string{args[0], "-cluster", "-url", url, "-timeout", "500ms"}, args[1:]...)
		start := time.Now()
		code, out, errOut := leasectl(t, "", args...)
		took := time.Since(start)
		if code != exitFailure || took > 3*time.Second || !strings.Contains(errOut, "leasectl "+args[0]+":") {
			t.Errorf("%q with a master paused: exit %d after %v\nstdout %q\nstderr %q\nwant exit 1 within 3s", args, code, took, out, errOut)
		}
		if args[0] == "list" && !strings.Contains(errOut, "SCAN on "+paused.Addr()) {
			t.Errorf("%q: the error does not name the stopped master %s: %q", args, paused.Addr(), errOut)
		}
	}
}

// Ctrl-C at release's "Type yes to confirm:" must abort: leasectl catches
// SIGINT (to end watch cleanly), so nothing else would end a process
// blocked reading the answer. run's context stands for the signal here.
// Before, release went on waiting for input after the interrupt.
func TestAdversary31c_InterruptAtConfirmationAborts(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := a17Hold(t, c, "ci:1", lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
	stdin, w := io.Pipe() // an operator who has not answered yet
	defer w.Close()
	ctx, interrupt := context.WithCancel(context.Background())
	var errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"release", "-url", srv.URL(), "ci:1"}, stdin, io.Discard, &errOut, func(string) string { return "" })
	}()
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(errOut.String(), "Type yes"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no confirmation asked in 3s: %q", errOut.String())
		}
	}
	interrupt()
	select {
	case code := <-done:
		if code != exitFailure || !strings.Contains(errOut.String(), "nothing released") {
			t.Errorf("release interrupted at the confirmation: exit %d, stderr %q; want exit 1, nothing released", code, errOut.String())
		}
	case <-time.After(2 * time.Second):
		w.Close()
		<-done
		t.Fatal("release still waiting for an answer 2s after the interrupt")
	}
	if info, err := c.Inspect(context.Background(), "ci:1"); err != nil || info.Holder == "" {
		t.Errorf("after the interrupted release: %+v, %v; want the lease still held", info, err)
	}
	select {
	case cause := <-h.cause:
		t.Errorf("the holder was told %v", cause)
	default:
	}
}

// When one master of a Cluster is stuck, an operator still shows (and
// releases) leases on the others: leasectl's first check that it can
// reach Redis must not depend on that master. Before, the check was a
// PING that the Cluster client sends to a random master: a third of the
// runs of show on a healthy master's key failed with "cannot reach Redis"
// naming the whole Cluster.
func TestAdversary31c_ClusterShowLiveKeyWithMasterPaused(t *testing.T) {
	t.Parallel()
	cl, url, c := clusterWithClient(t)
	ctx := context.Background()
	stuck, err := cl.MasterForKey(ctx, "lease:{stuck}:l")
	if err != nil {
		t.Fatal(err)
	}
	live := ""
	for i := 0; live == ""; i++ {
		k := "live:" + strconv.Itoa(i)
		if m, err := cl.MasterForKey(ctx, "lease:{"+k+"}:l"); err != nil {
			t.Fatal(err)
		} else if m != stuck {
			live = k
		}
	}
	a17Hold(t, c, live, lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
	stuck.Pause()
	defer stuck.Resume()
	for i := range 10 {
		code, out, errOut := leasectl(t, "", "show", "-cluster", "-url", url, "-timeout", "500ms", live)
		if code != 0 || !strings.Contains(out, "holder") {
			t.Fatalf("run %d: show %q on a live master while %s is stopped: exit %d\nstdout %q\nstderr %q", i, live, stuck.Addr(), code, out, errOut)
		}
	}
}

// "cannot reach Redis at URL" names the URL the operator gave, password
// hidden. An "@" after the host (a client_name such as ops@laptop) is no
// user info: before, the message cut the URL at the last "@" and showed
// "redis://127.0.0.1:xxxxx@laptop", a host that was never asked, or, with
// a password, hid the host and the seeds behind it.
func TestAdversary31c_UnreachableURLShownFaithfully(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "-url", "redis://127.0.0.1:1/0?client_name=ops@laptop"}, "redis://127.0.0.1:1/0?client_name=ops@laptop"},
		{[]string{"list", "-url", "redis://ops:Sup3rS3cret@127.0.0.1:1/0?client_name=ops@laptop"}, "redis://ops:xxxxx@127.0.0.1:1/0?client_name=ops@laptop"},
		{[]string{"list", "-cluster", "-url", "redis://ops:Sup3rS3cret@127.0.0.1:1?addr=127.0.0.1:2&client_name=a@b"}, "redis://ops:xxxxx@127.0.0.1:1?addr=127.0.0.1:2&client_name=a@b"},
	} {
		code, _, errOut := leasectl(t, "", tc.args...)
		if code != exitFailure || !strings.Contains(errOut, "cannot reach Redis at "+tc.want+":") || strings.Contains(errOut, "S3cret") {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 naming %s", tc.args, code, errOut, tc.want)
		}
	}
}

// A -prefix that no service can use (lease.WithPrefix refuses '{' and
// '}') is a usage mistake: exit 2, naming -prefix, before connecting.
// Before, leasectl connected and then failed with exit 1.
func TestAdversary31c_BadPrefixIsUsageError(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"a{", "x}", "{lease}:"} {
		code, _, errOut := leasectl(t, "", "list", "-url", "redis://127.0.0.1:1", "-prefix", p)
		if code != exitUsage || !strings.Contains(errOut, "-prefix") || strings.Contains(errOut, "cannot reach") {
			t.Errorf("list -prefix %q: exit %d, stderr %q; want exit 2 naming -prefix, before connecting", p, code, errOut)
		}
	}
}

// clusterWithClient starts a 3-master Cluster and returns it, its URL for
// leasectl (every node an addr) and a lease Client on it, closed when the
// test ends.
func clusterWithClient(t *testing.T) (*leasetest.Cluster, string, *lease.Client) {
	t.Helper()
	cl := leasetest.StartCluster(t, 3)
	addrs := cl.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	c, err := lease.New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return cl, url, c
}
