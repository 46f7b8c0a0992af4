package main

import (
	"net"
	"testing"
	"time"
)

// With the Sentinels down, a command gives up within its -timeout (and a
// little for the exit), whether the Sentinel's port refuses connections
// or accepts them and never answers. go-redis's failover client waited in
// Close for its Sentinel lookups: 3.6 s and 5 s with -timeout 2s.
func TestConnectBoundedWithSentinelsDown(t *testing.T) {
	t.Parallel()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accepts, reads nothing, answers nothing
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	const timeout = time.Second
	for name, addr := range map[string]string{"refused": refusedAddr, "silent": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := leasectl(t, "", "list", "-timeout", timeout.String(), "-sentinel", "mymaster", "-url", "redis://"+addr)
			took := time.Since(start)
			t.Logf("exit %d after %v: %q %q", code, took.Round(time.Millisecond), out, errOut)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if took > timeout+500*time.Millisecond {
				t.Errorf("took %v with -timeout %v", took, timeout)
			}
		})
	}
}
