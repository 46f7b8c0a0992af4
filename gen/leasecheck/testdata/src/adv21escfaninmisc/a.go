// Package adv21escfaninmisc: found by round 21 (false negatives of the
// fan-in heuristic, less common shapes): a break before the receive, two
// goroutines per iteration with one receive, a nested spawning loop
// matched by its inner header only.
package adv21escfaninmisc

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock m1 deadline=5s
func (s *S) breakFirst(ctx context.Context, ids []string, stop func() bool) error {
	errc := make(chan error, len(ids))
	for range ids {
		go func() { errc <- work(ctx) }() // want `goroutine uses breakFirst's lease context and may outlive the lease`
	}
	for range ids {
		if stop() {
			break
		}
		<-errc
	}
	return nil
}

//lease:lock m2 deadline=5s
func (s *S) twoPerIter(ctx context.Context, ids []string) error {
	errc := make(chan error, 2*len(ids))
	for range ids {
		go func() { errc <- work(ctx) }() // want `goroutine uses twoPerIter's lease context and may outlive the lease`
		go func() { errc <- work(ctx) }() // want `goroutine uses twoPerIter's lease context and may outlive the lease`
	}
	for range ids {
		<-errc
	}
	return nil
}

//lease:lock m3 deadline=5s
func (s *S) nested(ctx context.Context, rows, cols []string) error {
	errc := make(chan error, len(rows)*len(cols))
	for range rows {
		for range cols {
			go func() { errc <- work(ctx) }() // want `goroutine uses nested's lease context and may outlive the lease`
		}
	}
	for range cols {
		<-errc
	}
	return nil
}
