package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A restart (no persistence: an empty dataset) while a holder holds two
// keys and waiters of another Client are queued on them: the waiters get
// the keys from the empty server, the holder learns its loss; nothing the
// calls write after the restart is left without an expiry, and the
// keyspace drains once they end.
func TestAdversary75a_RestartMidQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := leasetest.StartRedis(t)
	const recheck = 200 * time.Millisecond
	opts := []lease.Option{lease.WithRecheck(recheck), lease.WithCounterTTL(time.Second), lease.WithReleaseTimeout(100 * time.Millisecond)}
	holder, _ := newClient(t, srv.Client(t), opts...)
	w, wrec := newClient(t, srv.Client(t), opts...)
	var hdones []<-chan error
	for i := range 2 {
		hdones = append(hdones, hold(t, holder, fmt.Sprintf("a75-rs-%d", i), lease.Spec{TTL: 1500 * time.Millisecond, Deadline: 4 * time.Second, Fence: true}, nil))
	}
	done := make(chan error, 6)
	for i := range 6 {
		go func() {
			done <- w.Do(ctx, fmt.Sprintf("a75-rs-%d", i%2), lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second, Fence: i%2 == 0}, func(context.Context) error {
				time.Sleep(20 * time.Millisecond)
				return nil
			})
		}()
	}
	a75WaitEvent(t, wrec, lease.EventWaiting, 6, 5*time.Second)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	stop := make(chan struct{})
	looks := a75Sample(t, map[string]time.Duration{
		"lock": 1500 * time.Millisecond, "tomb": time.Second, "counter": time.Second,
		"queue": 2*recheck + 100*time.Millisecond, "qexp": 2*recheck + 100*time.Millisecond,
	}, stop, admin)
	var errs []string
	for range 6 {
		if err := <-done; err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, d := range hdones {
		if err := <-d; err != nil {
			errs = append(errs, "holder: "+err.Error())
		}
	}
	close(stop)
	t.Logf("%d looks; errors: %s", <-looks, strings.Join(errs, "; "))
	a75Drain(t, "after the restart and the calls", 1500*time.Millisecond, admin)
}
