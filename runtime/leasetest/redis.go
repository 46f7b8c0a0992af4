// Package leasetest helps test code that uses leases against real servers:
// it starts redis-server processes on free loopback ports and puts a fault
// proxy between a client and a server.
//
// A missing redis-server fails the test (it never skips): a lease test that
// did not talk to a real server proves nothing. Set LEASETEST_REDIS_SERVER
// to use a binary outside PATH.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started for a test. Its methods inject
// process faults: Pause/Resume (SIGSTOP/SIGCONT), Kill and Restart.
type Server struct {
	bin  string
	port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	log    string
	dir    string // the server's own working directory (cluster nodes.conf)
}

// StartRedis starts a redis-server without persistence on a free loopback
// port and stops it when the test ends. Extra arguments are passed to
// redis-server (for example "--replicaof", "127.0.0.1", "6380").
func StartRedis(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := Start(args...)
	if err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start is StartRedis for callers without a testing.TB (TestMain, tools).
// Call Stop when done.
func Start(args ...string) (*Server, error) {
	bin := os.Getenv("LEASETEST_REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis-server not found in PATH: install it (apt-get install -y redis-server) or set LEASETEST_REDIS_SERVER")
		}
	}
	var lastErr error
	for range 5 { // a free port can be taken between the probe and the bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, port: port, args: args}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
		os.RemoveAll(s.dir)
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "leasetest-redis-")
		if err != nil {
			return err
		}
		s.dir = dir
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "no", "--dir", s.dir,
	}, s.args...)
	out, err := os.CreateTemp("", "leasetest-redis-*.log")
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		os.Remove(out.Name())
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.log = cmd, exited, out.Name()
	s.mu.Unlock()

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(out.Name())
			os.Remove(out.Name())
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, log)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer PING: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Client returns a go-redis client for the server, closed when the test
// ends, with ContextTimeoutEnabled set (lease.New requires it). Options may
// adjust the defaults (address already set).
func (s *Server) Client(t testing.TB, adjust ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}
	for _, f := range adjust {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Pause stops the server process (SIGSTOP): connections stay open and
// requests get no reply, as with a long GC pause or a hung host.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Kill ends the server at once (SIGKILL) and waits for it to exit; without
// persistence all its data is gone.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Restart kills the server and starts a new one on the same port with the
// same arguments (an empty dataset, no loaded scripts).
func (s *Server) Restart() error {
	s.Kill()
	s.cleanLog()
	var err error
	for range 50 { // the port may linger briefly
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Stop kills the server and removes its log and directory.
func (s *Server) Stop() {
	s.Kill()
	s.cleanLog()
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

func (s *Server) cleanLog() {
	s.mu.Lock()
	if s.log != "" {
		os.Remove(s.log)
		s.log = ""
	}
	s.mu.Unlock()
}
