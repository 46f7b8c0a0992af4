package leasetest

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasegen/leasegen/runtime/lease"
)

// RunTests starts one redis-server for a test binary, runs its tests, stops
// the server and, when the tests passed, fails the run if goroutines leaked
// (go.uber.org/goleak). Use it from TestMain:
//
//	var srv *leasetest.Server
//	func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }
func RunTests(m *testing.M, srv **Server) int {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasetest:", err)
		return 1
	}
	*srv = s
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := findLeaks(3 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "leasetest: goroutine leak:", err)
			return 1
		}
	}
	return code
}

// DefaultParallel parses the test binary's flags and, unless the command
// line sets -parallel, runs the tests marked parallel n at a time (or
// GOMAXPROCS at a time, if more): for packages whose parallel tests
// mostly wait on servers of their own (faults, failovers, timeouts), for
// which go test's default of GOMAXPROCS leaves the machine idle. Call it
// from TestMain before m.Run.
func DefaultParallel(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0))))
	}
}

// findLeaks looks for leaked goroutines until none is left, for at most
// d: a go-redis client closed by a test's last cleanup may still have a
// goroutine that ends on its own within a second (the pool's background
// dial, which sleeps 1s between attempts at a server that is gone), which
// goleak's own retries (under half a second) can catch. A goroutine left
// by a client never closed is there after d too.
func findLeaks(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := goleak.Find()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Recorder is a lease.Observer that keeps every event, for assertions.
type Recorder struct {
	mu     sync.Mutex
	events []lease.Event
}

// Observe records e.
func (r *Recorder) Observe(e lease.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events so far.
func (r *Recorder) Events() []lease.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lease.Event(nil), r.events...)
}

// Count returns how many events of kind k were recorded.
func (r *Recorder) Count(k lease.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}
