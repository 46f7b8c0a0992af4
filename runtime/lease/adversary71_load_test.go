package lease_test

// Round 71: many handovers in a row between real Clients (the helper ran
// it beside two busy loops on a two-core machine; in the suite, the
// suite's own load is enough, and busy loops would starve other parallel
// tests), with Watch looking
// every millisecond, every 250ms, or only on messages (an hour), and
// with the releases' messages refused (users without the channels: the
// waiters enter at their re-checks on the claims). Watch must name every
// ending of a holder that handed the key over "handed over", and only the
// last holder's (nobody waiting) "released"; never "" or "expired".

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func TestAdversary71_ManyHandoversUnderLoad(t *testing.T) {
	t.Parallel()
	type variant struct {
		every    time.Duration
		mute     bool
		defaults bool // the default release timeout: tombstones live 1s
	}
	for _, v := range []variant{{time.Millisecond, false, false}, {250 * time.Millisecond, false, false}, {time.Hour, false, false},
		{time.Millisecond, true, false}, {250 * time.Millisecond, true, false},
		{100 * time.Millisecond, false, true}, {100 * time.Millisecond, true, true}} {
		t.Run(fmt.Sprintf("every=%v/mute=%v/defaults=%v", v.every, v.mute, v.defaults), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			ctx := context.Background()
			key := "adv71load"
			const waiters = 12
			// Tombstones live 4 release timeouts: 4s, so that a look
			// delayed by the load still finds them; with the defaults, 1s
			// (what a look of Watch must beat under this load).
			var opts []lease.Option
			if !v.defaults {
				opts = append(opts, lease.WithReleaseTimeout(time.Second))
			}
			// Queue entries live 2 re-checks and 100ms: with the default
			// re-check (500ms) the load does not let an entry lapse (a
			// release with only lapsed entries behind it is no handover).
			// Without messages, waiters enter at their re-checks: 300ms.
			if v.mute {
				opts = append(opts, lease.WithRecheck(300*time.Millisecond))
			}
			clients := make([]*lease.Client, 3)
			for i := range clients {
				rdb := srv.Client(t)
				if v.mute {
					rdb = aclClient(t, srv, fmt.Sprintf("mute71l%d", i), without(leastPrivilege, "&lease:*")...)
				}
				clients[i], _ = newClient(t, rdb, opts...)
			}
			watcher, _ := newClient(t, srv.Client(t))

			var mu sync.Mutex
			var changes []lease.Change
			granted := map[string]chan struct{}{} // closed once Watch reported the identity's grant
			grantedCh := func(id string) chan struct{} {
				c, ok := granted[id]
				if !ok {
					c = make(chan struct{})
					granted[id] = c
				}
				return c
			}
			wctx, wcancel := context.WithCancel(ctx)
			wdone := make(chan error, 1)
			first := holdUntil(t, clients[0], key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true})
			go func() {
				wdone <- watcher.Watch(wctx, key, v.every, func(ch lease.Change) {
					mu.Lock()
					defer mu.Unlock()
					changes = append(changes, ch)
					if ch.Kind == lease.ChangeGranted || ch.Kind == lease.ChangeHeld {
						c := grantedCh(ch.Info.Holder)
						select {
						case <-c:
						default:
							close(c)
						}
					}
				})
			}()
			defer func() {
				wcancel()
				if err := <-wdone; err != nil {
					t.Errorf("Watch: %v", err)
				}
			}()
			if !waitFor(10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(changes) > 0 }) {
				t.Fatal("Watch reported nothing in 10s")
			}

			var order []string // identities in the order they entered
			var entries atomic.Int32
			dones := make(chan error, waiters)
			for i := range waiters {
				c := clients[1+i%2]
				go func() {
					dones <- c.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 50 * time.Second, Fence: true},
						func(fctx context.Context) error {
							l, _ := lease.FromContext(fctx)
							mu.Lock()
							order = append(order, l.Owner())
							var seen chan struct{}
							last := entries.Add(1) == waiters
							if last {
								seen = grantedCh(l.Owner())
							}
							mu.Unlock()
							if last && v.every != time.Hour {
								// The last holder stays until Watch saw it, so
								// that its own release is seen.
								select {
								case <-seen:
								case <-time.After(10 * time.Second):
								}
							} else {
								time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
							}
							return nil
						})
				}()
			}
			adv39WaitQueued(t, srv, key, waiters)
			close(first.release)
			if err := <-first.done; err != nil {
				t.Fatal(err)
			}
			for range waiters {
				if err := <-dones; err != nil {
					t.Fatalf("a waiter's Do: %v", err)
				}
			}
			mu.Lock()
			last := order[len(order)-1]
			mu.Unlock()
			if v.every != time.Hour {
				if !waitFor(10*time.Second, func() bool {
					mu.Lock()
					defer mu.Unlock()
					for _, ch := range changes {
						if ch.Kind == lease.ChangeEnded && ch.Info.Holder == last {
							return true
						}
					}
					return false
				}) {
					t.Error("Watch did not report the last holder's ending within 10s")
				}
			} else {
				time.Sleep(300 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			ended, handed := 0, 0
			var tok lease.Token
			for _, ch := range changes {
				switch ch.Kind {
				case lease.ChangeEnded:
					ended++
					want := "handed over"
					if ch.Info.Holder == last {
						want = "released"
					}
					if ch.How == "handed over" {
						handed++
					}
					if v.mute && ch.How == "expired" && !slices.Contains(order, ch.Info.Holder) {
						// A claim its waiter did not confirm in time
						// (without messages, at its re-check): it lapsed.
						t.Logf("claim of %q lapsed", ch.Info.Holder)
						continue
					}
					if v.defaults && ch.How == "" {
						// A look more than a tombstone's life (1s) after
						// the ending, on a loaded machine: unseen, as
						// documented.
						t.Logf("%s ended unseen", ch.Info.Holder)
						continue
					}
					if ch.How != want {
						t.Errorf("%s ended %q, want %q (last holder %v)", ch.Info.Holder, ch.How, want, ch.Info.Holder == last)
					}
				case lease.ChangeGranted, lease.ChangeHeld:
					if ch.Info.Token <= tok {
						t.Errorf("token %d after %d", ch.Info.Token, tok)
					}
					tok = ch.Info.Token
				}
			}
			t.Logf("%d changes: %d endings (%d handed over), %d holders", len(changes), ended, handed, len(order)+1)
			if handed == 0 {
				t.Error("no ending reported as handed over")
			}
		})
	}
}
