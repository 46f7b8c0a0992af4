package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Close while nested same-key calls keep starting from goroutines of the
// enclosing fn (on fn's context, and on context.WithoutCancel of it), some
// outliving the enclosing call, with and without Keep. README, Close:
// "Close makes later calls and current waiters return ErrClosed at once;
// calls already in their function keep their leases until they return";
// "so the go-redis client may be closed once Close returned and no call is
// in its function". Nothing may be left held, no call may hang, every
// started call ends with one EventDone.
func TestAdversary64a_CloseAmidNestedSameKeyCalls(t *testing.T) {
	admin := shared.Client(t)
	for _, keep := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			c, rec := sharedClient(t)
			key := uniqueKey(t)
			s := lease.Spec{TTL: 3 * time.Second, Deadline: 3 * time.Second, Wait: 500 * time.Millisecond, Keep: keep, Fence: true}
			var started, afterClose, enteredAfterClose atomic.Int64
			var closedAt atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 10000)
			body := func(ctx context.Context) error {
				if closedAt.Load() != 0 {
					enteredAfterClose.Add(1)
				}
				time.Sleep(time.Millisecond)
				return nil
			}
			outer := c.Do(context.Background(), key, s, func(fctx context.Context) error {
				for g := 0; g < 6; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						ctx := fctx
						if g%2 == 1 {
							ctx = context.WithoutCancel(fctx)
						}
						fn := body
						if g < 2 {
							// One call of these outlives the enclosing call.
							fn = func(ctx context.Context) error {
								_ = body(ctx)
								select {
								case <-ctx.Done():
								case <-time.After(80 * time.Millisecond):
								}
								return nil
							}
						}
						for i := 0; i < 200; i++ {
							startedAfterClose := closedAt.Load() != 0
							started.Add(1)
							err := c.Do(ctx, key, s, fn)
							if startedAfterClose {
								afterClose.Add(1)
								if !errors.Is(err, lease.ErrClosed) {
									errs <- fmt.Errorf("g%d: a call started after Close returned %v", g, err)
								}
							}
							if errors.Is(err, lease.ErrClosed) {
								return
							}
						}
					}(g)
				}
				time.Sleep(20 * time.Millisecond)
				// Marked once Close returned: a call that read the mark
				// before Close set the Client closed is not one started
				// after Close (that race was the test's own).
				c.Close()
				closedAt.Store(time.Now().UnixNano())
				time.Sleep(20 * time.Millisecond)
				return nil
			})
			started.Add(1)
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("nested calls still running 5s after Close")
			}
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			t.Logf("outer: %v; %d calls, %d started after Close; %d entered after Close", outer, started.Load(), afterClose.Load(), enteredAfterClose.Load())
			if !waitFor(2*time.Second, func() bool { return admin.Exists(context.Background(), lockKey(key)).Val() == 0 }) {
				t.Errorf("the key is still held 2s after every call returned and Close (PTTL %v)", admin.PTTL(context.Background(), lockKey(key)).Val())
			}
			if d := rec.Count(lease.EventDone); int64(d) != started.Load() {
				t.Errorf("%d EventDone for %d calls", d, started.Load())
			}
		})
	}
}
