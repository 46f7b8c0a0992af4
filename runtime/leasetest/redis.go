// Package leasetest helps test code that uses leases against real servers:
// it starts redis-server processes on free loopback ports — single servers,
// replicas, Sentinel and Cluster deployments, TLS-only servers — and puts a
// fault proxy between a client and a server.
//
// A missing redis-server fails the test (it never skips): a lease test that
// did not talk to a real server proves nothing. Set LEASETEST_REDIS_SERVER
// to use a binary outside PATH (valkey-server works too; Sentinel runs the
// same binary with --sentinel).
package leasetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/proc"
)

// Server is a redis-server process started for a test. Its methods inject
// process faults: Pause/Resume (SIGSTOP/SIGCONT), Kill and Restart.
type Server struct {
	bin      string
	port     int
	dir      string    // the server's own working directory (nodes.conf, sentinel.conf, certificates)
	conf     string    // config file given as the first argument, or ""
	sentinel bool      // run in sentinel mode
	tls      *tlsFiles // non-nil: listen on a TLS port only
	tlsConf  *tls.Config

	mu     sync.Mutex
	args   []string // extra arguments; SetConfig and ACLUser add to them for Restart
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	paused bool
	log    string
	admin  *redis.Client // the helpers' own connection, see do
}

// StartRedis starts a redis-server without persistence on a free loopback
// port and stops it when the test ends. Extra arguments are passed to
// redis-server (for example "--maxmemory", "10mb"; with "--requirepass",
// the helpers' own connections and Client authenticate).
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
// Call Stop when done. On Linux a server also ends when the process that
// started it dies without stopping it (a panic, a kill).
func Start(args ...string) (*Server, error) { return launch(args, nil) }

func serverBinary() (string, error) {
	if bin := os.Getenv("LEASETEST_REDIS_SERVER"); bin != "" {
		return bin, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found in PATH: install it (apt-get install -y redis-server) or set LEASETEST_REDIS_SERVER")
	}
	return bin, nil
}

// launch starts a server on a free port. setup, when set, prepares s (its
// port chosen, its directory made) before the process starts; what it
// leaves in s and in s.dir is reused by Restart.
func launch(args []string, setup func(*Server) error) (*Server, error) {
	bin, err := serverBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // a free port can be taken between the probe and the bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "leasetest-redis-")
		if err != nil {
			releasePort(port)
			return nil, err
		}
		s := &Server{bin: bin, port: port, dir: dir, args: slices.Clone(args)}
		if setup != nil {
			if err := setup(s); err != nil {
				os.RemoveAll(dir)
				releasePort(port)
				return nil, err
			}
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
		os.RemoveAll(s.dir)
		releasePort(port)
		if !errors.Is(lastErr, errPortTaken) {
			break // another attempt would fail the same way, or wait as long
		}
	}
	return nil, lastErr
}

// errPortTaken marks a start that failed because another process had the
// port: the only failure that trying again (on another port, or after the
// port is freed) can cure.
var errPortTaken = errors.New("port taken")

// ports are the ports of this process's servers, from their start to
// Stop, so that no new server takes a port a killed one will restart on,
// or a cluster node's bus port (port+10000).
var ports = struct {
	sync.Mutex
	used map[int]bool
}{used: map[int]bool{}}

// freePort returns a free loopback port that is not, and is not a bus port
// of, a port reserved by another server, and reserves it; release frees it.
func freePort() (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ports.Lock()
		clash := ports.used[p] || ports.used[p+10000] || ports.used[p-10000]
		if !clash {
			ports.used[p] = true
		}
		ports.Unlock()
		if !clash {
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port")
}

func releasePort(p int) {
	ports.Lock()
	delete(ports.used, p)
	ports.Unlock()
}

func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if s.sentinel {
		args = append(args, "--sentinel")
	}
	if s.tls != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.tls.cert, "--tls-key-file", s.tls.key,
			"--tls-ca-cert-file", s.tls.ca, "--tls-auth-clients", "no")
	} else {
		args = append(args, "--port", strconv.Itoa(s.port))
	}
	s.mu.Lock()
	extra := slices.Clone(s.args)
	s.mu.Unlock()
	args = append(append(args,
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "no", "--dir", s.dir,
		// Full syncs start at once instead of after 5s (Redis 7's default),
		// so replicas attach quickly.
		"--repl-diskless-sync-delay", "0",
	), extra...)
	out, err := os.CreateTemp("", "leasetest-redis-*.log")
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		os.Remove(out.Name())
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.log, s.paused = cmd, exited, out.Name(), false
	s.mu.Unlock()

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), Password: passwordIn(extra), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		// INFO rather than PING: the answer must come from our process, not
		// from another server that took the port while ours was down.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			pid := parseInfo(info)["process_id"]
			if pid == strconv.Itoa(cmd.Process.Pid) {
				return nil
			}
			err = fmt.Errorf("port %d is answered by another process (pid %s): %w", s.port, pid, errPortTaken)
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(out.Name())
			s.cleanLog()
			if strings.Contains(string(log), "Address already in use") {
				return fmt.Errorf("%s on port %d exited (%w): %s", s.bin, s.port, errPortTaken, log)
			}
			return fmt.Errorf("%s on port %d exited: %s", s.bin, s.port, log)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			log, _ := os.ReadFile(out.Name())
			s.cleanLog()
			if errors.Is(err, errPortTaken) {
				return fmt.Errorf("%s on port %d did not answer: %w", s.bin, s.port, err)
			}
			return fmt.Errorf("%s on port %d did not answer within %v: %v; its output: %q", s.bin, s.port, startTimeout, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startTimeout bounds the wait for a started server to answer.
var startTimeout = 10 * time.Second

// Addr returns host:port of the server (its TLS port for a TLS server).
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Client returns a go-redis client for the server, closed when the test
// ends, with ContextTimeoutEnabled set (lease.New needs it of a Cluster
// client, and with it a plain client's hooks see lease commands). Options may
// adjust the defaults (address, TLS for a TLS server, and the password of
// a server started with --requirepass, already set).
func (s *Server) Client(t testing.TB, adjust ...func(*redis.Options)) *redis.Client {
	t.Helper()
	s.mu.Lock()
	pw := passwordIn(s.args)
	s.mu.Unlock()
	o := &redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), Password: pw, ContextTimeoutEnabled: true}
	for _, f := range adjust {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// passwordIn returns the default user's password that args give the
// server, for the helpers' own connections and Client: the last
// --requirepass, or the last password of a "--user default" line (as
// ACLUser writes for Restart), whichever comes later; "" for none.
func passwordIn(args []string) string {
	pw := ""
	for i := 0; i+1 < len(args); i++ {
		switch {
		case args[i] == "--requirepass":
			pw = args[i+1]
		case args[i] == "--user" && args[i+1] == "default":
			for j := i + 2; j < len(args) && !strings.HasPrefix(args[j], "--"); j++ {
				switch r := args[j]; {
				case strings.HasPrefix(r, ">"):
					pw = r[1:]
				case r == "nopass" || r == "reset" || r == "resetpass":
					pw = ""
				}
			}
		}
	}
	return pw
}

// ensureAdmin makes the helpers' own client (s.mu held).
func (s *Server) ensureAdmin() {
	// A password set since (SetConfig requirepass): a new connection
	// with it, the old one's would fail NOAUTH after a Restart.
	if s.admin != nil && s.admin.Options().Password != passwordIn(s.args) {
		s.admin.Close()
		s.admin = nil
	}
	if s.admin == nil {
		s.admin = redis.NewClient(&redis.Options{
			Addr: s.Addr(), TLSConfig: s.TLSConfig(), Password: passwordIn(s.args), Protocol: 2,
			MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true, PoolSize: 2,
		})
	}
}

// do runs one command on the helpers' own connection, bounded by a second
// so that a paused server cannot stall a wait loop.
func (s *Server) do(ctx context.Context, args ...any) *redis.Cmd {
	s.mu.Lock()
	s.ensureAdmin()
	rdb := s.admin
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return rdb.Do(ctx, args...)
}

// running reports whether the process is up and not paused.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.paused {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// SetConfig sets a configuration parameter now (CONFIG SET) and passes it
// again on every Restart.
func (s *Server) SetConfig(ctx context.Context, name, value string) error {
	if err := s.do(ctx, "CONFIG", "SET", name, value).Err(); err != nil {
		return fmt.Errorf("CONFIG SET %s %s on %s: %w", name, value, s.Addr(), err)
	}
	s.mu.Lock()
	s.args = append(s.args, "--"+name, value)
	s.mu.Unlock()
	return nil
}

// Log returns what the server has logged since it last started, for test
// failure messages.
func (s *Server) Log() string {
	s.mu.Lock()
	name := s.log
	s.mu.Unlock()
	b, _ := os.ReadFile(name)
	return string(b)
}

// logTail returns the last n lines of Log, indented, for failure messages.
func (s *Server) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "\t" + strings.Join(lines, "\n\t")
}

// tails returns the last lines of each server's log, for errors.
func tails(servers []*Server) string {
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "%s log:\n%s\n", s.Addr(), s.logTail(10))
	}
	return b.String()
}

// logOnFailure logs the tails of the servers' logs if t has failed by the
// time it ends; register it after the servers' Stop so that it runs first.
func logOnFailure(t testing.TB, what string, servers ...*Server) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, s := range servers {
			t.Logf("leasetest: %s %s log:\n%s", what, s.Addr(), s.logTail(40))
		}
	})
}

// process is the running server's process (nil when there is none).
func (s *Server) process() *os.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process
}

func (s *Server) signal(sig syscall.Signal) {
	if p := s.process(); p != nil {
		_ = p.Signal(sig)
	}
}

// Pause stops the server process (SIGSTOP) and returns once it has
// stopped (the signal alone may leave it answering for a millisecond or
// more on a loaded machine): connections stay open and requests get no
// reply, as with a long GC pause or a hung host.
func (s *Server) Pause() {
	if p := s.process(); p != nil {
		_ = proc.Stop(p)
	}
	s.setPaused(true)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.signal(syscall.SIGCONT)
	s.setPaused(false)
}

func (s *Server) setPaused(p bool) {
	s.mu.Lock()
	s.paused = p
	s.mu.Unlock()
}

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
// same arguments (an empty dataset, no loaded scripts). What the server
// keeps in its directory survives: a cluster node's nodes.conf, a
// sentinel's rewritten configuration. A replica restarts replicating the
// server it was started with, whatever it replicated since.
func (s *Server) Restart() error {
	s.Kill()
	s.cleanLog()
	var err error
	for range 50 { // the port may linger briefly
		if err = s.start(); err == nil || !errors.Is(err, errPortTaken) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Stop kills the server and removes its log and directory.
func (s *Server) Stop() {
	s.Kill()
	s.cleanLog()
	s.mu.Lock()
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	s.mu.Unlock()
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	releasePort(s.port)
}

func (s *Server) cleanLog() {
	s.mu.Lock()
	if s.log != "" {
		os.Remove(s.log)
		s.log = ""
	}
	s.mu.Unlock()
}
