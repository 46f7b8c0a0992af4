package leasetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// RunTests belongs in TestMain, which an example cannot have. In a test
// file of your package:
//
//	var srv *leasetest.Server
//
//	func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }
//
//	func TestCharge(t *testing.T) {
//		rec := &leasetest.Recorder{}
//		c, err := lease.New(srv.Client(t), lease.WithObserver(rec))
//		...
//	}
//
// RunTests starts srv before the tests, stops it after them and fails the
// run if goroutines leaked. This example does by hand what RunTests does
// around the tests, and in between what one test does.
func ExampleRunTests() {
	srv, err := leasetest.Start() // RunTests: before the tests
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop() // RunTests: after the tests

	// A test: a Client on srv with a Recorder, and assertions on the events.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}) // in a test: srv.Client(t)
	defer rdb.Close()
	rec := &leasetest.Recorder{}
	c, err := lease.New(rdb, lease.WithObserver(rec))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	spec := lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second}
	err = c.Do(context.Background(), "orders:42", spec, func(ctx context.Context) error {
		fmt.Println("charging order 42")
		return nil
	})
	fmt.Println("err:", err)
	fmt.Println("acquired:", rec.Count(lease.EventAcquired), "released:", rec.Count(lease.EventReleased))
	// Output:
	// charging order 42
	// err: <nil>
	// acquired: 1 released: 1
}
