package lease_test

// Adversarial tests, round 10 (adv10): commit 3433898, "a waiter enters on
// the release's message; releases tell only the waiter's process". Waiters
// no longer listen on key channels but on their Client's inbox (the probe
// channel); a release that hands a waiter the key tells its Client there
// (first as "keychannel note", now as the channel's length, ":", the
// channel and the note), and a waiter that left without the lease is
// remembered a moment so that a late handover to it is released. Each test
// asserts one promise against real redis-server processes.
// Run: go test -race -count=1 -run 'TestAdversary10_' ./runtime/lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv10Hook runs before and after every command a go-redis client sends
// (pipelines are passed through untouched). before may fail the command
// without sending it.
type adv10Hook struct {
	before func(args []any) error
	after  func(args []any, cmd redis.Cmder)
}

func (adv10Hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv10Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.before != nil {
			if err := h.before(cmd.Args()); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if h.after != nil {
			h.after(cmd.Args(), cmd)
		}
		return err
	}
}
func (adv10Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// adv10Script reports whether args run a script with numkeys n (4: the
// acquire, 6: the release).
func adv10Script(args []any, n string) bool {
	return len(args) > 2 && (args[0] == "evalsha" || args[0] == "eval") && fmt.Sprint(args[2]) == n
}

// adv10Enter starts a waiting call of c on key (TTL 5s, Wait 12s): the
// time fn was entered, and Do's result.
func adv10Enter(c *lease.Client, key string) (chan time.Time, chan error) {
	entered := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 15 * time.Second, Wait: 12 * time.Second}, func(context.Context) error {
			entered <- time.Now()
			return nil
		})
	}()
	return entered, done
}

// adv10Handover measures how long after its holder's release a waiter of
// another Client enters fn, on key.
func adv10Handover(t *testing.T, holder, waiter *lease.Client, op *lease.Client, key string) time.Duration {
	t.Helper()
	release := make(chan struct{})
	held := hold(t, holder, key, spec(10*time.Second, 20*time.Second), release)
	entered, done := adv10Enter(waiter, key)
	adv2WaitQueued(t, op, key, 1)
	time.Sleep(150 * time.Millisecond) // the waiter sleeps; its inbox is live
	released := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	return (<-entered).Sub(released)
}

// ------------------------------------------------ the inbox message format

// A release told the waiter's Client on its inbox as "keychannel note",
// and the reader split that at the first space (fixed: the channel's
// length now comes first). Nothing escapes a space
// in a key channel (redisKeys escapes only '%', '{' and '}'; a prefix is
// taken as given), so for a key or prefix with a space the split names a
// channel that does not exist: every handover message, hold-min "h" and
// endhold "x" to such a key is dropped, and its waiters find the grant only
// at their next re-check. Liveness (handover at once, on the message) for
// keys such as "order 42" or a prefix "my app:".
func TestAdversary10_SpaceInKeyDropsEveryInboxMessage(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	const recheck = 3 * time.Second
	for _, tc := range []struct {
		name, prefix, key string
	}{
		{"control", "", "plain"},
		{"space in key", "", "order 42"},
		{"space in prefix", "my app:", "plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []lease.Option
			if tc.prefix != "" {
				opts = append(opts, lease.WithPrefix(tc.prefix))
			}
			holder, _ := newClient(t, srv.Client(t), opts...)
			waiter, _ := newClient(t, srv.Client(t), append(opts, lease.WithRecheck(recheck))...)
			op, _ := newClient(t, srv.Client(t), opts...)
			key := uniqueKey(t) + "-" + tc.key
			warm(t, waiter, key)
			lag := adv10Handover(t, holder, waiter, op, key)
			t.Logf("prefix %q key %q: the waiter entered %v after the release (re-check %v)", tc.prefix, key, lag.Round(time.Millisecond), recheck)
			if lag > time.Second {
				t.Errorf("handover took %v: the release's message on the waiter's inbox was not routed to it (it found the grant at its re-check)", lag.Round(time.Millisecond))
			}
		})
	}
}

// ------------------------------------------ a handover before the join

// A release can hand the key to a waiter between its busy answer and its
// join (hub.go keeps "recent" messages for exactly that: "a release can
// hand the lease over between a waiter's busy reply and its join"). The
// message now comes on the Client's inbox, which is live long before the
// waiter's first busy answer; notify drops a message for a key channel the
// hub has no state for, and a first wait on a key has none until its join.
// Here the waiter's busy reply reaches it 300ms after the acquire ran (a
// slow reader; a hook sleeps), the holder releases in between: the release
// hands the waiter the key for its full TTL (its inbox is subscribed) and
// tells it, and the waiter finds the grant only at its re-check.
func TestAdversary10_HandoverBeforeFirstJoinIsDropped(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	const recheck = 3 * time.Second
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	wrdb := srv.Client(t)
	var armed atomic.Bool
	executed := make(chan struct{})
	wrdb.AddHook(adv10Hook{after: func(args []any, _ redis.Cmder) {
		if adv10Script(args, "4") && armed.CompareAndSwap(true, false) {
			close(executed)
			time.Sleep(300 * time.Millisecond)
		}
	}})
	waiter, _ := newClient(t, wrdb, lease.WithRecheck(recheck))
	// The waiter's Client has waited before (on another key): its inbox
	// is subscribed and live.
	if lag := adv10Handover(t, holder, waiter, op, uniqueKey(t)); lag > time.Second {
		t.Fatalf("warm-up handover took %v", lag)
	}
	key := uniqueKey(t)
	release := make(chan struct{})
	held := hold(t, holder, key, spec(10*time.Second, 20*time.Second), release)
	armed.Store(true)
	entered, done := adv10Enter(waiter, key)
	select {
	case <-executed: // the busy acquire ran; its reply is held 300ms
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's acquire never ran")
	}
	released := time.Now()
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	lag := (<-entered).Sub(released)
	t.Logf("the waiter entered %v after the release (its busy reply was held 300ms; re-check %v)", lag.Round(time.Millisecond), recheck)
	if lag > time.Second {
		t.Errorf("handover took %v: the release's message reached the waiter's Client before its join and was dropped (no state for the key's channel yet), so the waiter found the grant only at its re-check", lag.Round(time.Millisecond))
	}
}

// --------------------------------------------------- departed waiters

// A waiter that stops waiting and whose giving up does not reach Redis
// (best effort, 50ms at most) leaves its queue entry behind, alive for up
// to 2×re-check+100ms. The commit remembers such a waiter (cs.departed,
// "2s") so that a handover that reaches it later is released on its
// behalf. But the memory lives in the key channel's state, which the
// manager deletes once the channel is idle for idleUnsubscribe (1s), and
// the memory itself is pruned after 2s: a handover to the entry after that
// finds nobody, and since the Client's inbox is subscribed the release set
// the key for the departed waiter's full TTL. The key then sits unused for
// that TTL while the next waiter (another process) waits.
func TestAdversary10_DepartedWaiterForgottenBeforeItsEntryExpires(t *testing.T) {
	t.Parallel()
	for _, after := range []time.Duration{400 * time.Millisecond, 1400 * time.Millisecond} {
		t.Run(fmt.Sprintf("release %v after leaving", after), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			holder, _ := newClient(t, srv.Client(t))
			op, _ := newClient(t, srv.Client(t))
			next, _ := newClient(t, srv.Client(t))
			brdb := srv.Client(t)
			var failRel atomic.Bool
			brdb.AddHook(adv10Hook{before: func(args []any) error {
				if failRel.Load() && adv10Script(args, "6") {
					return errors.New("adv10: giving up could not reach Redis")
				}
				return nil
			}})
			b, _ := newClient(t, brdb, lease.WithRecheck(1500*time.Millisecond))
			key := uniqueKey(t)
			warm(t, b, key)
			release := make(chan struct{})
			held := hold(t, holder, key, spec(10*time.Second, 20*time.Second), release)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			bDone := make(chan error, 1)
			var bIn atomic.Bool
			go func() {
				bDone <- b.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: 15 * time.Second, Wait: 12 * time.Second}, func(context.Context) error {
					bIn.Store(true)
					return nil
				})
			}()
			adv2WaitQueued(t, op, key, 1)
			gone := adv2Waiters(t, op, key)[0].Identity
			nextIn, nextDone := adv10Enter(next, key)
			adv2WaitQueued(t, op, key, 2)
			time.Sleep(50 * time.Millisecond)

			failRel.Store(true)
			cancel()
			err := <-bDone
			failRel.Store(false)
			left := time.Now()
			if err == nil || bIn.Load() {
				t.Fatalf("the cancelled waiter: %v (entered %v)", err, bIn.Load())
			}
			still := false
			for _, w := range adv2Waiters(t, op, key) {
				if w.Identity == gone {
					still = true
					t.Logf("the departed waiter's entry lapses in %v", w.Expires.Round(time.Millisecond))
				}
			}
			if !still {
				t.Fatal("the departed waiter's entry is gone: its giving up reached Redis")
			}
			time.Sleep(after - time.Since(left))
			released := time.Now()
			close(release)
			if err := <-held; err != nil {
				t.Fatalf("holder: %v", err)
			}
			// Do returns after fn sent its entry time: wait for the
			// return, then read the time (a select on both could take
			// the return first when both are ready).
			if err := <-nextDone; err != nil {
				t.Fatalf("next waiter: %v", err)
			}
			lag := (<-nextIn).Sub(released)
			t.Logf("handover %v after the waiter left; the next waiter (another process) entered %v after the release", after, lag.Round(time.Millisecond))
			if lag > time.Second {
				t.Errorf("the key was handed to a waiter that had left %v before, for its full TTL, and nobody released it: the next waiter waited %v", after, lag.Round(time.Millisecond))
			}
		})
	}
}

// --------------------------------------------------------- safety soak

// Fenced workers of three Clients (one behind a proxy that delays every
// reply, its inbox included, by 15ms) take one key over and over; most
// grants now come from a release's message alone. No two functions may
// run at once, every token in fn must be the key's current token (read
// from Redis inside fn) and tokens must increase strictly in entry order;
// without faults nothing may be lost.
func TestAdversary10_FencedHandoverSoakNoOverlap(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	p := leasetest.StartProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { prdb.Close() })
	slow, _ := newClient(t, prdb)
	c1, _ := newClient(t, srv.Client(t))
	c2, _ := newClient(t, srv.Client(t))
	key := uniqueKey(t)
	warm(t, slow, key)
	p.SetDelay(15 * time.Millisecond)

	adv10FencedSoak(t, direct, key, []*lease.Client{slow, c1, c2}, nil)
}

// adv10FencedSoak runs 3 goroutines per Client calling Do, fenced, on key
// for 8s (TTLs 300ms–1s; holdMin, if set, gives a call's HoldMin) and
// fails the test on any overlap of fn, a token not above the previous
// one, a token that is not the key's (read with direct), a loss, or any
// error but ErrBusy. It returns the entries per Client.
func adv10FencedSoak(t *testing.T, direct *redis.Client, key string, clients []*lease.Client, holdMin func(ci, n int) time.Duration) []int32 {
	t.Helper()
	var (
		in                         atomic.Int32
		mu                         sync.Mutex
		last                       lease.Token
		overlaps, disorder, bad    int
		entries, lost, other, late atomic.Int32
	)
	per := make([]atomic.Int32, len(clients))
	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for ci, c := range clients {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; time.Now().Before(stop); n++ {
					ttl := []time.Duration{300, 600, 1000}[(ci+g+n)%3] * time.Millisecond
					s := lease.Spec{TTL: ttl, Deadline: 4 * time.Second, Wait: 3 * time.Second, MinValidity: ttl / 3, Fence: true}
					if holdMin != nil {
						s.HoldMin = holdMin(ci, n)
					}
					err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
						entries.Add(1)
						per[ci].Add(1)
						if in.Add(1) != 1 {
							mu.Lock()
							overlaps++
							mu.Unlock()
						}
						defer in.Add(-1)
						tok, _ := lease.TokenFrom(ctx)
						mu.Lock()
						if tok <= last {
							disorder++
							t.Logf("token %d entered after %d", tok, last)
						}
						last = tok
						mu.Unlock()
						v, err := direct.Get(context.Background(), lockKey(key)).Result()
						if want := fmt.Sprintf(":%d", tok); err != nil || len(v) < len(want) || v[len(v)-len(want):] != want {
							mu.Lock()
							bad++
							mu.Unlock()
							t.Logf("in fn with token %d the key holds %q (%v)", tok, v, err)
						}
						time.Sleep(time.Duration(n%4) * time.Millisecond)
						return nil
					})
					switch {
					case err == nil:
					case errors.Is(err, lease.ErrLost):
						lost.Add(1)
						t.Logf("lost: %v", err)
					case errors.Is(err, lease.ErrBusy):
					case errors.Is(err, lease.ErrLowValidity):
						// A grant whose process ran late (CI: a handover
						// entered with 52ms of 300ms left) is refused,
						// not entered: safe, and no loss.
						late.Add(1)
					default:
						other.Add(1)
						t.Logf("Do: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d entries; overlaps %d, tokens out of order %d, token not the key's %d, lost %d, other errors %d, refused for low validity %d", entries.Load(), overlaps, disorder, bad, lost.Load(), other.Load(), late.Load())
	if entries.Load() < 100 {
		t.Errorf("only %d entries in 8s", entries.Load())
	}
	if overlaps+disorder+bad > 0 || lost.Load() > 0 || other.Load() > 0 {
		t.Error("fenced handovers broke mutual exclusion, token order or reported a loss without any fault")
	}
	counts := make([]int32, len(clients))
	for i := range per {
		counts[i] = per[i].Load()
	}
	return counts
}
