package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

// The examples talk to the redis-server this test binary starts (shared,
// see TestMain); a service passes its own go-redis client to lease.New.

func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	leases, err := lease.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leases.Close()

	ctx := context.Background()
	key := "orders:" + lease.KeyPart("42")
	spec := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second}
	err = leases.Do(ctx, key, spec, func(ctx context.Context) error {
		l, _ := lease.FromContext(ctx)
		fmt.Println("holding", l.Key())

		// Meanwhile another process (here, a second Client) tries once
		// (Spec.Wait is 0) and finds the lease busy.
		other, err := lease.New(rdb)
		if err != nil {
			return err
		}
		defer other.Close()
		err = other.Do(context.Background(), key, spec, func(context.Context) error {
			fmt.Println("never printed")
			return nil
		})
		fmt.Println("the other process is busy:", errors.Is(err, lease.ErrBusy))
		return nil
	})
	fmt.Println("done:", err)

	// Released: the next call gets the lease at once.
	err = leases.Do(ctx, key, spec, func(ctx context.Context) error { return nil })
	fmt.Println("again:", err)
	// Output:
	// holding orders:42
	// the other process is busy: true
	// done: <nil>
	// again: <nil>
}

// When the call's budget runs out, the function's context is cancelled with
// cause ErrDeadline, and Do's error wraps ErrDeadline and
// context.DeadlineExceeded.
func ExampleClient_Do_deadline() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	leases, err := lease.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leases.Close()

	spec := lease.Spec{TTL: 10 * time.Second, Deadline: 200 * time.Millisecond}
	err = leases.Do(context.Background(), "export:2026-11-29", spec, func(ctx context.Context) error {
		<-ctx.Done() // slow work that watches its context
		fmt.Println("work stopped, cause ErrDeadline:", errors.Is(context.Cause(ctx), lease.ErrDeadline))
		return ctx.Err()
	})
	fmt.Println("ErrDeadline:", errors.Is(err, lease.ErrDeadline))
	fmt.Println("context.DeadlineExceeded:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// work stopped, cause ErrDeadline: true
	// ErrDeadline: true
	// context.DeadlineExceeded: true
}

// With Spec.Fence every grant carries a fencing token, strictly increasing
// per key; the protected resource keeps the newest token it has accepted and
// refuses older ones (package runtime/fence does that).
func ExampleTokenFrom() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	leases, err := lease.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leases.Close()

	ctx := context.Background()
	fenced := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second, Fence: true}
	var tokens []lease.Token
	for range 2 {
		err := leases.Do(ctx, "stock:sku-7", fenced, func(ctx context.Context) error {
			tok, ok := lease.TokenFrom(ctx)
			if !ok {
				return errors.New("no token")
			}
			tokens = append(tokens, tok)
			return nil
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("the second grant's token is greater:", tokens[1] > tokens[0])

	unfenced := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second}
	leases.Do(ctx, "stock:sku-8", unfenced, func(ctx context.Context) error {
		_, ok := lease.TokenFrom(ctx)
		fmt.Println("a token without Fence:", ok)
		return nil
	})
	// Output:
	// the second grant's token is greater: true
	// a token without Fence: false
}

// An Observer sees every outcome of every call, synchronously and in
// order; metrics, traces and logs are adapters of this one method.
func ExampleWithObserver() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	obs := lease.ObserverFunc(func(e lease.Event) {
		fmt.Printf("%s %s", e.Kind, e.Key)
		if e.Kind == lease.EventDone {
			fmt.Printf(" (busy: %v)", errors.Is(e.Err, lease.ErrBusy))
		}
		fmt.Println()
	})
	a, err := lease.New(rdb, lease.WithObserver(obs))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := lease.New(rdb, lease.WithObserver(obs))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	ctx := context.Background()
	spec := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second}
	a.Do(ctx, "jobs:settle", spec, func(ctx context.Context) error {
		// While a holds the lease, b tries once.
		b.Do(context.Background(), "jobs:settle", spec, func(context.Context) error { return nil })
		return nil
	})
	// Output:
	// acquired jobs:settle
	// busy jobs:settle
	// done jobs:settle (busy: true)
	// released jobs:settle
	// done jobs:settle (busy: false)
}

// KeyPart escapes the values put into a key, so that distinct values always
// give distinct keys.
func ExampleKeyPart() {
	fmt.Println("orders:" + lease.KeyPart("42"))
	fmt.Println("a:" + lease.KeyPart("1:2") + ":" + lease.KeyPart("3"))
	fmt.Println("a:" + lease.KeyPart("1") + ":" + lease.KeyPart("2:3"))
	// Output:
	// orders:42
	// a:1%3A2:3
	// a:1:2%3A3
}

// Two candidates for one job, as two processes would run it: the first
// leads; when it shuts down, the lease is handed to the second at once,
// with a greater term number (its fencing token).
func ExampleClient_Lead() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	type term struct {
		owner string
		token lease.Token
	}
	terms := make(chan term)
	candidate := func(ctx context.Context, owner string) (done chan error) {
		leases, err := lease.New(rdb)
		if err != nil {
			panic(err)
		}
		done = make(chan error, 1)
		go func() {
			defer leases.Close()
			done <- leases.Lead(ctx, "jobs:example-settle", lease.LeadSpec{TTL: 10 * time.Second, Owner: owner}, func(ctx context.Context) error {
				tok, _ := lease.TokenFrom(ctx)
				terms <- term{owner, tok}
				<-ctx.Done() // lead until leadership is lost or this candidate stops
				return nil
			})
		}()
		return done
	}
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := candidate(ctxA, "node-a")
	first := <-terms
	fmt.Println(first.owner, "leads")

	ctxB, stopB := context.WithCancel(context.Background())
	doneB := candidate(ctxB, "node-b")
	observer, _ := lease.New(rdb)
	defer observer.Close()
	l, _ := observer.Leader(context.Background(), "jobs:example-settle")
	fmt.Println("Leader reports", l.Owner, "with term", l.Term == first.token)

	stopA() // node-a shuts down: its lease goes to node-b at once
	second := <-terms
	fmt.Println(second.owner, "leads, with a greater term:", second.token > first.token)
	fmt.Println("node-a's Lead returned", <-doneA)
	stopB()
	fmt.Println("node-b's Lead returned", <-doneB)
	// Output:
	// node-a leads
	// Leader reports node-a with term true
	// node-b leads, with a greater term: true
	// node-a's Lead returned <nil>
	// node-b's Lead returned <nil>
}
