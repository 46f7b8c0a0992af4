package main

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// silentAddr is a loopback address that accepts connections and never
// answers (a hung server), until the test ends.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 1024)
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			default:
				c.Close()
			}
		}
	}()
	return ln.Addr().String()
}

// settleGoroutines waits up to max for the process's goroutines to come
// down to want, and returns their number then.
func settleGoroutines(max time.Duration, want int) int {
	deadline := time.Now().Add(max)
	n := runtime.NumGoroutine()
	for time.Now().Before(deadline) && n > want {
		time.Sleep(100 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// With the Sentinels down, a command gives up within its -timeout (and a
// little for the exit), whether the Sentinel's port refuses connections
// or accepts them and never answers. go-redis's failover client waited in
// Close for its Sentinel lookups: 3.6 s and 5 s with -timeout 2s. go-redis
// reports both as no answer; the message also says what each Sentinel's
// port did when dialled again (a refused port is no Sentinel there).
func TestConnectBoundedWithSentinelsDown(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	refused, silent := adv77Dead(t), silentAddr(t)
	for _, tc := range []struct {
		name, url string
		want      []string
	}{
		{"refused", "redis://" + refused, []string{"the Sentinel: " + refused + " refused the connection"}},
		{"silent", "redis://" + silent, []string{"the Sentinel: " + silent + " took the connection"}},
		{"both", "redis://" + refused + "?addr=" + silent, []string{"the Sentinels: ", refused + " refused the connection", silent + " took the connection"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := leasectl(t, "", "list", "-timeout", timeout.String(), "-sentinel", "mymaster", "-url", tc.url)
			took := time.Since(start)
			t.Logf("exit %d after %v: %q %q", code, took.Round(time.Millisecond), out, errOut)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if took > timeout+500*time.Millisecond {
				t.Errorf("took %v with -timeout %v", took, timeout)
			}
			for _, w := range append(tc.want, "no answer within -timeout "+timeout.String()) {
				if !strings.Contains(errOut, w) {
					t.Errorf("the message does not say %q: %q", w, errOut)
				}
			}
		})
	}
}
