package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Many runs in one process with the silent resolver, each given up at a
// -timeout shorter than go-redis's 2 s lookup: every run ends within its
// -timeout, the clients go-redis finishes making afterwards are closed,
// and the process's goroutines come back to where they were (a process
// that runs leasectl's commands in a loop, as the tests do, must not
// grow). The child reports its goroutines before, right after the runs
// and once settled. What it can see is growth, not the Close itself: a
// failover client no command has used holds no goroutine and no
// connection, and one left unclosed (newWithin without its Close, tried
// in a scratch copy) also passes. Before 7722eea every run took 2.2 s
// here with -timeout 200ms. (A plain client named by an unresolved name is not
// here: go-redis v9.22.0 dials in a goroutine of the pool's with its own
// deadline, DialTimeout per attempt, five attempts, and goes on after the
// client is closed: its goroutines linger about 28 s after such a run.
// They end, and a leasectl process exits long before.)
func TestAdversary81_LateClientsClosed(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	sa := sn.SentinelAddrs()
	srv := leasetest.StartRedis(t)
	const (
		runs    = 12
		timeout = 200 * time.Millisecond
	)
	for _, tc := range []struct {
		name    string
		args    []string
		pending bool // go-redis is still making clients when the runs end
	}{
		{"sentinel", []string{"list", "-timeout", timeout.String(), "-sentinel", sn.Name, "-url", adv78URL(sa[0], sa[1:]...)}, true},
		{"sentinel-watch", []string{"watch", "-timeout", timeout.String(), "-for", "1s", "-sentinel", sn.Name, "-url", adv78URL(sa[0], sa[1:]...)}, true},
		{"plain-localhost", []string{"list", "-timeout", timeout.String(), "-url", "redis://localhost:" + adv81Port(srv.Addr())}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut, took := adv81Child(t, "loop", "silent", []string{adv81RunsEnv + "=" + strconv.Itoa(runs)}, tc.args...)
			var r adv81Loop
			if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
				t.Fatalf("loop child: exit %d after %v, %q %q (%v)", code, took, out, errOut, err)
			}
			t.Logf("runs took %v ms, exits %v; goroutines %d before, %d right after, %d %d ms later", r.TookMS, r.Codes, r.Before, r.After, r.Settled, r.SettledAfterMS)
			t.Logf("first run's stderr: %q", r.Stderr[0])
			for i, ms := range r.TookMS {
				// In process: no process start; closeSoon and
				// dialSentinels 100 ms each.
				if d := time.Duration(ms) * time.Millisecond; d > timeout+500*time.Millisecond {
					t.Errorf("run %d took %v with -timeout %v", i, d, timeout)
				}
				if strings.Contains(r.Stderr[i], adv81Secret) {
					t.Errorf("run %d printed a password", i)
				}
			}
			if tc.pending && r.After < r.Before+runs {
				t.Errorf("%d goroutines right after %d runs, %d before: go-redis was not making clients still? The test cannot tell", r.After, runs, r.Before)
			}
			if r.Settled > r.Before+2 {
				t.Errorf("%d goroutines %d ms after the runs, %d before: clients made late are not closed? The child's goroutines:\n%s", r.Settled, r.SettledAfterMS, r.Before, errOut)
			}
		})
	}
}
