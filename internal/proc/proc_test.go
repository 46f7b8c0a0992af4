package proc

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A child that prints the time over and over is stopped by Stop: no time it
// printed is later than Stop's return, even with both cores kept busy
// (without the wait for the stop, a child here printed up to milliseconds
// past the signal's return).
func TestStopWaitsForTheProcessToStop(t *testing.T) {
	if os.Getenv("PROC_TEST_CHILD") != "" {
		w := bufio.NewWriter(os.Stdout)
		for {
			w.WriteString(strconv.FormatInt(time.Now().UnixNano(), 10) + "\n")
			w.Flush()
		}
	}
	if os.Getenv("PROC_TEST_BUSY") != "" {
		for {
		}
	}
	// Two processes keep the cores busy (goroutines of this process do
	// not show the delay).
	for range 2 {
		busy := exec.Command(os.Args[0], "-test.run=^TestStopWaitsForTheProcessToStop$")
		busy.Env = append(os.Environ(), "PROC_TEST_BUSY=1")
		if err := busy.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = busy.Process.Kill()
			_ = busy.Wait()
		}()
	}
	for range 40 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStopWaitsForTheProcessToStop$")
		cmd.Env = append(os.Environ(), "PROC_TEST_CHILD=1")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		last, first := make(chan int64, 1), make(chan struct{})
		go func() {
			var n int64
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if v, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
					if n == 0 {
						close(first)
					}
					n = max(n, v)
				}
			}
			last <- n
		}()
		// Running: stopped while it prints (a child built with -race on a
		// busy machine takes a while to start).
		select {
		case <-first:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("the child printed nothing in 30s")
		}
		time.Sleep(5 * time.Millisecond)
		if err := Stop(cmd.Process); err != nil {
			t.Fatal(err)
		}
		stoppedAt := time.Now().UnixNano()
		time.Sleep(50 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		n := <-last
		if n == 0 {
			t.Fatal("the child printed nothing")
		}
		if n > stoppedAt {
			t.Fatalf("the child took a timestamp %v after Stop returned", time.Duration(n-stoppedAt))
		}
	}
}
