package lease_test

// Adversary round 77: Watch's subscription is closed and go-redis's
// channel reader drained when Watch returns (91ff739): under a flood of
// messages on the watched keys' channels, many Watches started and
// stopped leave no reader behind, return promptly, and Close during the
// flood ends Watch with ErrClosed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv77Readers counts goroutines of go-redis's PubSub channel (its
// reader and its health check): only Watch uses PubSub.Channel in the
// runtime (the hub receives by itself).
func adv77Readers() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("go-redis/v9.(*channel).init")) {
			n++
		}
	}
	return n
}

// adv77Flood publishes on the channels of keys (as a release does: "x",
// and a handover's note) from a few connections as fast as they go, until
// the returned stop is called; it returns how many were published.
func adv77Flood(t *testing.T, rdb *redis.Client, channels ...string) (stop func() int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var n atomic.Int64
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p := rdb.Pipeline()
				for j := range 50 {
					p.Publish(ctx, channels[(i+j)%len(channels)], "x")
				}
				if _, err := p.Exec(ctx); err == nil {
					n.Add(50)
				}
			}
		}()
	}
	return func() int64 { cancel(); wg.Wait(); return n.Load() }
}

// Sixty Watches started and stopped one after another (ctx ends after
// 20-80ms, some before the first listing ends) while the channels of the
// held keys they watch get thousands of messages a second: each returns
// nil within its read bound of the cancel, and once all returned, no
// go-redis channel reader or health check is left (91ff739: "Watch now
// drains the channel after closing the subscription"), and the goroutine
// count is back near where it started.
func TestAdversary77_WatchStartStopUnderFlood(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	holder, _ := newClient(t, rdb)
	c, _ := newClient(t, rdb, lease.WithReleaseTimeout(250*time.Millisecond))
	var chans []string
	for i := range 4 {
		key := fmt.Sprintf("adv77-flood:%d", i)
		holdUntil(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
		chans = append(chans, "lease:{"+key+"}:c")
	}
	if _, err := c.Inspect(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	baseReaders, baseG := adv77Readers(), runtime.NumGoroutine()
	stop := adv77Flood(t, srv.Client(t), chans...)
	var slowest time.Duration
	var seen atomic.Int64
	peak := 0 // channel goroutines seen while a Watch ran: the count sees them
	for i := range 60 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Watch(ctx, "adv77-flood:*", 50*time.Millisecond, func(lease.Change) { seen.Add(1) })
		}()
		time.Sleep(time.Duration(20+i%4*20) * time.Millisecond)
		peak = max(peak, adv77Readers())
		at := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch %d: %v", i, err)
			}
			slowest = max(slowest, time.Since(at))
		case <-time.After(5 * time.Second):
			t.Fatalf("Watch %d did not return within 5s of its ctx's end under a flood of messages", i)
		}
	}
	published := stop()
	var readers, g int
	ok := waitFor(3*time.Second, func() bool {
		readers, g = adv77Readers(), runtime.NumGoroutine()
		return readers <= baseReaders && g <= baseG+5
	})
	t.Logf("published %d messages; changes seen %d; slowest return %v; peak channel goroutines %d; go-redis channel goroutines %d (before %d); goroutines %d (before %d)",
		published, seen.Load(), slowest.Round(time.Millisecond), peak, readers, baseReaders, g, baseG)
	if !ok {
		t.Errorf("after 60 Watches returned: %d go-redis channel goroutines (before %d), %d goroutines (before %d): left behind", readers, baseReaders, g, baseG)
	}
	if peak <= baseReaders {
		t.Errorf("no go-redis channel goroutine seen while the Watches ran (peak %d): the count is blind", peak)
	}
	if slowest > time.Second {
		t.Errorf("a Watch returned %v after its ctx ended (read bound 250ms)", slowest.Round(time.Millisecond))
	}
}

// Close of the Client during a flood: every Watch running on it returns
// an error wrapping ErrClosed promptly (Watch's doc: "When the Client is
// closed, Watch returns an error wrapping ErrClosed"), and none leaves a
// channel reader behind.
func TestAdversary77_WatchCloseUnderFlood(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	holder, _ := newClient(t, rdb)
	var chans []string
	for i := range 3 {
		key := fmt.Sprintf("adv77-close:%d", i)
		holdUntil(t, holder, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute})
		chans = append(chans, "lease:{"+key+"}:c")
	}
	baseReaders := adv77Readers()
	stop := adv77Flood(t, srv.Client(t), chans...)
	defer stop()
	for round := range 5 {
		c, err := lease.New(rdb, lease.WithReleaseTimeout(250*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		dones := make(chan error, n)
		for i := range n {
			pattern := "adv77-close:*"
			if i%2 == 1 {
				pattern = fmt.Sprintf("adv77-close:%d", i%3)
			}
			go func() { dones <- c.Watch(context.Background(), pattern, 100*time.Millisecond, func(lease.Change) {}) }()
		}
		time.Sleep(300 * time.Millisecond)
		at := time.Now()
		c.Close()
		for i := range n {
			select {
			case err := <-dones:
				if !errors.Is(err, lease.ErrClosed) {
					t.Errorf("round %d: Watch %d after Close: %v, want ErrClosed", round, i, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a Watch did not return within 5s of Close under a flood", round)
			}
		}
		if d := time.Since(at); d > 1500*time.Millisecond {
			t.Errorf("round %d: the Watches took %v to return after Close (read bound 250ms)", round, d.Round(time.Millisecond))
		}
	}
	var readers int
	if !waitFor(3*time.Second, func() bool { readers = adv77Readers(); return readers <= baseReaders }) {
		t.Errorf("after Close ended 40 Watches: %d go-redis channel goroutines (before %d)", readers, baseReaders)
	}
	t.Logf("published %d; channel goroutines %d (before %d)", stop(), readers, baseReaders)
}
