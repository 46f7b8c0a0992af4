package lease

import (
	"context"
	"sync"
	"time"
)

// deadlineCtx is a call's total deadline in fn's context, in place of
// context.WithDeadlineCause and its runtime timer (see clock): a tick on
// the Client's clock ends it. It is the parent of the loss's
// context.WithCancelCause, which fn's context is made of, so fn sees what
// WithDeadlineCause would show it:
//   - Deadline is the call's;
//   - at the deadline the context package cancels the child with this
//     context's Err, context.DeadlineExceeded (a context derived from fn's
//     reports it too), and its Cause: once the deadline passed, this
//     context answers the context package's own lookup of its nearest
//     cancellation (cancelCtxKey) with a context cancelled with
//     ErrDeadline (deadlineCause), so the Cause is ErrDeadline;
//   - when the caller's context ends first, its Err and Cause.
//
// The context package registers the child by AfterFunc (the afterFuncer
// interface), without a goroutine. Only the call's own loss context is
// made from it; it is never handed out.
type deadlineCtx struct {
	parent context.Context
	dl     time.Time
	k      *clock
	t      tick

	mu         sync.Mutex
	done       chan struct{}
	err        error
	expired    bool        // ended by its deadline
	after      []*func()   // AfterFunc's functions not yet run
	stopParent func() bool // the registration with parent (nil: none, or not yet)
}

// deadlineCause is a context cancelled with ErrDeadline: what a
// deadlineCtx past its deadline answers for cancelCtxKey.
var deadlineCause = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrDeadline)
	return ctx
}()

// start makes d a context of parent that ends at dl.
func (d *deadlineCtx) start(parent context.Context, dl time.Time, k *clock) {
	d.parent, d.dl, d.k = parent, dl, k
	d.done = make(chan struct{})
	if pd := parent.Done(); pd != nil {
		select {
		case <-pd:
			d.end(parent.Err(), false)
			return
		default:
		}
		stop := context.AfterFunc(parent, d.parentEnded)
		d.mu.Lock()
		ended := d.err != nil // parent ended meanwhile
		if !ended {
			d.stopParent = stop
		}
		d.mu.Unlock()
		if ended {
			return
		}
	}
	if !time.Now().Before(dl) {
		d.end(context.DeadlineExceeded, true)
		return
	}
	k.set(&d.t, dl, d)
}

func (d *deadlineCtx) Deadline() (time.Time, bool) { return d.dl, true }

func (d *deadlineCtx) Done() <-chan struct{} { return d.done }

func (d *deadlineCtx) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *deadlineCtx) Value(key any) any {
	if key == cancelCtxKey {
		d.mu.Lock()
		expired := d.expired
		d.mu.Unlock()
		if expired {
			return deadlineCause.Value(key)
		}
	}
	return d.parent.Value(key)
}

// AfterFunc is the context package's way to hear of d's end (afterFuncer):
// f runs once d ends, and stop takes it back.
func (d *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	d.mu.Lock()
	if d.err != nil {
		d.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	p := &f
	d.after = append(d.after, p)
	d.mu.Unlock()
	return func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, q := range d.after {
			if q == p {
				d.after = append(d.after[:i], d.after[i+1:]...)
				return true
			}
		}
		return false
	}
}

// fire is the deadline, on the Client's clock.
func (d *deadlineCtx) fire() { d.end(context.DeadlineExceeded, true) }

func (d *deadlineCtx) parentEnded() { d.end(d.parent.Err(), false) }

// stop ends d (Canceled) when the call is over, as WithDeadline's cancel.
func (d *deadlineCtx) stop() { d.end(context.Canceled, false) }

// end ends d with err, once, and runs the AfterFunc functions.
func (d *deadlineCtx) end(err error, expired bool) {
	d.mu.Lock()
	if d.err != nil {
		d.mu.Unlock()
		return
	}
	d.err, d.expired = err, expired
	close(d.done)
	after, stopParent := d.after, d.stopParent
	d.after, d.stopParent = nil, nil
	d.mu.Unlock()
	d.k.stop(&d.t)
	if stopParent != nil {
		stopParent()
	}
	for _, f := range after {
		(*f)()
	}
}
