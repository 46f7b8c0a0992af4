// Package adversary65aescsignal: goroutines running the package's
// methods that close the channel waited for, received before return (no
// finding): the receiver is the channel itself, or the close is in a
// method of the receiver that the goroutine calls.
package adversary65aescsignal

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

func work(ctx context.Context) error { return nil }

type done chan struct{}

func (d done) run(ctx context.Context) {
	defer close(d)
	_ = work(ctx)
}

//lease:lock p1 deadline=5s
func (s *S) recvChan(ctx context.Context) error {
	d := make(done)
	go d.run(ctx)
	<-d
	return nil
}

type worker struct{ done chan struct{} }

func (w *worker) finish() { close(w.done) }

func (w *worker) run(ctx context.Context) {
	defer w.finish()
	_ = work(ctx)
}

//lease:lock p2 deadline=5s
func (s *S) viaHelper(ctx context.Context) error {
	w := &worker{done: make(chan struct{})}
	go w.run(ctx)
	<-w.done
	return nil
}
