package main

import (
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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

// refusedAddr is a loopback address (IPv6 if v6) whose port refuses
// connections until the test ends: a socket bound to it that never
// listens, so the kernel answers every SYN with a reset and no other
// socket can take the port meanwhile. A port listened on and closed
// again, as these tests used before, could be taken by a redis-server
// another test started (leasetest picks its ports the same way), and a
// "refused" Sentinel would then answer.
func refusedAddr(t *testing.T, v6 bool) string {
	t.Helper()
	family, sa := syscall.AF_INET, syscall.Sockaddr(&syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	if v6 {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Addr: [16]byte{15: 1}}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	switch a := got.(type) {
	case *syscall.SockaddrInet4:
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
	case *syscall.SockaddrInet6:
		addr = net.JoinHostPort("::1", strconv.Itoa(a.Port))
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s took a connection: no refusing address on this machine", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialling %s: %v, want connection refused", addr, err)
	}
	return addr
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
