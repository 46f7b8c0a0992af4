package main

// Adversary round 78 (leasectl): -sentinel with the Sentinels down, silent
// or partly healthy, bounded by -timeout (1c6fa0c, e8eacfb: closeSoon).

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv78Sentinel starts a Sentinel deployment that does not fail over
// while a test pauses its primary (down-after 60s).
func adv78Sentinel(t *testing.T) *leasetest.Sentinel {
	t.Helper()
	return leasetest.StartSentinel(t, func(o *leasetest.SentinelOptions) {
		o.DownAfter = 60 * time.Second
		o.FailoverTimeout = 60 * time.Second
	})
}

// adv78Deployment is adv78Sentinel with a lease client on it through the
// Sentinels, closed at the test's end.
func adv78Deployment(t *testing.T) (*leasetest.Sentinel, *lease.Client) {
	t.Helper()
	sn := adv78Sentinel(t)
	c, err := lease.New(sn.FailoverClient(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return sn, c
}

func adv78Leaks(s string) bool { return strings.Contains(s, "hunter2") }

// adv78URL is the failover URL of Sentinels first, rest..., with the data
// nodes' password in the query.
func adv78URL(first string, rest ...string) string {
	return "redis://" + first + "?addr=" + strings.Join(rest, "&addr=") + "&password=hunter2-q"
}

// adv78Failing runs leasectl command args[0] with -timeout, -sentinel
// master and -url url put before the rest of args, and checks what every
// failure through the Sentinels must do: exit 1, within -timeout + 0.5 s,
// no password printed. It returns stderr.
func adv78Failing(t *testing.T, stdin string, timeout time.Duration, master, url string, args ...string) string {
	t.Helper()
	full := append(args[:1:1], append([]string{"-timeout", timeout.String(), "-sentinel", master, "-url", url}, args[1:]...)...)
	start := time.Now()
	code, out, errOut := leasectl(t, stdin, full...)
	took := time.Since(start)
	t.Logf("exit %d after %v: stdout %q stderr %q", code, took.Round(time.Millisecond), out, errOut)
	if code != exitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	if took > timeout+500*time.Millisecond {
		t.Errorf("took %v with -timeout %v (want within -timeout + 0.5 s)", took, timeout)
	}
	if adv78Leaks(out + errOut) {
		t.Errorf("a password is printed: %q %q", out, errOut)
	}
	return errOut
}

// 1. Every command, Sentinels refusing or silent: exit 1 within -timeout
// + 0.5 s, a message naming the -timeout, no password.
func TestAdversary78_EveryCommandSentinelsDown(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	id := strings.Repeat("ab", 16)
	for kind, addr := range map[string]string{"refused": adv77Dead(t), "silent": silentAddr(t)} {
		url := "redis://sen:hunter2-u@" + addr + "?username=ops&password=hunter2-q"
		for _, tc := range []struct {
			name, stdin string
			args        []string
		}{
			{"list", "", []string{"list"}},
			{"list-json", "", []string{"list", "-json", "x:*"}},
			{"show", "", []string{"show", "k"}},
			{"release-ask", "yes\n", []string{"release", "k"}},
			{"release-yes-id", "", []string{"release", "-yes", "-id", id, "k"}},
			{"watch-for", "", []string{"watch", "-for", "5s", "-interval", "200ms"}},
			{"check", "", []string{"check"}},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				errOut := adv78Failing(t, tc.stdin, timeout, "mymaster", url, tc.args...)
				if !strings.Contains(errOut, "no answer within -timeout "+timeout.String()) {
					t.Errorf("the message does not say that nothing answered within -timeout: %q", errOut)
				}
				if strings.Contains(errOut, "a master the Sentinels monitor") {
					t.Errorf("with the Sentinels down the message blames the master name: %q", errOut)
				}
			})
		}
	}
}

// adv78PausedPrimary is a Sentinel deployment (adv78Sentinel) that
// answers a healthy list first, then has its primary paused (SIGSTOP, no
// failover) until the test ends, and the -url of all its Sentinels.
func adv78PausedPrimary(t *testing.T) (*leasetest.Sentinel, string) {
	t.Helper()
	sn := adv78Sentinel(t)
	addrs := sn.SentinelAddrs()
	url := adv78URL(addrs[0], addrs[1:]...)
	if code, out, errOut := leasectl(t, "", "list", "-timeout", "2s", "-sentinel", sn.Name, "-url", url); code != 0 {
		t.Fatalf("healthy list: exit %d %q %q", code, out, errOut)
	}
	sn.Data[0].Pause()
	t.Cleanup(sn.Data[0].Resume)
	return sn, url
}

// 2. Sentinels answer, the primary is paused (no failover: down-after
// 60s). Bounded by -timeout; the message must not put it on the Sentinels
// alone, and must not print the password.
func TestAdversary78_PrimaryPausedSentinelsAnswer(t *testing.T) {
	t.Parallel()
	sn, url := adv78PausedPrimary(t)
	const timeout = time.Second
	for _, args := range [][]string{{"list"}, {"show", "k"}, {"release", "-yes", "k"}, {"watch", "-for", "5s"}, {"check"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			errOut := adv78Failing(t, "", timeout, sn.Name, url, args...)
			if strings.Contains(errOut, "a master the Sentinels monitor") || strings.Contains(errOut, "all sentinels") {
				t.Errorf("the Sentinels answered, but the message blames them: %q", errOut)
			}
		})
	}
}

// 3. watch -for 10s -timeout 1s through the Sentinels: (a) the Sentinels
// go silent, the primary answers: watch goes on and ends at -for (exit 0,
// within -for + 0.5 s); (b) the primary and the Sentinels go silent:
// watch ends with exit 1 within about -timeout (+ -interval + 0.5 s) of
// the stall, as its help says.
func TestAdversary78_WatchStallThroughSentinels(t *testing.T) {
	t.Parallel()
	sn, c := adv78Deployment(t)
	a17Hold(t, c, "adv78w:a", lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute})
	addrs := sn.SentinelAddrs()
	url := adv78URL(addrs[0], addrs[1:]...)
	const (
		timeout  = time.Second
		interval = 200 * time.Millisecond
		limit    = 10 * time.Second
	)
	watch := func(t *testing.T, stall func(), resume func()) (code int, sinceStart, sinceStall time.Duration, out, errOut string) {
		var ob, eb syncBuffer
		done := make(chan int, 1)
		start := time.Now()
		go func() {
			done <- run(context.Background(), []string{"watch", "-timeout", timeout.String(), "-interval", interval.String(), "-for", limit.String(),
				"-sentinel", sn.Name, "-url", url, "adv78w:*"}, strings.NewReader(""), &ob, &eb, func(string) string { return "" })
		}()
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(ob.String(), "adv78w:a"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				resume()
				t.Fatalf("watch did not show the held lease in 5s: %q %q", ob.String(), eb.String())
			}
		}
		time.Sleep(time.Second)
		stall()
		stalled := time.Now()
		select {
		case code = <-done:
		case <-time.After(limit + 10*time.Second):
			resume()
			code = <-done
			t.Errorf("watch still running %v after the stall", limit+10*time.Second)
		}
		resume()
		return code, time.Since(start), time.Since(stalled), ob.String(), eb.String()
	}
	t.Run("sentinels-silent", func(t *testing.T) {
		pause := func() {
			for _, s := range sn.Sentinels {
				s.Pause()
			}
		}
		resume := func() {
			for _, s := range sn.Sentinels {
				s.Resume()
			}
		}
		code, total, after, out, errOut := watch(t, pause, resume)
		t.Logf("exit %d, %v after start, %v after the Sentinels stopped: stdout %q stderr %q", code, total.Round(time.Millisecond), after.Round(time.Millisecond), out, errOut)
		if code != exitOK {
			t.Errorf("the primary answered throughout, but watch exited %d: %q", code, errOut)
		}
		if total > limit+500*time.Millisecond {
			t.Errorf("watch -for %v took %v", limit, total)
		}
		if adv78Leaks(out + errOut) {
			t.Errorf("a password is printed: %q", errOut)
		}
	})
	t.Run("primary-and-sentinels-silent", func(t *testing.T) {
		pause := func() {
			sn.Data[0].Pause()
			for _, s := range sn.Sentinels {
				s.Pause()
			}
		}
		resume := func() {
			for _, s := range sn.Sentinels {
				s.Resume()
			}
			sn.Data[0].Resume()
		}
		code, total, after, out, errOut := watch(t, pause, resume)
		t.Logf("exit %d, %v after start, %v after the stall: stdout %q stderr %q", code, total.Round(time.Millisecond), after.Round(time.Millisecond), out, errOut)
		if code != exitFailure {
			t.Errorf("exit %d, want 1", code)
		}
		if after > timeout+interval+500*time.Millisecond {
			t.Errorf("watch -timeout %v ended %v after everything stopped answering", timeout, after)
		}
		if adv78Leaks(out + errOut) {
			t.Errorf("a password is printed: %q", errOut)
		}
	})
}

// 4. Several Sentinel addresses, the first one down (refused, a silent
// port, a real Sentinel paused), the others healthy: every command
// succeeds within -timeout + 0.5 s with its whole output.
func TestAdversary78_FirstSentinelDownOthersHealthy(t *testing.T) {
	t.Parallel()
	sn, c := adv78Deployment(t)
	keys := []string{"adv78f:a", "adv78f:b", "adv78f:c"}
	for _, k := range keys {
		a17Hold(t, c, k, lease.Spec{TTL: 30 * time.Second, Deadline: 2 * time.Minute})
	}
	addrs := sn.SentinelAddrs()
	const timeout = 2 * time.Second
	for _, tc := range []struct {
		name  string
		first string
		pause bool
	}{
		{"refused-first", adv77Dead(t), false},
		{"silent-first", silentAddr(t), false},
		{"real-sentinel-paused-first", addrs[0], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest := addrs
			if tc.pause {
				rest = addrs[1:]
				sn.Sentinels[0].Pause()
				defer sn.Sentinels[0].Resume()
			}
			url := adv78URL(tc.first, rest...)
			do := func(args ...string) (int, string, string) {
				t.Helper()
				full := append(args[:1:1], append([]string{"-timeout", timeout.String(), "-sentinel", sn.Name, "-url", url}, args[1:]...)...)
				start := time.Now()
				code, out, errOut := leasectl(t, "", full...)
				took := time.Since(start)
				t.Logf("%v: exit %d after %v: stdout %q stderr %q", args, code, took.Round(time.Millisecond), out, errOut)
				if took > timeout+500*time.Millisecond {
					t.Errorf("%v took %v with -timeout %v", args, took, timeout)
				}
				if adv78Leaks(out + errOut) {
					t.Errorf("a password is printed: %q", errOut)
				}
				return code, out, errOut
			}
			// The default -timeout (5s): how long the same list takes.
			start := time.Now()
			code, out, errOut := leasectl(t, "", "list", "-sentinel", sn.Name, "-url", url, "adv78f:*")
			took := time.Since(start)
			t.Logf("list with the default -timeout 5s: exit %d after %v: %q %q", code, took.Round(time.Millisecond), out, errOut)
			if code != exitOK || took > 5500*time.Millisecond {
				t.Errorf("list with the default -timeout 5s: exit %d after %v with two healthy Sentinels: %q", code, took, errOut)
			}
			code, out, errOut = do("list", "adv78f:*")
			if code != exitOK {
				t.Errorf("list: exit %d with two healthy Sentinels: %q", code, errOut)
			}
			for _, k := range keys {
				if !strings.Contains(out, k) {
					t.Errorf("list: %s missing from the output %q", k, out)
				}
			}
			code, out, errOut = do("list", "-json", "adv78f:*")
			if n := strings.Count(out, "\n"); code != exitOK || n != len(keys) {
				t.Errorf("list -json: exit %d, %d lines, want 0 and %d: %q %q", code, n, len(keys), out, errOut)
			}
			code, out, errOut = do("show", "adv78f:b")
			if code != exitOK || !strings.Contains(out, "waiters") {
				t.Errorf("show: exit %d, output %q %q (want the whole lease, ending with waiters)", code, out, errOut)
			}
		})
	}
}

// 5. 20 runs in a row with silent Sentinels: the background Closes may
// linger for a few seconds (the documented trade-off), but the goroutines
// must come back down, not grow with the number of runs.
func TestAdversary78_NoGoroutineGrowth(t *testing.T) {
	silent := silentAddr(t)
	refused := adv77Dead(t)
	before := settleGoroutines(2*time.Second, 0)
	const runs = 20
	start := time.Now()
	for i := range runs {
		addr := silent
		if i%2 == 1 {
			addr = refused
		}
		code, _, errOut := leasectl(t, "", "list", "-timeout", "300ms", "-sentinel", "mymaster", "-url", "redis://"+addr+"?password=hunter2-q")
		if code != exitFailure || adv78Leaks(errOut) {
			t.Errorf("run %d: exit %d %q", i, code, errOut)
		}
	}
	took := time.Since(start)
	peak := runtime.NumGoroutine()
	after := settleGoroutines(10*time.Second, before+5)
	t.Logf("%d runs in %v (%v each); goroutines: %d before, %d right after, %d after settling up to 10s", runs, took.Round(time.Millisecond),
		(took / runs).Round(time.Millisecond), before, peak, after)
	if took > runs*(300*time.Millisecond+500*time.Millisecond) {
		t.Errorf("%d runs with -timeout 300ms took %v", runs, took)
	}
	if after > before+5 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Errorf("goroutines: %d before, %d ten seconds after %d runs: the background Closes do not end\n%s", before, after, runs, buf[:n])
	}
}
