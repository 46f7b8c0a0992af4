// Command leasectl shows and operates the leases that leasegen's runtime
// keeps in Redis: who holds what, with which fencing token, for how long,
// who waits; it can force-release a stuck lease and watch grants and
// releases live, and check that a service's ACL user can run every path
// of the runtime.
//
//	go get -tool github.com/leasegen/leasegen/cmd/leasectl
//	export REDIS_URL=redis://user:password@redis.internal:6379/0
//	go tool leasectl list 'orders:*'
//	go tool leasectl show orders:42
//	go tool leasectl release orders:42
//	go tool leasectl watch 'orders:*'
//	go tool leasectl check -url redis://leases:secret@redis.internal:6379/0
//
// Every command takes the connection flags: -url (default $REDIS_URL, else
// redis://localhost:6379; rediss:// for TLS, with -cacert for a private
// CA), -cluster for a Redis Cluster (more seed nodes as ?addr=host:port),
// -sentinel MASTER for a Sentinel deployment (the URL names a Sentinel;
// pointed at a node instead, leasectl reaches that node even after a
// failover demoted it), -prefix when the services use lease.WithPrefix,
// -timeout per request.
//
// Exit status: 0 done, 1 failed (including a release that found the lease
// released or taken by another holder since it was shown), 2 usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs dial retries on its own; leasectl reports the error.
	// Set once, before any client exists: go-redis reads its logger from
	// its own goroutines, and run is also called in-process by the tests.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
