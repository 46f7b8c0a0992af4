package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// shared is one redis-server for the tests that inject no process faults.
var shared *leasetest.Server

func TestMain(m *testing.M) {
	if os.Getenv("LEASE_HELPER_HOLDER") != "" {
		helperHolder() // a subprocess of TestFault04PausedHolder
	}
	if os.Getenv("LEASE_HELPER_CANDIDATE") != "" {
		helperCandidate() // a subprocess candidate of the leader election tests
	}
	// The tests marked parallel (about a third, the slow ones: fault
	// injection, failovers, soaks, which mostly wait) run eight at a time
	// unless -parallel says otherwise; the default (GOMAXPROCS, two here)
	// would leave the package at most of its serial time. They run after
	// every other test has ended (so goroutine counts are not disturbed),
	// each on its own servers. Their 930 s of test time took about 270 s four at
	// a time and 133 s eight at a time, beside gen's tests on an empty
	// build cache (2 cores, 2026-12-06).
	leasetest.DefaultParallel(8)
	os.Exit(leasetest.RunTests(m, &shared))
}

// newClient returns a lease client on rdb with a recorder, closed at the end.
func newClient(t *testing.T, rdb redis.UniversalClient, opts ...lease.Option) (*lease.Client, *leasetest.Recorder) {
	t.Helper()
	rec := &leasetest.Recorder{}
	c, err := lease.New(rdb, append([]lease.Option{lease.WithObserver(rec)}, opts...)...)
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, rec
}

func sharedClient(t *testing.T, opts ...lease.Option) (*lease.Client, *leasetest.Recorder) {
	t.Helper()
	return newClient(t, shared.Client(t), opts...)
}

// lockKey is the Redis key the runtime uses for a user key under the
// default prefix (checked against the runtime in TestLockKeyLayout).
func lockKey(key string) string { return "lease:{" + key + "}:l" }

func spec(ttl, deadline time.Duration) lease.Spec {
	return lease.Spec{TTL: ttl, Deadline: deadline}
}

func mustIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %v: want it to wrap %v", err, target)
		}
	}
}

func mustNotIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if errors.Is(err, target) {
			t.Fatalf("error %v: must not wrap %v", err, target)
		}
	}
}

// hold takes key in a goroutine and keeps it until release is closed; it
// returns once the lease is held.
func hold(t *testing.T, c *lease.Client, key string, s lease.Spec, release <-chan struct{}) <-chan error {
	t.Helper()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), key, s, func(ctx context.Context) error {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("holder did not get %q: %v", key, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("holder did not get %q in 5s", key)
	}
	return done
}

var keySeq atomic.Int64

// uniqueKey gives each test its own lease key on the shared server.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), keySeq.Add(1))
}

// maxmemoryFull returns a switch that puts the server admin talks to at
// maxmemory (1 byte, noeviction: writes that may grow memory are refused
// with OOM) or back (0: no limit). It may be called from any goroutine
// (a function run by Do): a failure is reported with t.Error. The server
// is put back when the test ends (best effort: a test may have stopped
// it).
func maxmemoryFull(t *testing.T, admin *redis.Client) func(on bool) {
	t.Cleanup(func() { _ = admin.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	return func(on bool) {
		t.Helper()
		v := "0"
		if on {
			v = "1"
		}
		if err := admin.ConfigSet(context.Background(), "maxmemory", v).Err(); err != nil {
			t.Error(err)
		}
	}
}
