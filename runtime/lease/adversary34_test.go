package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Round 34: a plain *redis.Client (no ContextTimeoutEnabled) whose
// ReadTimeout is -1 (no timeout of its own) and whose WriteTimeout is
// short and different: deadlines still hold on a paused server for Do, a
// waiter, Leader and Inspect, and healthy traffic is not cut by the short
// write timeout.
func TestAdversary34_PlainClientOddTimeouts(t *testing.T) {
	srv := leasetest.StartRedis(t)
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: 30 * time.Millisecond})
	defer plain.Close()
	c, err := lease.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	key := uniqueKey(t)
	for i := 0; i < 20; i++ {
		if err := c.Do(ctx, key, spec(time.Second, 2*time.Second), nop); err != nil {
			t.Fatal(err)
		}
	}
	if plain.Options().ContextTimeoutEnabled || plain.Options().ReadTimeout != 0 || plain.Options().WriteTimeout != 30*time.Millisecond {
		t.Fatalf("the user's options changed: %+v", plain.Options())
	}
	release := make(chan struct{})
	held := hold(t, c, key, spec(3*time.Second, 10*time.Second), release)
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	check := func(name string, limit time.Duration, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); took > limit+300*time.Millisecond {
			t.Errorf("%s with Redis paused returned after %v (err %v), want about %v", name, took.Round(time.Millisecond), err, limit)
		}
		if err == nil {
			t.Errorf("%s with Redis paused: nil error", name)
		}
	}
	check("Do", 400*time.Millisecond, func() error {
		return c.Do(ctx, uniqueKey(t), spec(5*time.Second, 400*time.Millisecond), func(context.Context) error {
			t.Error("fn entered with Redis paused")
			return nil
		})
	})
	check("Inspect", 400*time.Millisecond, func() error {
		ictx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		_, err := c.Inspect(ictx, key)
		return err
	})
	check("Leader", 400*time.Millisecond, func() error {
		ictx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		_, err := c.Leader(ictx, key)
		return err
	})
	srv.Resume()
	resumed = true
	close(release)
	if err := <-held; err != nil && !errors.Is(err, lease.ErrLost) {
		t.Fatalf("holder: %v", err)
	}
}

// Round 34: the user closes the plain client while the lease Client still
// runs (against Close's doc, as a service shutting down in the wrong order
// does): calls fail within their deadlines, never enter, and the lease
// Client's Close then leaves no goroutine behind.
func TestAdversary34_PlainClientClosedFirst(t *testing.T) {
	srv := leasetest.StartRedis(t)
	ignore := goleak.IgnoreCurrent()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	c, err := lease.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	release := make(chan struct{})
	held := hold(t, c, key, spec(time.Second, 5*time.Second), release)
	waiter := make(chan error, 1)
	go func() {
		waiter <- c.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}, func(context.Context) error {
			t.Error("the waiter entered after its go-redis client was closed")
			return nil
		})
	}()
	queued(t, srv.Client(t), key, 1)
	plain.Close()
	start := time.Now()
	err = c.Do(ctx, uniqueKey(t), spec(time.Second, 500*time.Millisecond), func(context.Context) error {
		t.Error("entered with the go-redis client closed")
		return nil
	})
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("Do on a closed go-redis client: %v after %v", err, time.Since(start))
	}
	close(release)
	select {
	case err := <-held:
		t.Logf("holder: %v", err)
	case <-time.After(4 * time.Second):
		t.Fatal("the holder did not return")
	}
	select {
	case err := <-waiter:
		if err == nil {
			t.Fatal("the waiter returned nil")
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the waiter did not return")
	}
	c.Close()
	goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/leasegen/leasegen/runtime/leasetest.(*Server).Pause"))
}

// Round 34: what a hook on a plain client sees. New's doc says lease
// commands of a plain client do not reach its hooks (go-redis's clone
// "starts without them"); a hook added before New and one added after are
// counted, and neither may break lease traffic.
func TestAdversary34_PlainClientHooks(t *testing.T) {
	srv := leasetest.StartRedis(t)
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer plain.Close()
	before := &countHook{}
	plain.AddHook(before)
	c, err := lease.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	after := &countHook{}
	plain.AddHook(after)
	for i := 0; i < 3; i++ {
		if err := c.Do(context.Background(), uniqueKey(t), spec(time.Second, 2*time.Second), nop); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("lease commands seen by a hook added before New: %d, after New: %d", before.n.Load(), after.n.Load())
	if before.n.Load() != 0 || after.n.Load() != 0 {
		t.Fatalf("hooks on a plain client saw lease commands (before New %d, after New %d); New's doc says they see none", before.n.Load(), after.n.Load())
	}
}
