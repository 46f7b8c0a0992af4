// Package adv19heartbeat: found by round 19, fixed (false positive). The only return
// follows a receive from errc, which the goroutine sends on; the
// ticker case only loops.
package adv19heartbeat

import (
	"context"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock e2 deadline=5s
func (s *S) heartbeat(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-t.C:
		}
	}
}

func use(s *S) { _ = s.Heartbeat(context.Background()) }
