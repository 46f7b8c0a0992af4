package lease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A waiter in another process enters on the release's message: the
// release hands it the key for its full TTL (its Client's subscription is
// connected), and it sends no acquire after its busy one. Its lease is
// valid for MinValidity at least, and its fencing token is the one the
// release minted (the key's last token).
func TestWaiterEntersOnTheHandoverWithoutAnotherAcquire(t *testing.T) {
	srv := leasetest.StartRedis(t)
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("fence=%v", fence), func(t *testing.T) {
			holder, _ := newClient(t, srv.Client(t))
			wrdb := srv.Client(t)
			var acquires atomic.Int64
			wrdb.AddHook(argsHook(func(args []any) {
				if len(args) > 2 && (args[0] == "evalsha" || args[0] == "eval") && fmt.Sprint(args[2]) == "4" {
					acquires.Add(1)
				}
			}))
			w, _ := newClient(t, wrdb)
			op, _ := newClient(t, srv.Client(t))
			key := uniqueKey(t)
			warm(t, w, key) // scripts loaded, pool connected
			sp := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 5 * time.Second, MinValidity: 4 * time.Second, Fence: fence}
			release := make(chan struct{})
			held := hold(t, holder, key, spec(5*time.Second, 10*time.Second), release)
			type got struct {
				left time.Duration
				tok  lease.Token
			}
			res := make(chan got, 1)
			done := make(chan error, 1)
			go func() {
				done <- w.Do(context.Background(), key, sp, func(ctx context.Context) error {
					l, _ := lease.FromContext(ctx)
					res <- got{l.Remaining(), l.Token()}
					return nil
				})
			}()
			adv2WaitQueued(t, op, key, 1)
			// The waiter's subscription is live once it is queued and its
			// Client's inbox is confirmed; give the confirmation a moment.
			time.Sleep(100 * time.Millisecond)
			before := acquires.Load()
			close(release)
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			g := <-res
			info, err := op.Inspect(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			after := acquires.Load() - before
			t.Logf("acquires after the release: %d; entered with %v left, token %d (key's last token %d)", after, g.left.Round(time.Millisecond), g.tok, info.LastToken)
			if after != 0 {
				t.Errorf("the waiter sent %d acquires after the release; it should enter on the release's message", after)
			}
			if g.left < sp.MinValidity {
				t.Errorf("entered with %v left, MinValidity %v", g.left, sp.MinValidity)
			}
			if fence && (g.tok == 0 || g.tok != info.LastToken) {
				t.Errorf("fenced waiter entered with token %d, the key's last token is %d", g.tok, info.LastToken)
			}
			if !fence && g.tok != 0 {
				t.Errorf("unfenced waiter entered with token %d", g.tok)
			}
		})
	}
}
