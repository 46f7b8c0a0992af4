// Package adv31bescfanincontinue: found by round 31b (false negative). A
// fan-in loop that can continue before its receive skips the receive on
// that iteration, so it waits for fewer goroutines than the spawning loop
// started (as one that breaks or returns early). A continue after the
// receive, or one of a loop nested in the body, is no such skip.
package adv31bescfanincontinue

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context, id string) error { return nil }

//lease:lock a:{batch} deadline=5s
func (s *S) skipping(ctx context.Context, batch string, ids []string) error {
	errc := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errc <- work(ctx, id) }() // want `goroutine uses skipping's lease context and may outlive the lease`
	}
	var first error
	for _, id := range ids {
		if id == "" {
			continue
		}
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

//lease:lock b:{batch} deadline=5s
func (s *S) continueAfter(ctx context.Context, batch string, ids []string) error {
	errc := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errc <- work(ctx, id) }()
	}
	n := 0
	for _, id := range ids {
		err := <-errc
		if err == nil || id == "" {
			continue
		}
		n++
	}
	_ = n
	return nil
}

//lease:lock c:{batch} deadline=5s
func (s *S) nestedContinue(ctx context.Context, batch string, ids []string) error {
	errc := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errc <- work(ctx, id) }()
	}
	n := 0
	for _, id := range ids {
		for _, r := range id {
			if r == '-' {
				continue
			}
			n++
		}
		if err := <-errc; err != nil {
			n++
		}
	}
	_ = n
	return nil
}
