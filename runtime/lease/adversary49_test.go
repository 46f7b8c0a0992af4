package lease_test

// Round 49: CI flakes of stop 36 read as attacks. A waiter that is awake
// (its re-check's acquire on its way) when Close comes is not abandoned by
// Close: it gives its place up itself, and a grant a release handed it
// meanwhile with it. That giving up had 50ms, as for a caller that
// cancelled, although Close waits for the call for the whole release
// timeout and the service closes its go-redis client right after Close.
// Run: go test -race -count=1 -run 'TestAdversary49_' ./runtime/lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv49Hook runs before and after every command a go-redis client sends,
// and sees what the command returned.
type adv49Hook struct {
	before func(args []any) error
	after  func(args []any, cmd redis.Cmder, err error)
}

func (adv49Hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv49Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.before(cmd.Args()); err != nil {
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		h.after(cmd.Args(), cmd, err)
		return err
	}
}
func (adv49Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Q's waiter re-checks: its acquire finds the key busy, and its reply is
// held up (the hook) while the holder's release hands Q's waiter the key
// for its full TTL (Q's subscription is counted, its traffic dropped) and
// Close begins. The waiter, awake, then finds the Client closing and gives
// its place up; that command is slowed by 150ms on its way out (a
// client-side hook: a rate limiter, a tracer). Close's bound (the release
// timeout, 1s here) covers it, and the service closes Q's go-redis client
// once Close returned: the giving up must have reached Redis by then, or
// the key stays held for the waiter's 20s TTL while another Client's
// waiter waits.
func TestAdversary49_AwakeWaiterGivesUpWithinClosesBound(t *testing.T) {
	srv := leasetest.StartRedis(t)
	hc, _ := adv23Client(t, srv.Addr())
	xc, _ := adv23Client(t, srv.Addr())
	warm(t, hc, "warm")
	warm(t, xc, "warm")
	ctx := context.Background()
	key := "adv49-awake"

	p := adv12StartProxy(t, srv.Addr())
	rdbQ := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	defer rdbQ.Close()
	var holdAcq, slowRel, slowed atomic.Bool
	acqRan, acqGo := make(chan struct{}), make(chan struct{})
	relSent := make(chan error, 1)
	rdbQ.AddHook(adv49Hook{
		before: func(args []any) error {
			if adv10Script(args, "6") && slowRel.CompareAndSwap(true, false) {
				time.Sleep(150 * time.Millisecond)
				slowed.Store(true)
			}
			return nil
		},
		after: func(args []any, cmd redis.Cmder, err error) {
			if adv10Script(args, "4") && holdAcq.CompareAndSwap(true, false) {
				close(acqRan)
				<-acqGo
			}
			if adv10Script(args, "6") && slowed.CompareAndSwap(true, false) {
				relSent <- err
			}
		},
	})
	qc, err := lease.New(rdbQ, lease.WithRecheck(100*time.Millisecond), lease.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, qc, "warm")

	release := make(chan struct{})
	held := hold(t, hc, key, spec(20*time.Second, 30*time.Second), release)
	wdone := make(chan error, 1)
	var entered atomic.Bool
	go func() {
		wdone <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: 30 * time.Second, Wait: 15 * time.Second}, func(context.Context) error {
			entered.Store(true)
			return nil
		})
	}()
	adv2WaitQueued(t, xc, key, 1)
	xin := queueBehind(t, xc, key, 1, nil)
	// Both waiting Clients' inboxes are subscribed (a release then hands
	// Q's waiter the key for its TTL), then Q's hears nothing more.
	admin := srv.Client(t)
	if !waitFor(5*time.Second, func() bool {
		chans, _ := admin.PubSubChannels(ctx, "*probe*").Result()
		return len(chans) == 2
	}) {
		t.Fatal("the waiting Clients' inboxes were never subscribed")
	}
	p.setDrop(true, true)
	holdAcq.Store(true)
	select {
	case <-acqRan: // a re-check's acquire found the key busy; its reply waits
	case <-time.After(5 * time.Second):
		t.Fatal("Q's waiter never re-checked")
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if info, _ := xc.Inspect(ctx, key); info.Holder == "" || info.TTL < 10*time.Second {
		t.Fatalf("the release did not hand Q's waiter the key for its TTL: %+v", info)
	}
	slowRel.Store(true)
	closed := make(chan struct{})
	go func() {
		qc.Close()
		close(closed)
	}()
	time.Sleep(20 * time.Millisecond) // Close has begun: the hub is closing
	close(acqGo)
	<-closed
	rdbQ.Close() // no call of Q is in its function
	werr := <-wdone
	if entered.Load() || !errors.Is(werr, lease.ErrClosed) {
		t.Fatalf("Q's waiter: %v (entered %v), want ErrClosed without entering", werr, entered.Load())
	}
	select {
	case err := <-relSent:
		t.Logf("Q's giving up (slowed 150ms): %v", err)
	default:
		t.Error("Q's giving up was not sent before Close returned")
	}
	if after, info, ok := handedOn(xc, key, xin); ok {
		t.Logf("the other Client's waiter entered %v after Close", after.Round(time.Millisecond))
	} else {
		t.Errorf("Close returned and Q's go-redis client was closed; 1.5s later the key is still held by %q for %v more, and the other Client's waiter waits", info.Holder, info.TTL.Round(time.Second))
	}
}

// The giving up of a waiter awake at Close has until Close's bound, but
// not past the call's own deadline: Do returns by its deadline (plus a
// few milliseconds) however long the Client's release timeout (5s here)
// and however slow the command (a hook that holds it until its context
// ends).
func TestAdversary49_AwakeWaiterGivingUpKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	st := watchStalls(t, 5*time.Millisecond)
	srv := leasetest.StartRedis(t)
	hc, _ := adv23Client(t, srv.Addr())
	ctx := context.Background()
	key := "adv49-deadline"
	rdbQ := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdbQ.Close()
	var holdAcq, slowRel atomic.Bool
	acqRan, acqGo := make(chan struct{}), make(chan struct{})
	rdbQ.AddHook(adv49CtxHook{
		before: func(ctx context.Context, args []any) {
			if adv10Script(args, "6") && slowRel.CompareAndSwap(true, false) {
				<-ctx.Done() // a command held until its context ends
			}
		},
		after: func(args []any) {
			if adv10Script(args, "4") && holdAcq.CompareAndSwap(true, false) {
				close(acqRan)
				<-acqGo
			}
		},
	})
	qc, err := lease.New(rdbQ, lease.WithRecheck(100*time.Millisecond), lease.WithReleaseTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, qc, "warm")
	release := make(chan struct{})
	held := hold(t, hc, key, spec(20*time.Second, 30*time.Second), release)
	defer func() { close(release); <-held }()
	const deadline = 1500 * time.Millisecond
	start := time.Now()
	wdone := make(chan error, 1)
	go func() {
		wdone <- qc.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, MinValidity: 100 * time.Millisecond, Deadline: deadline, Wait: time.Second}, func(context.Context) error {
			t.Error("entered")
			return nil
		})
	}()
	adv2WaitQueued(t, hc, key, 1)
	holdAcq.Store(true)
	select {
	case <-acqRan:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never re-checked")
	}
	slowRel.Store(true)
	go qc.Close()
	time.Sleep(20 * time.Millisecond)
	close(acqGo)
	werr := <-wdone
	end := time.Now()
	took := end.Sub(start)
	t.Logf("Do returned %v after %v (deadline %v; release timeout 5s)", werr, took.Round(time.Millisecond), deadline)
	if !errors.Is(werr, lease.ErrClosed) {
		t.Errorf("Do = %v, want ErrClosed", werr)
	}
	if took-st.lost(start.Add(deadline), end) > deadline+150*time.Millisecond {
		t.Errorf("Do returned %v after its start, past its deadline %v: the giving up waited for Close's bound", took.Round(time.Millisecond), deadline)
	}
}

// adv49CtxHook runs before (with the command's context) and after every
// command a go-redis client sends.
type adv49CtxHook struct {
	before func(ctx context.Context, args []any)
	after  func(args []any)
}

func (adv49CtxHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv49CtxHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.before(ctx, cmd.Args())
		err := next(ctx, cmd)
		h.after(cmd.Args())
		return err
	}
}
func (adv49CtxHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
