package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// a75Mix runs short calls of every kind on keys from clients until stop:
// plain, fenced, hold-min, kept, waiting ones that give up (a short Wait,
// a ctx cancelled while queued), and ones that wait long enough to get
// the key. It returns how many calls ran and how many entered.
func a75Mix(clients []*lease.Client, keys []string, workers int, stop <-chan struct{}) (calls, entered int64) {
	var nCalls, nIn atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 75))
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := clients[r.IntN(len(clients))]
				key := keys[r.IntN(len(keys))]
				s := lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, MinValidity: 10 * time.Millisecond}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch r.IntN(8) {
				case 0: // try once
				case 1:
					s.Fence = true
					s.Wait = time.Second
				case 2:
					s.HoldMin = time.Duration(1+r.IntN(30)) * time.Millisecond
					s.Wait = 500 * time.Millisecond
				case 3:
					s.Keep = time.Duration(50+r.IntN(200)) * time.Millisecond
					s.Wait = 500 * time.Millisecond
					s.Fence = r.IntN(2) == 0
				case 4: // gives up soon
					s.Wait = time.Duration(1+r.IntN(20)) * time.Millisecond
				case 5: // cancelled while queued
					s.Wait = time.Second
					ctx, cancel = context.WithTimeout(ctx, time.Duration(1+r.IntN(30))*time.Millisecond)
				default:
					s.Wait = time.Second
				}
				_ = c.Do(ctx, key, s, func(ctx context.Context) error {
					nIn.Add(1)
					time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
					return nil
				})
				cancel()
				nCalls.Add(1)
			}
		}()
	}
	wg.Wait()
	return nCalls.Load(), nIn.Load()
}

// a75Sample looks at the keyspace every 30ms until stop and checks each
// look: no key without an expiry, none above its kind's bound.
func a75Sample(t *testing.T, bounds map[string]time.Duration, stop <-chan struct{}, rdbs ...redis.Cmdable) <-chan int {
	looks := make(chan int, 1)
	go func() {
		n := 0
		defer func() { looks <- n }()
		told := map[string]bool{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			ks, err := a75ScanAll(context.Background(), rdbs...)
			if err != nil {
				t.Errorf("scan: %v", err)
				return
			}
			n++
			for k, p := range ks {
				kind := a75Kind(k)
				if p < 0 && !told[k] {
					told[k] = true
					t.Errorf("during the run: key %q (%s) has no expiry", k, kind)
				}
				if b, ok := bounds[kind]; ok && p > b && !told[k] {
					told[k] = true
					t.Errorf("during the run: key %q (%s) has PTTL %v, above %v", k, kind, p, b)
				}
			}
		}
	}()
	return looks
}

// Thousands of short calls of every kind on a few keys from three Clients
// (three processes' worth), sampled as they run; then, once they have
// ended and the Clients are closed, the keyspace drains within the
// documented lifetimes: tombstones 1s, counters WithCounterTTL (1s here),
// queue places two re-checks + 100ms (500ms here), hold-mins (30ms).
func TestAdversary75a_ContentionSoakDrains(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	const recheck = 200 * time.Millisecond
	var clients []*lease.Client
	for range 3 {
		c, err := lease.New(srv.Client(t), lease.WithRecheck(recheck), lease.WithCounterTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var keys []string
	for i := range 6 {
		keys = append(keys, fmt.Sprintf("a75-soak-%d", i))
	}
	bounds := map[string]time.Duration{
		"lock": time.Second, "tomb": time.Second, "counter": time.Second,
		"queue": 2*recheck + 100*time.Millisecond, "qexp": 2*recheck + 100*time.Millisecond,
	}
	stop := make(chan struct{})
	looks := a75Sample(t, bounds, stop, admin)
	go func() { time.Sleep(3 * time.Second); close(stop) }()
	calls, entered := a75Mix(clients, keys, 16, stop)
	for _, c := range clients {
		c.Close()
	}
	t.Logf("%d calls, %d entered, %d looks at the keyspace", calls, entered, <-looks)
	if calls < 500 || entered < 200 {
		t.Errorf("only %d calls, %d entered: too little contention to judge", calls, entered)
	}
	a75Drain(t, "after the soak", 1500*time.Millisecond, admin)
}
