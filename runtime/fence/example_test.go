package fence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A holder whose lease ended (a paused process, say) writes late with its
// old stamp; the fenced record refuses the write.
func ExampleFrom() {
	// A throwaway redis-server for the example; a service uses its own client.
	srv, err := leasetest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	leases, err := lease.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leases.Close()

	ctx := context.Background()
	store := fence.NewRedis(rdb)
	spec := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second, Fence: true}

	// Node A writes under its lease and, like a process paused mid-work,
	// still has its stamp after the lease is gone.
	var late fence.Stamp
	err = leases.Do(ctx, "stock:sku-7", spec, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		late = st
		return store.Set(ctx, st, "stock:{sku-7}", "41")
	})
	fmt.Println("A writes 41:", err)

	// Node B holds the lease next, with a greater token.
	err = leases.Do(ctx, "stock:sku-7", spec, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		return store.Set(ctx, st, "stock:{sku-7}", "40")
	})
	fmt.Println("B writes 40:", err)

	// A's late write is refused and writes nothing.
	err = store.Set(ctx, late, "stock:{sku-7}", "39")
	fmt.Println("A's late write is stale:", errors.Is(err, fence.ErrStale))
	v, err := store.Get(ctx, "stock:{sku-7}")
	fmt.Println("stock:", v, err)

	// Outside a fenced lease there is no stamp to write with.
	_, err = fence.From(ctx)
	fmt.Println("no lease:", errors.Is(err, fence.ErrNoLease))
	// Output:
	// A writes 41: <nil>
	// B writes 40: <nil>
	// A's late write is stale: true
	// stock: 40 <nil>
	// no lease: true
}

// Memory keeps values with the stamp of their last write. Stamps come from
// fence.From(ctx) inside a fenced lease; these are made by hand.
func ExampleMemory() {
	m := fence.NewMemory[int]()
	fmt.Println(m.Set(fence.Stamp{Token: 10, Owner: "a"}, "k", 1))
	fmt.Println(m.Set(fence.Stamp{Token: 10, Owner: "a"}, "k", 2)) // the same grant writes again
	err := m.Set(fence.Stamp{Token: 9, Owner: "b"}, "k", 3)        // an older grant
	fmt.Println(errors.Is(err, fence.ErrStale))
	v, st, _ := m.Get("k")
	fmt.Println(v, st.Token)
	// Output:
	// <nil>
	// <nil>
	// true
	// 2 10
}
