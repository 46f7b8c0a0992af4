package lease_test

// Adversarial tests, round 66: leader election against real redis-server
// processes. Run: go test ./runtime/lease -run 'TestAdversary66' -race -count=1 -v

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// "A watch never vouches for a leader past its lease: when the key cannot
// be read, the leader last reported is replaced by a Leader with Err set
// once its Remaining has run out" (WatchLeader's doc; README: "Observation
// never vouches for a dead leader"). The watch's reads hang (its
// connection blackholed, or Redis paused) right after it reported a
// leader: the Err must come about when that leader's Remaining (as
// reported) runs out, not when a hung read times out a whole re-check (3s
// here) later.
func TestAdversary66_WatchVouchesPastLeaseWhenReadsHang(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"blackhole", "pause"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			const ttl = time.Second
			const recheck = 3 * time.Second
			srv := leasetest.StartRedis(t)
			key := "adv66-vouch"

			lrdb := srv.Client(t)
			lc, _ := newClient(t, lrdb)
			lctx, lstop := context.WithCancel(context.Background())
			entered := make(chan struct{})
			led := make(chan error, 1)
			go func() {
				led <- lc.Lead(lctx, key, lease.LeadSpec{TTL: ttl, Owner: "a"}, func(ctx context.Context) error {
					close(entered)
					<-ctx.Done()
					return nil
				})
			}()
			defer func() {
				srv.Resume()
				lstop()
				select {
				case <-led:
				case <-time.After(10 * time.Second):
					t.Error("Lead did not return")
				}
			}()
			select {
			case <-entered:
			case <-time.After(5 * time.Second):
				t.Fatal("no term")
			}

			p := leasetest.StartProxy(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			w, _ := newClient(t, rdb, lease.WithRecheck(recheck))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := w.WatchLeader(ctx, key)
			var l lease.Leader
			select {
			case l = <-ch:
			case <-time.After(3 * time.Second):
				t.Fatal("no first report")
			}
			got := time.Now()
			if l.Owner != "a" {
				t.Fatalf("first report %+v", l)
			}
			if how == "blackhole" {
				p.Set(leasetest.Blackhole)
			} else {
				srv.Pause()
			}
			// What the watch said holds only until got + l.Remaining.
			vouchedUntil := got.Add(l.Remaining)
			for {
				select {
				case l2, ok := <-ch:
					if !ok {
						t.Fatal("watch ended")
					}
					if l2.Err == nil {
						continue // a read that got through before the cut
					}
					late := time.Since(vouchedUntil)
					t.Logf("Err %q %v after the reported lease ran out (Remaining was %v)", l2.Err, late.Round(time.Millisecond), l.Remaining.Round(time.Millisecond))
					if late > 500*time.Millisecond {
						t.Fatalf("the watch went on vouching for leader %q %v past its reported lease (Remaining %v, re-check %v): the Err came only when a hung read timed out",
							l.Owner, late.Round(time.Millisecond), l.Remaining.Round(time.Millisecond), recheck)
					}
					return
				case <-time.After(ttl + 2*recheck + time.Second):
					t.Fatal("no Err report while reads hang")
				}
			}
		})
	}
}
