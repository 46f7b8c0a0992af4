package lease_test

// Adversary round 75c: Watch started while its server does not answer.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv75cWatchEnds runs Watch on c in the background and returns its
// result channel.
func adv75cWatchEnds(ctx context.Context, c *lease.Client, pattern string, every time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, pattern, every, func(lease.Change) {}) }()
	return done
}

// Watch's doc: it reports "until ctx ends; it then returns nil", and
// "When the Client is closed, Watch returns an error wrapping ErrClosed,
// also while a read waits for a server that stopped answering: each read
// is bounded by every (at least the release timeout), and one not
// answered in time ends the watch with its error". Its readCtx comment
// names the case it guards: "without one [a deadline], Close ... would
// not end a Watch waiting for a server that stopped answering until
// go-redis's ReadTimeout, or ever with ReadTimeout -1". A Watch that
// starts while its server is paused (SIGSTOP: the kernel still accepts
// the connection) or blackholed must end by its bound, by its ctx, or by
// Close, whatever the client's ReadTimeout.
func TestAdversary75c_WatchStartedOnSilentServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		readTimeout time.Duration
		blackhole   bool
		end         string // how the test ends it: "bound", "cancel", "close"
	}{
		{"paused/ReadTimeout-1/cancel", -1, false, "cancel"},
		{"paused/ReadTimeout-1/close", -1, false, "close"},
		{"blackholed/ReadTimeout-1/cancel", -1, true, "cancel"},
		{"paused/default/cancel", 0, false, "cancel"},
		{"paused/default/bound", 0, false, "bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := leasetest.StartRedis(t)
			addr := srv.Addr()
			var p *leasetest.Proxy
			if tc.blackhole {
				p = leasetest.StartProxy(t, srv.Addr())
				addr = p.Addr()
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: tc.readTimeout})
			t.Cleanup(func() { rdb.Close() })
			c, err := lease.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			// A warm pool: the server answered once.
			if _, err := c.Inspect(context.Background(), "adv75c:w"); err != nil {
				t.Fatal(err)
			}
			if tc.blackhole {
				p.Set(leasetest.Blackhole)
			} else {
				srv.Pause()
				t.Cleanup(srv.Resume)
			}
			// A bound longer than the wait before the cancel or Close,
			// so that they come while the first read waits (it ends by
			// its bound, after them, and must then report them).
			every := 200 * time.Millisecond
			if tc.end != "bound" {
				every = 500 * time.Millisecond
			}
			// The subscription's bound: four round trips (Watch's doc).
			bound := 4 * max(every, lease.DefaultReleaseTimeout)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start := time.Now()
			done := adv75cWatchEnds(ctx, c, "adv75c:*", every)
			var limit time.Duration
			switch tc.end {
			case "cancel":
				time.Sleep(500 * time.Millisecond)
				cancel()
				limit = bound + 2*time.Second
			case "close":
				time.Sleep(500 * time.Millisecond)
				c.Close()
				limit = bound + 2*time.Second
			case "bound":
				// The doc's bound: four times every (at least the
				// release timeout) for the subscription; 2s of slack.
				limit = bound + 2*time.Second
			}
			select {
			case err := <-done:
				took := time.Since(start)
				t.Logf("Watch returned after %v: %v", took.Round(time.Millisecond), err)
				switch tc.end {
				case "cancel":
					if err != nil {
						t.Errorf("Watch whose ctx ended returned %v, want nil", err)
					}
				case "close":
					if !errors.Is(err, lease.ErrClosed) {
						t.Errorf("Watch of a closed Client returned %v, want ErrClosed", err)
					}
				case "bound":
					if err == nil {
						t.Errorf("Watch on a paused server returned nil")
					}
				}
			case <-time.After(limit):
				how := "its ctx cancelled 500ms after it began"
				switch tc.end {
				case "close":
					how = "its Client closed 500ms after it began"
				case "bound":
					how = "neither cancelled nor closed"
				}
				t.Errorf("Watch started on a silent server (go-redis ReadTimeout %v; %s) had not returned %v after it began; the doc's bound on each read is %v",
					tc.readTimeout, how, limit, bound)
				if p != nil {
					p.Close()
				}
			}
		})
	}
}
