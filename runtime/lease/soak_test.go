package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// interval is one entered call: when its function ran and what Do said.
type interval struct {
	key        string
	holder     int
	from, to   time.Time
	lost       bool // Do returned ErrLost (its work may overlap a later holder's)
	nestedLost bool // a nested call reported ErrLost (the lease ended under it)
}

// soakHolder is one process-like participant: its own go-redis client
// through its own fault proxy, and a lease Client that is closed and
// replaced from time to time while calls are in progress.
type soakHolder struct {
	id    int
	proxy *leasetest.Proxy
	rdb   *redis.Client
	mu    sync.Mutex
	c     *lease.Client
	rec   *leasetest.Recorder
}

func (h *soakHolder) client() *lease.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.c
}

// 16. A randomized soak of everything at once: 4 holders (separate Clients
// and connections, as separate processes), two keys, mixed TTLs on one
// Client (12ms to 900ms), hold-min, kept leases, reentrant calls with nested specs
// (short deadlines, high min-validity, fence mismatch, hold-min, nested
// calls from goroutines that outlive the outer call), Close during work,
// under blackholes, delays, cut replies and server pauses. Invariants:
// no work entered on a refused outcome; on each key, two calls' functions
// overlap in time only if one of them reported ErrLost; a fenced write is
// rejected only under a lost lease; nested calls never enter with a fence
// mismatch or too little validity.
func TestFault16MixedSoak(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	const holders = 4
	hs := make([]*soakHolder, holders)
	newLeaseClient := func(h *soakHolder) {
		rec := &leasetest.Recorder{}
		c, err := lease.New(h.rdb, lease.WithObserver(rec), lease.WithRecheck(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		h.c, h.rec = c, rec
		h.mu.Unlock()
	}
	for i := range hs {
		p := leasetest.StartProxy(t, srv.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		hs[i] = &soakHolder{id: i, proxy: p, rdb: rdb}
		newLeaseClient(hs[i])
	}
	t.Cleanup(func() {
		for _, h := range hs {
			h.client().Close()
		}
	})
	store := fence.NewMemory[int]()
	stop := make(chan struct{})
	var faults, closes atomic.Int64
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		proxies := make([]*leasetest.Proxy, len(hs))
		for i, h := range hs {
			proxies[i] = h.proxy
		}
		injectFaults(stop, srv, proxies, 50*time.Millisecond, true, &faults)
	}()
	go func() { // Close a holder's Client while it works, and replace it
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(400+rand.IntN(600)) * time.Millisecond):
			}
			h := hs[rand.IntN(holders)]
			old := h.client()
			newLeaseClient(h)
			old.Close()
			closes.Add(1)
		}
	}()

	var (
		mu         sync.Mutex
		intervals  []interval
		violations atomic.Int64
		calls      atomic.Int64
		outcomes   sync.Map // outcome name -> *atomic.Int64
	)
	count := func(name string) {
		v, _ := outcomes.LoadOrStore(name, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	violate := func(format string, args ...any) {
		violations.Add(1)
		t.Logf(format, args...)
	}
	classify := func(err error) string {
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, lease.ErrLost):
			return "lost"
		case errors.Is(err, lease.ErrBusy):
			return "busy"
		case errors.Is(err, lease.ErrUnknown):
			return "unknown"
		case errors.Is(err, lease.ErrRefused):
			return "refused"
		case errors.Is(err, lease.ErrLowValidity):
			return "low_validity"
		case errors.Is(err, lease.ErrClosed):
			return "closed"
		case errors.Is(err, lease.ErrDeadline):
			return "deadline"
		}
		return "other"
	}
	ttls := []time.Duration{12 * time.Millisecond, 60 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond}

	var wg sync.WaitGroup
	end := time.Now().Add(*soak)
	for _, h := range hs {
		for worker := range 2 { // two callers per holder share its Client
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					key := []string{"soak-x", "soak-y"}[rand.IntN(2)]
					ttl := ttls[rand.IntN(len(ttls))]
					s := lease.Spec{TTL: ttl, Deadline: 2 * time.Second, Wait: 500 * time.Millisecond, Fence: rand.IntN(3) > 0}
					if rand.IntN(5) == 0 {
						s.HoldMin = time.Duration(rand.IntN(100)) * time.Millisecond
					}
					if rand.IntN(3) == 0 {
						// Kept after the call: the next call in this Client
						// may reuse it; others make the keeper release it.
						s.Keep = time.Duration(50+rand.IntN(300)) * time.Millisecond
					}
					c := h.client()
					var iv interval
					entered, stale := false, false
					var nested sync.WaitGroup
					err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
						entered = true
						iv = interval{key: key, holder: h.id*2 + worker, from: time.Now()}
						defer func() { iv.to = time.Now() }()
						if s.Fence {
							st, err := fence.From(ctx)
							if err != nil {
								return err
							}
							if err := store.Update(st, key, func(v int, _ bool) int { return v + 1 }); errors.Is(err, fence.ErrStale) {
								stale = true
							}
						}
						switch rand.IntN(6) {
						case 0: // nested, same spec
							if err := c.Do(ctx, key, s, func(context.Context) error { return nil }); errors.Is(err, lease.ErrLost) {
								iv.nestedLost = true
							}
						case 1: // nested with a short deadline
							short := lease.Spec{TTL: ttl, Deadline: 5 * time.Millisecond}
							_ = c.Do(ctx, key, short, func(ctx context.Context) error {
								<-ctx.Done()
								return nil
							})
						case 2: // nested asking more validity than the lease can have
							big := lease.Spec{TTL: time.Minute, Deadline: time.Second, MinValidity: 30 * time.Second}
							err := c.Do(ctx, key, big, func(context.Context) error {
								violate("nested call entered with MinValidity 30s under a %v lease", ttl)
								return nil
							})
							if !errors.Is(err, lease.ErrLowValidity) && !errors.Is(err, lease.ErrBusy) && !errors.Is(err, lease.ErrUnknown) && !errors.Is(err, lease.ErrRefused) && !errors.Is(err, lease.ErrLost) && !errors.Is(err, lease.ErrClosed) && ctx.Err() == nil {
								violate("nested high MinValidity: %v", err)
							}
						case 3: // nested fenced under an unfenced lease
							if !s.Fence {
								fs := s
								fs.Fence = true
								_ = c.Do(ctx, key, fs, func(ctx context.Context) error {
									if _, ok := lease.TokenFrom(ctx); !ok && ctx.Err() == nil {
										violate("nested fenced call entered without a token")
									}
									return nil
								})
							}
						case 4: // a nested call from a goroutine that may outlive fn
							nested.Add(1)
							detached := context.WithoutCancel(ctx)
							go func() {
								defer nested.Done()
								_ = c.Do(detached, key, lease.Spec{TTL: ttl, Deadline: 500 * time.Millisecond, Wait: 100 * time.Millisecond}, func(ctx context.Context) error {
									select {
									case <-ctx.Done():
									case <-time.After(time.Duration(rand.IntN(30)) * time.Millisecond):
									}
									return nil
								})
							}()
						}
						if rand.IntN(5) == 0 {
							// Work that ignores its context and overruns the lease.
							time.Sleep(min(ttl*3/2, 300*time.Millisecond))
							return nil
						}
						select {
						case <-ctx.Done():
						case <-time.After(time.Duration(rand.IntN(int(min(ttl, 80*time.Millisecond)/time.Millisecond)+1)) * time.Millisecond):
						}
						return nil
					})
					nested.Wait()
					calls.Add(1)
					class := classify(err)
					count(class)
					if entered {
						iv.lost = class == "lost"
						mu.Lock()
						intervals = append(intervals, iv)
						mu.Unlock()
					}
					switch class {
					case "busy", "unknown", "refused", "low_validity", "closed":
						if entered {
							violate("holder %d entered, then Do = %v", h.id, err)
						}
					case "other":
						violate("holder %d: unclassified error %v", h.id, err)
					}
					if stale && class != "lost" {
						violate("holder %d: a fenced write was rejected under a lease not reported lost: %v", h.id, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	srv.Resume()

	// Exclusion: per key, functions of two calls overlap only if one of
	// them reported the loss of its lease.
	slices.SortFunc(intervals, func(a, b interval) int { return a.from.Compare(b.from) })
	overlaps := 0
	for i, a := range intervals {
		for _, b := range intervals[i+1:] {
			if !b.from.Before(a.to) {
				break
			}
			if a.key != b.key {
				continue
			}
			if !a.lost && !b.lost && !a.nestedLost && !b.nestedLost {
				overlaps++
				violate("key %s: holder %d [%v, %v] and holder %d [%v, %v] overlap and neither was lost",
					a.key, a.holder, a.from.Format("15:04:05.000"), a.to.Format("15:04:05.000"), b.holder, b.from.Format("15:04:05.000"), b.to.Format("15:04:05.000"))
			}
		}
	}
	var summary []string
	outcomes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(summary)
	t.Logf("soak %v: %d calls, %d entered, %d faults, %d Client closes; %v", *soak, calls.Load(), len(intervals), faults.Load(), closes.Load(), summary)
	table(t, fmt.Sprintf("mixed soak (%d holders × 2 callers, 2 keys, TTL 12–900ms, hold-min, kept leases, nested specs, Close during work, %v, %d faults)", holders, *soak, faults.Load()),
		"no work on refused outcomes; no overlap on a key unless reported lost; stale writes only under lost leases", int(calls.Load()), int(violations.Load()))
}
