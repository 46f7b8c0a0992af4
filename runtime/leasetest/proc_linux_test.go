package leasetest_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A server outlives no test process that dies without stopping it (a
// panic, a SIGKILL): a child process starts one, prints its pid and is
// killed; the server must be gone soon after. Before, such servers stayed
// up, one per dead process, for as long as the machine ran.
func TestServerDiesWithItsProcess(t *testing.T) {
	if os.Getenv("LEASETEST_ORPHAN_CHILD") == "1" {
		srv, err := leasetest.Start()
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		info, err := rdb.Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
				println("pid", v)
			}
		}
		time.Sleep(time.Minute) // killed by the parent long before
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithItsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LEASETEST_ORPHAN_CHILD=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := 0
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "pid "); ok {
			pid, _ = strconv.Atoi(rest)
			break
		}
	}
	if pid <= 0 {
		t.Fatal("the child did not report its server's pid")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the child's server (pid %d) is not running: %v", pid, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // ours: the child started it
			t.Fatalf("the server (pid %d) outlived the process that started it by 10s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
