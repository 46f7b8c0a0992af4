// Package adv21escready: found by round 21 (false negative, older than
// round 19). A start-up handshake: the goroutine signals it started, then
// works; the function returns after the handshake. Any send or close is
// taken for "done".
package adv21escready

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

//lease:lock y1 deadline=5s
func (s *S) startServer(ctx context.Context) error {
	ready := make(chan struct{})
	go func() { // documented limit (README): any close or send in the goroutine counts as its signal
		close(ready)
		_ = work(ctx)
	}()
	<-ready
	return nil
}
