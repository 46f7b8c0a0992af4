package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitHub lets waiters sleep until a lease's release is published. One
// subscription connection serves every waiter of a Client; a channel is
// subscribed while it has waiters. Waiters of one channel form a FIFO queue
// and a notification wakes the head only, so handoffs go in arrival order
// within the process and not to whoever loops fastest.
type waitHub struct {
	rdb redis.UniversalClient

	mu     sync.Mutex
	ps     *redis.PubSub
	queues map[string]*waitQueue
	closed bool
	done   chan struct{} // closed when the reader goroutine exits
}

type waitQueue struct {
	ready   chan struct{} // closed when the subscription is confirmed
	isReady bool
	q       []*waiter
	// busyUntil is when the current holder's lease ends, as last seen by a
	// waiter; newcomers queue behind until then at most.
	busyUntil time.Time
}

type waiter struct {
	channel string
	wake    chan struct{} // buffered(1): a pending notification
}

func newWaitHub(rdb redis.UniversalClient) *waitHub {
	return &waitHub{rdb: rdb, queues: map[string]*waitQueue{}}
}

var errClosed = errors.New("lease: client closed")

// join queues a waiter on channel and returns once the subscription is
// confirmed (or ctx ends), so that no release published after join returns
// can be missed.
func (h *waitHub) join(ctx context.Context, channel string) (*waiter, error) {
	w := &waiter{channel: channel, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errClosed
	}
	wq := h.queues[channel]
	subscribe := wq == nil
	if subscribe {
		wq = &waitQueue{ready: make(chan struct{})}
		h.queues[channel] = wq
	}
	wq.q = append(wq.q, w)
	var err error
	if subscribe {
		err = h.subscribeLocked(ctx, channel)
	}
	ready := wq.ready
	h.mu.Unlock()
	if err == nil {
		select {
		case <-ready:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		h.leave(w)
		return nil, err
	}
	return w, nil
}

func (h *waitHub) subscribeLocked(ctx context.Context, channel string) error {
	if h.ps == nil {
		h.ps = h.rdb.Subscribe(ctx, channel)
		h.done = make(chan struct{})
		go h.read(h.ps.ChannelWithSubscriptions(), h.done)
		return nil
	}
	return h.ps.Subscribe(ctx, channel)
}

// read dispatches subscription confirmations and release notifications. It
// runs for the life of the Client's subscription connection.
func (h *waitHub) read(ch <-chan any, done chan struct{}) {
	defer close(done)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			if wq := h.queues[m.Channel]; wq != nil && !wq.isReady {
				wq.isReady = true
				close(wq.ready)
			}
			// A re-subscription after a reconnect may have missed a
			// release: wake the head to look again.
			if wq := h.queues[m.Channel]; wq != nil && len(wq.q) > 0 {
				signal(wq.q[0])
			}
			h.mu.Unlock()
		case *redis.Message:
			h.mu.Lock()
			if wq := h.queues[m.Channel]; wq != nil {
				wq.busyUntil = time.Time{}
				if len(wq.q) > 0 {
					signal(wq.q[0])
				}
			}
			h.mu.Unlock()
		}
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// ahead reports whether other waiters are queued on channel, and until when
// the lease was last seen busy. A newcomer that finds a queue waits its turn.
func (h *waitHub) ahead(channel string) (bool, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wq := h.queues[channel]
	if wq == nil || len(wq.q) == 0 {
		return false, time.Time{}
	}
	return true, wq.busyUntil
}

// sawBusy records when the current holder's lease ends.
func (h *waitHub) sawBusy(channel string, until time.Time) {
	h.mu.Lock()
	if wq := h.queues[channel]; wq != nil {
		wq.busyUntil = until
	}
	h.mu.Unlock()
}

// leave removes w. A notification w received but did not use passes to the
// next waiter; the last waiter out unsubscribes.
func (h *waitHub) leave(w *waiter) {
	if w == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	wq := h.queues[w.channel]
	if wq == nil {
		return
	}
	for i, x := range wq.q {
		if x == w {
			wq.q = append(wq.q[:i], wq.q[i+1:]...)
			break
		}
	}
	pending := false
	select {
	case <-w.wake:
		pending = true
	default:
	}
	if len(wq.q) > 0 {
		if pending {
			signal(wq.q[0])
		}
		return
	}
	delete(h.queues, w.channel)
	if h.ps != nil && !h.closed {
		// Under the lock, so that a new join cannot be undone by this
		// unsubscribe; bounded tightly because other waiters wait for the
		// lock. If it fails, the channel merely stays subscribed (its
		// messages find no queue and are dropped).
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = h.ps.Unsubscribe(ctx, w.channel)
		cancel()
	}
}

func (h *waitHub) close() error {
	h.mu.Lock()
	h.closed = true
	ps, done := h.ps, h.done
	h.ps = nil
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
