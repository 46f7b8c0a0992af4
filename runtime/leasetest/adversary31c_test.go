package leasetest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// ACLUser "creates (or replaces)" a user, and "the user survives
// Restart". Replacing a user (a test that narrows an operator's rights
// after setting it up) and then restarting the server must work, with the
// replacement's password and rules. Before, each ACLUser added another
// "user" line for Restart, and redis-server refuses a config that defines
// a user twice: Restart failed (after 50 attempts, about 13 s).
func TestAdversary31c_ACLUserReplacedSurvivesRestart(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	old := srv.ACLUser(t, "app", "one", "~lease:*", "+@all")
	rdb := srv.ACLUser(t, "app", "two", "~lease:*", "-@all", "+ping", "+get")
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart after replacing an ACL user: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Restart took %v", took)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the replaced user cannot log in after Restart: %v", err)
	}
	if err := rdb.Set(ctx, "lease:x", "1", 0).Err(); err == nil {
		t.Error("after Restart the user has the first ACLUser's rules (SET allowed), not the replacement's")
	}
	if err := old.Ping(ctx).Err(); err == nil {
		t.Error("after Restart the user's first password still works")
	}
}

// A proxy that delays replies (SetDelay) simulates a slow server; a test
// that sets a long delay and ends must not wait that long for the
// proxy's Close (its Cleanup). Before, Close waited for every delayed
// chunk's sleep to end: 20 s here.
func TestAdversary31c_ProxyCloseDoesNotWaitForDelay(t *testing.T) {
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("a reply delayed by 20s arrived within 100ms")
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // the reply is now in the proxy, being delayed
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Proxy.Close took %v with a reply being delayed: it must stop at once", took)
	}
}

// fakeServer writes an executable script standing in for redis-server that
// appends a line to a count file each time it is started, then runs body;
// it returns the script's path and a func counting the starts.
func fakeServer(t *testing.T, body string) (string, func() int) {
	t.Helper()
	dir := t.TempDir()
	count := filepath.Join(dir, "starts")
	bin := filepath.Join(dir, "fake-redis-server")
	script := "#!/bin/sh\necho start >> " + count + "\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "start")
	}
}

// A redis-server that fails to start fails Start with a clear error,
// promptly, after one attempt, and leaves no files behind. launch retries
// only what a retry can cure: a port taken between the probe and the
// bind. Before, a server that started but never answered was waited for
// five times over (50 s with the default 10 s), each attempt leaving its
// log file in $TMPDIR, and one that refused its arguments was started five
// times.
func TestAdversary31c_FailedStartIsPromptAndClean(t *testing.T) {
	defer leasetest.SetStartTimeout(time.Second)()
	hang, hangStarts := fakeServer(t, "exec sleep 30")
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	bad, badStarts := fakeServer(t, "exec "+redisBin+" \"$@\" --no-such-directive 1")
	for _, tc := range []struct {
		name, bin string
		starts    func() int
		want      string
	}{
		{"never answers", hang, hangStarts, "did not answer"},
		{"refuses its arguments", bad, badStarts, "no-such-directive"},
	} {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		t.Setenv("LEASETEST_REDIS_SERVER", tc.bin)
		start := time.Now()
		s, err := leasetest.Start()
		took := time.Since(start)
		if err == nil {
			s.Stop()
			t.Fatalf("%s: Start succeeded", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.want)
		}
		if n := tc.starts(); n != 1 || took > 3*time.Second {
			t.Errorf("%s: started %d times, failed after %v; want once, within 3s", tc.name, n, took)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			var names []string
			for _, e := range left {
				names = append(names, e.Name())
			}
			t.Errorf("%s: a failed Start left %q in $TMPDIR", tc.name, names)
		}
	}
}

// Restart retries while another process has the server's port (the
// failure a retry can cure), and a restarted server is ours: it answers
// with its data gone.
func TestAdversary31c_RestartWaitsForItsPort(t *testing.T) {
	srv := leasetest.StartRedis(t)
	srv.Kill()
	ln, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		t.Fatalf("take the killed server's port: %v", err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		ln.Close()
	}()
	start := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart while the port was taken for 300ms: %v", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("Restart succeeded after %v, while another process had the port", took)
	}
	rdb := srv.Client(t)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// StartRedis passes extra arguments to redis-server; "--requirepass" is
// one a test of authenticated clients needs. The helpers' own connections
// (the readiness check, SetConfig, ACLUser) and Client authenticate with
// it. Before, the readiness check got NOAUTH until it gave up: StartRedis
// failed after 10 s (50 s before this round's retry fix).
func TestAdversary31c_RequirepassServerStarts(t *testing.T) {
	start := time.Now()
	srv, err := leasetest.Start("--requirepass", "pw")
	if err != nil {
		t.Fatalf("Start with --requirepass after %v: %v", time.Since(start), err)
	}
	defer srv.Stop()
	ctx := context.Background()
	rdb := srv.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Client of a --requirepass server: %v", err)
	}
	if err := srv.SetConfig(ctx, "maxmemory", "64mb"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Error("a client without the password is let in: --requirepass was not applied")
	}
}

// A test that fails (t.Fatal) with a server paused and a proxy delaying
// replies still stops them: no redis-server left running, no log file or
// directory left in $TMPDIR, and the failed test ends at once (the
// proxy's delay is not waited out). The test runs in a child process.
func TestAdversary31c_FailedTestCleansUp(t *testing.T) {
	if os.Getenv("LEASETEST_A31C_CHILD") == "1" {
		srv := leasetest.StartRedis(t)
		p := leasetest.StartProxy(t, srv.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		p.SetDelay(time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = rdb.Ping(ctx)
		cancel()
		info, err := srv.Client(t).Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
				fmt.Fprintln(os.Stderr, "pid", v)
			}
		}
		srv.Pause()
		t.Fatal("failing on purpose")
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdversary31c_FailedTestCleansUp$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LEASETEST_A31C_CHILD=1", "TMPDIR="+tmp)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil || !strings.Contains(string(out), "failing on purpose") {
		t.Fatalf("the child test did not fail as planned: %v\n%s", err, out)
	}
	if took > 5*time.Second {
		t.Errorf("the failed test took %v to end", took)
	}
	pid := 0
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "pid "); ok {
			pid, _ = strconv.Atoi(rest)
		}
	}
	if pid <= 0 {
		t.Fatalf("the child did not report its server's pid:\n%s", out)
	}
	if syscall.Kill(pid, 0) == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL) // ours: the child started it
		t.Errorf("the server (pid %d) of the failed test is still running", pid)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("the failed test left %q in $TMPDIR", names)
	}
}
