// Package adv21escdefault: found by round 21 (false negative). A select
// whose default returns at once: the goroutine still runs after the
// return. The default's body is added to the last KindSelectAfterCase
// block, which escape.go takes for "no case ran, which a select never
// does".
package adv21escdefault

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock d1 deadline=5s
func (s *S) pollOnce(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }() // want `goroutine uses pollOnce's lease context and may outlive the lease`
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}
