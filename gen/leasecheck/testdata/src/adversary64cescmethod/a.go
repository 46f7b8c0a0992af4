// Package adversary64cescmethod: a goroutine running a method that closes
// its receiver's done channel, received before return (no finding).
package adversary64cescmethod

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

type worker struct{ done chan struct{} }

func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	_ = work(ctx)
}

//lease:lock p5 deadline=5s
func (s *S) methodGo(ctx context.Context) error {
	w := &worker{done: make(chan struct{})}
	go w.run(ctx)
	<-w.done
	return nil
}
