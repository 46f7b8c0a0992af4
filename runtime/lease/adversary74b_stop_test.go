package lease_test

// Round 74b: a holder process stopped (SIGSTOP) while its lease is kept.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// The child: ADV74B_KEEPER_ADDR set. It keeps a lease on ADV74B_KEEPER_KEY
// (TTL 1s, Keep 30s, fenced) and, for each line "do WAIT_MS" on stdin,
// calls Do again and prints "in TOKEN IN_UNIXNANO OUT_UNIXNANO" or
// "err MESSAGE".
func init() {
	addr := os.Getenv("ADV74B_KEEPER_ADDR")
	if addr == "" {
		return
	}
	key := os.Getenv("ADV74B_KEEPER_KEY")
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c, err := lease.New(rdb, lease.WithRecheck(200*time.Millisecond))
	if err != nil {
		fmt.Println("err", err)
		os.Exit(1)
	}
	call := func(wait time.Duration) {
		s := lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: wait, Keep: 30 * time.Second, Fence: true, MinValidity: 300 * time.Millisecond}
		var line string
		err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			in := time.Now()
			tok, _ := lease.TokenFrom(ctx)
			time.Sleep(20 * time.Millisecond)
			out := time.Now()
			if ctx.Err() != nil {
				out = in // told at once, or before: count no stay
			}
			line = fmt.Sprintf("in %d %d %d", tok, in.UnixNano(), out.UnixNano())
			return nil
		})
		if err != nil {
			fmt.Println("err", strings.ReplaceAll(err.Error(), "\n", " "), "|", line)
			return
		}
		fmt.Println(line)
	}
	call(0)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "do" {
			ms, _ := strconv.Atoi(f[1])
			call(time.Duration(ms) * time.Millisecond)
		}
	}
	c.Close()
	os.Exit(0)
}

// A holder process keeps its lease and is stopped (SIGSTOP: a GC pause, a
// frozen VM). Another Client waiting for the key gets it once the kept
// lease's validity ends (TTL after the last renewal, plus slack); when the
// holder resumes (SIGCONT) while the other holds, its next call must not
// reuse the kept lease (busy, or lost); after the other is done its call
// acquires afresh with a larger token.
func TestAdversary74b_StoppedKeeperProcess(t *testing.T) {
	t.Parallel()
	st := watchStalls(t, 20*time.Millisecond)
	srv := leasetest.StartRedis(t)
	key := "adv74b-stop"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ADV74B_KEEPER_ADDR="+srv.Addr(), "ADV74B_KEEPER_KEY="+key)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(within time.Duration) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the keeper process exited")
			}
			return l
		case <-time.After(within):
			t.Fatalf("no answer from the keeper process in %v", within)
		}
		return ""
	}
	parse := func(l string) (tok lease.Token, in, out time.Time, ok bool) {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "in" {
			return 0, in, out, false
		}
		n, _ := strconv.ParseUint(f[1], 10, 64)
		a, _ := strconv.ParseInt(f[2], 10, 64)
		b, _ := strconv.ParseInt(f[3], 10, 64)
		return lease.Token(n), time.Unix(0, a), time.Unix(0, b), true
	}
	first := next(5 * time.Second)
	tok1, _, _, ok := parse(first)
	if !ok {
		t.Fatalf("keeper's first call: %s", first)
	}
	// A kept call to confirm the keep (same token).
	io.WriteString(stdin, "do 0\n")
	if tok, _, _, ok := parse(next(3 * time.Second)); !ok || tok != tok1 {
		t.Fatalf("keeper's kept call: token %d ok %v, want %d", tok, ok, tok1)
	}
	time.Sleep(300 * time.Millisecond)

	cB, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
	stoppedAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var tokB lease.Token
	var spans adv74bSpans
	bEntered := make(chan time.Time, 1)
	bDone := make(chan error, 1)
	go func() {
		bDone <- cB.Do(context.Background(), key, lease.Spec{TTL: 2 * time.Second, Deadline: 6 * time.Second, Wait: 5 * time.Second, Fence: true, MinValidity: 300 * time.Millisecond},
			adv74bRun(&spans, "B", 1500*time.Millisecond, &tokB, bEntered))
	}()
	var bIn time.Time
	select {
	case bIn = <-bEntered:
	case err := <-bDone:
		t.Fatalf("B: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("B never entered")
	}
	if bound := time.Second + 600*time.Millisecond + st.lost(stoppedAt, bIn); bIn.Sub(stoppedAt) > bound {
		t.Errorf("B entered %v after the keeper stopped, want ≤ %v", bIn.Sub(stoppedAt), bound)
	}
	t.Logf("B entered %v after the stop, token %d (kept %d)", bIn.Sub(stoppedAt).Round(time.Millisecond), tokB, tok1)
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// At once after the resume, while B holds.
	io.WriteString(stdin, "do 0\n")
	l := next(4 * time.Second)
	t.Logf("keeper right after resume: %s", l)
	if tok, in, out, ok := parse(l); ok {
		spans.add(adv74bSpan{who: "A", tok: tok, in: in, out: out})
		t.Errorf("the resumed keeper entered (token %d, kept %d) while B holds the key", tok, tok1)
	} else if !strings.Contains(l, "busy") && !strings.Contains(l, "lost") {
		t.Errorf("the resumed keeper's call: %s, want busy or lost", l)
	}
	if err := <-bDone; err != nil {
		t.Errorf("B: %v", err)
	}
	io.WriteString(stdin, "do 2000\n")
	l = next(5 * time.Second)
	if tok, _, _, ok := parse(l); !ok {
		t.Errorf("the keeper's call after B: %s", l)
	} else if tok <= tokB {
		t.Errorf("the keeper re-entered with token %d, not above B's %d", tok, tokB)
	}
	spans.check(t)
}
