package lease_test

// Round 71: leader terms handed over in quick succession. Three
// candidates campaign for one key; each term lasts a few milliseconds and
// ends without an error (the candidate campaigns again at once) once
// another candidate is queued (the term waits for it): every term
// ends by a handover ("l>"), which Watch (every millisecond, every 100ms)
// must name "handed over", with the releases' messages published or
// refused (candidates without the channels: terms begin on the claims, at
// the re-checks). WatchLeader keeps naming leaders (with messages), and
// term numbers (tokens) only grow.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func TestAdversary71_LeaderTermsHandedOver(t *testing.T) {
	t.Parallel()
	type variant struct {
		every time.Duration
		mute  bool
	}
	for _, v := range []variant{{time.Millisecond, false}, {100 * time.Millisecond, false}, {100 * time.Millisecond, true}} {
		t.Run(fmt.Sprintf("every=%v/mute=%v", v.every, v.mute), func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			ctx := context.Background()
			key := "adv71lead"
			watcher, _ := newClient(t, srv.Client(t))
			admin := srv.Client(t)
			queue := "lease:{" + key + "}:q"
			var mu sync.Mutex
			var changes []lease.Change
			stopped := false // after the candidates were told to stop
			wctx, wcancel := context.WithCancel(ctx)
			wdone := make(chan error, 1)
			go func() {
				wdone <- watcher.Watch(wctx, key, v.every, func(ch lease.Change) {
					mu.Lock()
					if !stopped {
						changes = append(changes, ch)
					}
					mu.Unlock()
				})
			}()
			defer func() {
				wcancel()
				if err := <-wdone; err != nil {
					t.Errorf("Watch: %v", err)
				}
			}()
			lctx, lcancel := context.WithCancel(ctx)
			leaders := watcher.WatchLeader(lctx, key)
			named := map[string]bool{}
			var lwg sync.WaitGroup
			lwg.Add(1)
			go func() {
				defer lwg.Done()
				for ld := range leaders {
					if ld.Holder != "" {
						mu.Lock()
						named[ld.Holder] = true
						mu.Unlock()
					}
				}
			}()

			cctx, ccancel := context.WithCancel(ctx)
			var terms sync.Map // identity -> term number
			n := 0
			var nmu sync.Mutex
			leadDone := make(chan error, 3)
			for i := range 3 {
				rdb := srv.Client(t)
				if v.mute {
					rdb = aclClient(t, srv, fmt.Sprintf("mute71lead%d", i), without(leastPrivilege, "&lease:*")...)
				}
				// Queue entries live 2 re-checks and 100ms: with the default
				// re-check (500ms) a loaded machine does not let a waiting
				// candidate's entry lapse (a lapsed entry is passed over,
				// and a release with only lapsed entries is no handover).
				// Without messages, terms begin at the re-checks: 300ms.
				var opts []lease.Option
				if v.mute {
					opts = append(opts, lease.WithRecheck(300*time.Millisecond))
				}
				c, _ := newClient(t, rdb, opts...)
				go func() {
					leadDone <- c.Lead(cctx, key, lease.LeadSpec{TTL: 5 * time.Second, Owner: fmt.Sprintf("C%d", i)}, func(fctx context.Context) error {
						l, _ := lease.FromContext(fctx)
						terms.Store(l.Owner(), l.Token())
						nmu.Lock()
						n++
						firstTerm := n == 1
						nmu.Unlock()
						// Another candidate queued before the term ends (every
						// one, before the first term ends): a candidate that
						// just ended its term may not have campaigned again
						// yet, and on a loaded machine neither may the third,
						// when the terms between were short.
						need := int64(1)
						if firstTerm {
							need = 2
						}
						for admin.ZCard(ctx, queue).Val() < need && fctx.Err() == nil {
							time.Sleep(time.Millisecond)
						}
						time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
						return nil
					})
				}()
			}
			want := 30
			if v.mute {
				want = 10
			}
			if !waitFor(30*time.Second, func() bool { nmu.Lock(); defer nmu.Unlock(); return n >= want }) {
				t.Errorf("only %d terms in 30s", n)
			}
			// Let Watch catch up on the last handovers before stopping.
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			stopped = true
			got := slices71(changes)
			mu.Unlock()
			ccancel()
			for range 3 {
				if err := <-leadDone; err != nil {
					t.Errorf("Lead: %v", err)
				}
			}
			lcancel()
			lwg.Wait()

			ended, byHow := 0, map[string]int{}
			var tok lease.Token
			for _, ch := range got {
				switch ch.Kind {
				case lease.ChangeEnded:
					ended++
					byHow[ch.How]++
					if _, entered := terms.Load(ch.Info.Holder); v.mute && ch.How == "expired" && !entered {
						// A claim its candidate did not confirm in time
						// (without messages, at its re-check): it lapsed.
						t.Logf("claim of %q lapsed", ch.Info.Holder)
						continue
					}
					if ch.How != "handed over" {
						t.Errorf("term %q ended %q, want \"handed over\" (another candidate was queued)", ch.Info.Holder, ch.How)
					}
				case lease.ChangeGranted, lease.ChangeHeld:
					if ch.Info.Token <= tok {
						t.Errorf("term %d after %d", ch.Info.Token, tok)
					}
					tok = ch.Info.Token
					if want, ok := terms.Load(ch.Info.Holder); ok && want.(lease.Token) != ch.Info.Token {
						t.Errorf("Watch's token %d for %q, its term's %v", ch.Info.Token, ch.Info.Holder, want)
					}
				}
			}
			nmu.Lock()
			t.Logf("%d terms; Watch: %d changes, %d endings %v; WatchLeader named %d leaders", n, len(got), ended, byHow, len(named))
			nmu.Unlock()
			if ended == 0 {
				t.Error("Watch saw no term end")
			}
			if len(named) < 2 && !v.mute { // a WatchLeader without messages polls
				t.Errorf("WatchLeader named %d leaders, want several", len(named))
			}
		})
	}
}

func slices71(cs []lease.Change) []lease.Change { return append([]lease.Change(nil), cs...) }
