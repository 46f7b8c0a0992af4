package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

// An operator's view: who holds a lease, and a forced release of exactly
// that holder. The holder's work is told as an ordinary loss.
func ExampleClient_ForceRelease() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	leases, err := lease.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leases.Close()
	ctx := context.Background()
	key := "reports:" + lease.KeyPart("stuck")

	// A stuck job holds the lease (TTL 300ms: renewed every 100ms).
	entered, cause := make(chan struct{}), make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- leases.Do(ctx, key, lease.Spec{TTL: 300 * time.Millisecond, Deadline: time.Minute, Fence: true}, func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	<-entered

	info, err := leases.Inspect(ctx, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", !info.Free(), "fenced:", info.Token > 0, "ttl left > 0:", info.TTL > 0)

	res, err := leases.ForceRelease(ctx, key, info.Holder)
	fmt.Println("force release:", res, err)
	fmt.Println("the job's context:", errors.Is(<-cause, lease.ErrLost))
	fmt.Println("its Do:", errors.Is(<-done, lease.ErrLost))

	// The identity shown no longer holds it: a second release touches
	// nothing.
	res, err = leases.ForceRelease(ctx, key, info.Holder)
	fmt.Println("again:", res, err)
	// Output:
	// held: true fenced: true ttl left > 0: true
	// force release: released <nil>
	// the job's context: true
	// its Do: true
	// again: not held <nil>
}

// Listing the leases of a pattern, a page at a time.
func ExampleClient_List() {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	leases, err := lease.New(rdb, lease.WithPrefix("example-list:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leases.Close()
	ctx := context.Background()
	spec := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}
	_ = leases.Do(ctx, "invoices:7", spec, func(ctx context.Context) error {
		for cursor := ""; ; {
			page, next, err := leases.List(ctx, "invoices:*", cursor)
			if err != nil {
				return err
			}
			for _, info := range page {
				fmt.Println(info.Key, len(info.Holder), "hex digits of identity")
			}
			if cursor = next; cursor == "" {
				return nil
			}
		}
	})
	// Output:
	// invoices:7 32 hex digits of identity
}
