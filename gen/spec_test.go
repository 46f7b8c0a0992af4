package gen

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The generator's wait warning states when the runtime stops waiting; this
// holds it to what Do does against a real server: with a busy key, Do
// reports busy after waitCap, not after Wait.
func TestWaitCapMatchesRuntime(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := lease.Spec{TTL: 600 * time.Millisecond, Deadline: time.Second, Wait: 900 * time.Millisecond, MinValidity: 300 * time.Millisecond}
	limit, reserve := waitCap(spec)
	if limit != 600*time.Millisecond || reserve != 100*time.Millisecond {
		t.Fatalf("waitCap = %v, %v; want 600ms, 100ms", limit, reserve)
	}

	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), "cap", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second}, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	start := time.Now()
	err = c.Do(context.Background(), "cap", spec, func(context.Context) error { return errors.New("entered a held lease") })
	took := time.Since(start)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("Do on a held key = %v, want ErrBusy", err)
	}
	if took < limit-50*time.Millisecond || took > limit+200*time.Millisecond {
		t.Fatalf("busy reported after %v; the warning says waiting stops after %v (wait is %v)", took, limit, spec.Wait)
	}
}
