package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// dnsProbe prints how long a lookup of "FailoverClient" with a 2 s
// deadline took (a child in mode dnsprobe, with leasetest.SilentDNS): the
// control of TestSlowResolverBounded.
func dnsProbe() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := net.DefaultResolver.LookupIPAddr(ctx, "FailoverClient")
	fmt.Println(time.Since(start).Milliseconds(), errors.Is(err, context.DeadlineExceeded))
}

// runAs runs this test binary as command name with args and env added
// to the environment, and returns its exit code, output and time. (Round
// 81's children, adv81Child, say what to be in the environment.)
func runAs(t *testing.T, name string, env []string, args ...string) (int, string, string, time.Duration) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = name
	// Under -race a process that exits 0 sleeps a second first (the race
	// detector's atexit_sleep_ms), which would hide what is timed here.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s: %v", name, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String(), took
}

// go-redis v9.22.0 looks up a client's address in DNS as it makes the
// client, for up to 2 s whatever the caller's deadline; a failover
// client's address is the name "FailoverClient". With a resolver that
// did not answer (one lookup in 27 here, more with several at once),
// leasectl -sentinel -timeout 1s took 3 s: the client was made before
// -timeout's clock started. Now the making counts against -timeout: a
// resolver that never answers fails the command at -timeout, saying so,
// and a -timeout longer than go-redis's 2 s lets it go on and succeed.
func TestSlowResolverBounded(t *testing.T) {
	t.Parallel()
	// The control: in such a process a lookup of the name lasts the 2 s.
	code, out, errOut, _ := adv81Child(t, "dnsprobe", "silent", nil)
	var ms int
	var deadline bool
	if _, err := fmt.Sscan(out, &ms, &deadline); code != 0 || err != nil {
		t.Fatalf("dnsprobe: exit %d %q %q (%v)", code, out, errOut, err)
	}
	if ms < 1900 || !deadline {
		t.Fatalf("with the silent resolver a lookup took %d ms (deadline %v), want its 2 s deadline: the test cannot tell", ms, deadline)
	}

	sn := leasetest.StartSentinel(t)
	addrs := sn.SentinelAddrs()
	url := adv78URL(addrs[0], addrs[1:]...)
	t.Run("timeout-1s", func(t *testing.T) {
		code, out, errOut, took := adv81Child(t, "main", "silent", nil, "list", "-timeout", "1s", "-sentinel", sn.Name, "-url", url)
		t.Logf("exit %d after %v: %q %q", code, took.Round(time.Millisecond), out, errOut)
		if code != exitFailure {
			t.Errorf("exit %d, want 1", code)
		}
		// The process's start and exit, and dialSentinels' 100 ms: the
		// old code took 3 s.
		if took > 1700*time.Millisecond {
			t.Errorf("took %v with -timeout 1s", took)
		}
		for _, want := range []string{"no answer within -timeout 1s", `"FailoverClient"`, "is the resolver answering?", addrs[0] + " took the connection"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("the message does not say %q: %q", want, errOut)
			}
		}
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("a password is printed: %q", errOut)
		}
	})
	t.Run("timeout-4s", func(t *testing.T) {
		code, out, errOut, took := adv81Child(t, "main", "silent", nil, "list", "-timeout", "4s", "-sentinel", sn.Name, "-url", url)
		t.Logf("exit %d after %v: %q %q", code, took.Round(time.Millisecond), out, errOut)
		if code != 0 {
			t.Errorf("exit %d, want 0: go-redis's lookup ends after 2 s and the Sentinels answer", code)
		}
		if took < 1900*time.Millisecond || took > 3500*time.Millisecond {
			t.Errorf("took %v, want go-redis's 2 s lookup and little more", took)
		}
	})
}
