package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// WithCounterTTL: "sets how long a fence counter outlives its last grant"
// (client.go); the README's example service "lets its fence counters
// expire a minute after their last grant (lease.WithCounterTTL; the
// runtime's default is 24h)". A fenced waiter's grant made by a handover
// is minted by the release script, which is sent by the *releasing*
// Client (another process, or an operator's leasectl release), with that
// Client's counter TTL as the counter's expiry (release.go passes
// c.counterTTLArg). A service with WithCounterTTL(2s) whose fenced
// waiter is handed the key by a Client with the default then finds its
// counter living 24h after its last grant.
func TestAdversary75a_HandoverCounterTTLIsTheGrantees(t *testing.T) {
	t.Parallel()
	const want = 2 * time.Second
	ctx := context.Background()
	for _, how := range []string{"release by another Client", "ForceRelease by an operator", "release by a Client with a shorter TTL"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			// The service's processes: both with the short counter TTL,
			// unless the release comes from a Client with the default.
			var holder, waiter *lease.Client
			var wrec *leasetest.Recorder
			want := want
			switch how {
			case "release by another Client":
				holder, _ = newClient(t, srv.Client(t)) // default counter TTL: 24h
				waiter, wrec = newClient(t, srv.Client(t), lease.WithCounterTTL(want))
			case "ForceRelease by an operator":
				holder, _ = newClient(t, srv.Client(t), lease.WithCounterTTL(want))
				waiter, wrec = newClient(t, srv.Client(t), lease.WithCounterTTL(want))
			default:
				// The other way round: the waiter keeps the default 24h,
				// the releaser's counters live 50ms.
				want = 24 * time.Hour
				holder, _ = newClient(t, srv.Client(t), lease.WithCounterTTL(50*time.Millisecond))
				waiter, wrec = newClient(t, srv.Client(t))
			}
			op, _ := newClient(t, srv.Client(t)) // leasectl: lease.New(rdb, lease.WithPrefix(...))

			rel := make(chan struct{})
			hdone := hold(t, holder, "a75-ctr-ho", lease.Spec{TTL: 5 * time.Second, Deadline: 8 * time.Second}, rel)
			var inside time.Duration
			var tok lease.Token
			wdone := make(chan error, 1)
			go func() {
				wdone <- waiter.Do(ctx, "a75-ctr-ho", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second, Fence: true}, func(ctx context.Context) error {
					tok, _ = lease.TokenFrom(ctx)
					inside = admin.PTTL(ctx, "lease:{a75-ctr-ho}:f").Val()
					return nil
				})
			}()
			a75WaitEvent(t, wrec, lease.EventWaiting, 1, 3*time.Second)
			if how != "ForceRelease by an operator" {
				close(rel)
			} else {
				info, err := op.Inspect(ctx, "a75-ctr-ho")
				if err != nil {
					t.Fatal(err)
				}
				if r, err := op.ForceRelease(ctx, "a75-ctr-ho", info.Holder); err != nil || r != lease.ForceReleased {
					t.Fatalf("ForceRelease: %v %v", r, err)
				}
			}
			if err := <-wdone; err != nil {
				t.Fatalf("the fenced waiter: %v", err)
			}
			close2 := func() {
				select {
				case <-rel:
				default:
					close(rel)
				}
			}
			close2()
			<-hdone
			t.Logf("waiter's token %d (it queued: %v, so the release handed the key to it); counter PTTL inside its call %v", tok, wrec.Count(lease.EventWaiting) == 1, inside)
			if tok == 0 {
				t.Fatalf("no token")
			}
			if inside > want || inside < want-time.Second {
				t.Errorf("the fenced waiter's Client has a counter TTL of %v, but the counter of its grant (minted by a handover, %s) expires in %v", want, how, inside)
			}
		})
	}
}
