package lease_test

// Round 56: attacks on deployments (a helper's adversary round) that held;
// kept as regressions for what they combine.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
	"github.com/redis/go-redis/v9"
)

// adv56InClass reports whether err is in one of the documented classes.
func adv56InClass(err error) bool {
	for _, e := range []error{lease.ErrBusy, lease.ErrUnknown, lease.ErrRefused, lease.ErrLost, lease.ErrDeadline, lease.ErrLowValidity, lease.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func adv56ShortDial(o *redis.FailoverOptions) { o.DialTimeout = 300 * time.Millisecond }

// The Sentinel primary is paused (SIGSTOP: a hung host) while a lease is
// held, a kept lease is idle and a leader holds a term; the sentinels fail
// over to a replica. The holder's function must be told of the loss
// (ErrLost) before anyone else enters on the new primary; the kept lease
// must not be reused once another process holds the key there; terms
// overlap only when one was reported lost; every error is in a documented
// class.
func TestAdversary56_SentinelPausedPrimary(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	old, err := sn.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cA, _ := newClient(t, sn.FailoverClient(t, adv56ShortDial), lease.WithRecheck(200*time.Millisecond))
	cB, _ := newClient(t, sn.FailoverClient(t, adv56ShortDial), lease.WithRecheck(200*time.Millisecond))
	key, keptKey, leadKey := "adv56-p", "adv56-p-kept", "adv56-p-lead"

	// Holder on A.
	var hExit time.Time
	hcause := make(chan error, 1)
	hdone := make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		hdone <- cA.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 60 * time.Second, Fence: true}, func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			hExit = time.Now()
			hcause <- context.Cause(ctx)
			return nil
		})
	}()
	<-entered
	// Kept lease on A, idle.
	if err := cA.Do(ctx, keptKey, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Keep: time.Minute, Fence: true}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Leaders.
	type termRec struct {
		who        int
		tok        lease.Token
		start, end time.Time
		cause      error
	}
	var tmu sync.Mutex
	var terms []termRec
	lctx, lcancel := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	for i, c := range []*lease.Client{cA, cB} {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			_ = c.Lead(lctx, leadKey, lease.LeadSpec{TTL: time.Second, Owner: fmt.Sprint("n", i), Backoff: 100 * time.Millisecond}, func(ctx context.Context) error {
				tok, _ := lease.TokenFrom(ctx)
				r := termRec{who: i, tok: tok, start: time.Now()}
				<-ctx.Done()
				r.end, r.cause = time.Now(), context.Cause(ctx)
				tmu.Lock()
				terms = append(terms, r)
				tmu.Unlock()
				return nil
			})
		}()
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)

	pausedAt := time.Now()
	old.Pause()
	t.Cleanup(old.Resume)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	newPrimary, err := sn.WaitFailover(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s done %v after the pause", newPrimary.Addr(), time.Since(pausedAt).Round(time.Millisecond))

	// B takes the held key on the new primary.
	var bIn time.Time
	var errs []error
	for bIn.IsZero() && time.Since(pausedAt) < 20*time.Second {
		err := cB.Do(ctx, key, lease.Spec{TTL: time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second, MinValidity: 200 * time.Millisecond},
			func(context.Context) error { bIn = time.Now(); return nil })
		if err != nil {
			errs = append(errs, err)
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, e := range errs {
		if !adv56InClass(e) {
			t.Errorf("B's error outside the classes: %v", e)
		}
	}
	if bIn.IsZero() {
		t.Fatalf("B never got the key after the failover: %v", errs)
	}
	t.Logf("B entered %v after the pause (%d errors first)", bIn.Sub(pausedAt).Round(time.Millisecond), len(errs))
	select {
	case c := <-hcause:
		if !errors.Is(c, lease.ErrLost) {
			t.Errorf("holder's cause %v, want ErrLost", c)
		}
		if !hExit.Before(bIn) {
			t.Errorf("holder left its function %v after B entered", hExit.Sub(bIn))
		}
	default:
		t.Errorf("B entered while the holder's function still runs with its context live")
	}
	herr := <-hdone
	if !errors.Is(herr, lease.ErrLost) {
		t.Errorf("holder's Do: %v, want ErrLost", herr)
	}

	// B holds the kept key; A must not reuse its kept lease meanwhile.
	bHolding := make(chan struct{})
	bRelease := make(chan struct{})
	bdone := make(chan error, 1)
	go func() {
		var last error
		for time.Since(pausedAt) < 25*time.Second {
			last = cB.Do(ctx, keptKey, lease.Spec{TTL: time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second, MinValidity: 200 * time.Millisecond},
				func(ctx context.Context) error {
					close(bHolding)
					select {
					case <-bRelease:
					case <-ctx.Done():
					}
					return nil
				})
			if last == nil {
				break
			}
		}
		bdone <- last
	}()
	select {
	case <-bHolding:
	case err := <-bdone:
		t.Fatalf("B never got the kept key: %v", err)
	}
	aErr := cA.Do(ctx, keptKey, lease.Spec{TTL: time.Second, Deadline: time.Second, Keep: time.Minute}, func(context.Context) error {
		t.Errorf("A entered its kept lease while B holds the key on the new primary")
		return nil
	})
	t.Logf("A on the kept key while B holds it: %v", aErr)
	close(bRelease)
	if err := <-bdone; err != nil {
		t.Errorf("B on the kept key: %v", err)
	}

	lcancel()
	lwg.Wait()
	tmu.Lock()
	defer tmu.Unlock()
	for i, a := range terms {
		t.Logf("term %d by n%d: %v .. %v cause %v", a.tok, a.who, a.start.Sub(pausedAt).Round(time.Millisecond), a.end.Sub(pausedAt).Round(time.Millisecond), a.cause)
		for _, b := range terms[i+1:] {
			if a.start.Before(b.end) && b.start.Before(a.end) && !errors.Is(a.cause, lease.ErrLost) && !errors.Is(b.cause, lease.ErrLost) {
				t.Errorf("terms %d and %d overlap, neither reported lost", a.tok, b.tok)
			}
		}
	}
}
