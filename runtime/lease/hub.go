package lease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitHub lets waiters sleep until a lease's release is published. One
// subscription connection serves every waiter of a Client. Waiters of one
// channel form a FIFO queue and a notification wakes the head only, so
// handoffs go in arrival order within the process, not to whoever loops
// fastest.
//
// No lock is held across a network call, and no caller of Do ever waits for
// one here: a manager goroutine (re)subscribes, a reader goroutine receives.
// Waiters never depend on the subscription alone (see call.sleep): while it
// is down they fall back to re-checks, and when a channel's subscription is
// confirmed its waiters are woken to look again.
type waitHub struct {
	c       *Client
	kick    chan struct{} // wakes the manager
	closing chan struct{} // closed by close: waiters return ErrClosed

	mu        sync.Mutex
	queues    map[string]*waitQueue
	idleSince map[string]time.Time // subscribed channels without waiters
	subbed    map[string]bool      // channels asked of the server (true: confirmed)
	closed    bool
	running   bool // the manager goroutine runs
	down      bool // the subscription is failing (one event per episode)
}

type waitQueue struct {
	q []*waiter
	// busyUntil is when the current holder's lease ends, as last seen by a
	// waiter; newcomers queue behind until then at most.
	busyUntil time.Time
}

type waiter struct {
	channel string
	wake    chan struct{} // buffered(1): a pending notification
}

// pingEvery is how long the reader waits for traffic before it pings the
// subscription connection; a ping unanswered for as long again marks it
// dead and it is replaced.
const pingEvery = 2 * time.Second

// idleUnsubscribe is how long a channel stays subscribed without waiters,
// so that a busy key is not subscribed and unsubscribed for every wait.
const idleUnsubscribe = time.Second

func newWaitHub(c *Client) *waitHub {
	return &waitHub{
		c: c, kick: make(chan struct{}, 1), closing: make(chan struct{}),
		queues: map[string]*waitQueue{}, idleSince: map[string]time.Time{}, subbed: map[string]bool{},
	}
}

// join queues a waiter on channel. It never blocks on the network: it asks
// the manager for a subscription and reports whether the channel's
// subscription is already confirmed (live), in which case every release
// from now on wakes the queue.
func (h *waitHub) join(channel string) (w *waiter, live bool) {
	w = &waiter{channel: channel, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return w, false // sleep sees closing at once
	}
	wq := h.queues[channel]
	if wq == nil {
		wq = &waitQueue{}
		h.queues[channel] = wq
	}
	wq.q = append(wq.q, w)
	delete(h.idleSince, channel)
	confirmed, asked := h.subbed[channel]
	if !asked {
		h.poke()
	}
	return w, confirmed && !h.down
}

// poke wakes the manager (h.mu held or not).
func (h *waitHub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
	if !h.running && !h.closed {
		h.running = true
		go h.manage()
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
// next waiter; the channel is unsubscribed after it has been idle a while.
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
	if _, ok := h.subbed[w.channel]; ok {
		h.idleSince[w.channel] = time.Now()
		h.poke()
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// notify wakes the head of channel's queue (a release was published).
func (h *waitHub) notify(channel string) {
	h.mu.Lock()
	if wq := h.queues[channel]; wq != nil {
		wq.busyUntil = time.Time{}
		if len(wq.q) > 0 {
			signal(wq.q[0])
		}
	}
	h.mu.Unlock()
}

// confirmed marks channel's subscription live and wakes all its waiters to
// look again: a release may have been published before it took effect.
func (h *waitHub) confirmed(channel string) {
	h.mu.Lock()
	if _, ok := h.subbed[channel]; ok {
		h.subbed[channel] = true
	}
	if wq := h.queues[channel]; wq != nil {
		for _, w := range wq.q {
			signal(w)
		}
	}
	h.mu.Unlock()
}

// failed records a subscription failure: every channel must be confirmed
// again, waiters re-check on their own meanwhile, and the first failure of
// an episode is reported.
func (h *waitHub) failed(err error) {
	h.mu.Lock()
	for ch := range h.subbed {
		h.subbed[ch] = false
	}
	first := !h.down && !h.closed
	h.down = true
	h.mu.Unlock()
	h.c.reloadTopology()
	if first {
		h.c.obs.Observe(Event{Kind: EventSubscriptionFailed, Ctx: context.Background(),
			Err: fmt.Errorf("lease: release notifications interrupted (waiters re-check every %v until they resume): %w", h.c.recheck, err)})
	}
}

func (h *waitHub) healthy() {
	h.mu.Lock()
	h.down = false
	h.mu.Unlock()
}

// close wakes every waiter (they return ErrClosed) and stops the
// subscription. It does not wait for the hub's goroutines, so that it can
// be called from anywhere, an Observer included; they exit promptly.
func (h *waitHub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.closing)
	}
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// manage owns the subscription: it subscribes channels that gained
// waiters, unsubscribes idle ones, and replaces a connection the reader
// found dead. It runs from the first wait until the Client closes.
func (h *waitHub) manage() {
	var (
		ps      *redis.PubSub
		dead    chan struct{} // closed by the reader when ps is dead
		backoff time.Duration
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopPS := func() {
		if ps != nil {
			_ = ps.Close() // the reader sees the error and exits
			ps, dead = nil, nil
		}
	}
	for {
		select {
		case <-h.kick:
		case <-timer.C:
		case <-dead:
			stopPS()
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			stopPS()
			return
		}
		var sub, unsub []string
		for ch := range h.queues {
			if _, ok := h.subbed[ch]; !ok || ps == nil {
				sub = append(sub, ch)
			}
		}
		next := time.Hour
		now := time.Now()
		for ch, since := range h.idleSince {
			if d := since.Add(idleUnsubscribe).Sub(now); d > 0 {
				next = min(next, d)
				continue
			}
			delete(h.idleSince, ch)
			delete(h.subbed, ch)
			unsub = append(unsub, ch)
		}
		if ps == nil {
			// A new connection subscribes every channel that has waiters;
			// idle ones are forgotten.
			clear(h.subbed)
			clear(h.idleSince)
			unsub = nil
		}
		for _, ch := range sub {
			h.subbed[ch] = false
		}
		h.mu.Unlock()

		var err error
		if len(sub) > 0 || len(unsub) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if ps == nil {
				ps = h.c.rdb.Subscribe(ctx)
				dead = make(chan struct{})
				go h.read(ps, dead)
			}
			if len(sub) > 0 {
				err = ps.Subscribe(ctx, sub...)
			}
			if err == nil && len(unsub) > 0 {
				// Best effort: a channel left subscribed only brings
				// messages that find no queue.
				_ = ps.Unsubscribe(ctx, unsub...)
			}
			cancel()
		}
		if err != nil {
			h.mu.Lock()
			for _, ch := range sub {
				delete(h.subbed, ch) // ask again
			}
			h.mu.Unlock()
			h.failed(err)
			stopPS()
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
			next = min(next, backoff)
		} else if len(sub) > 0 {
			backoff = 0
		}
		timer.Reset(next)
	}
}

// read receives on ps until it is closed or found dead: confirmations and
// release notifications wake waiters; a silent connection is pinged, and
// one that stays silent is reported dead to the manager.
func (h *waitHub) read(ps *redis.PubSub, dead chan struct{}) {
	defer close(dead)
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), pingEvery)
		if err != nil {
			select {
			case <-h.closing:
				return
			default:
			}
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			var rerr redis.Error
			if errors.As(err, &rerr) {
				// The server answered (a PING refused by an ACL, say): the
				// connection is alive.
				pinged = false
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if pinged {
					h.failed(fmt.Errorf("subscription connection silent for %v: %w", 2*pingEvery, err))
					return
				}
				pinged = true
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				perr := ps.Ping(ctx)
				cancel()
				if perr != nil {
					h.failed(perr)
					return
				}
				continue
			}
			// A broken connection: go-redis dials again (and
			// re-subscribes) on the next receive.
			h.failed(err)
			if !sleepCtx(ctxOf(h.closing), 50*time.Millisecond) {
				return
			}
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.healthy()
				h.confirmed(m.Channel)
			}
		case *redis.Message:
			h.notify(m.Channel)
		case *redis.Pong:
			h.healthy()
		}
	}
}

// ctxOf is a context cancelled when ch closes.
func ctxOf(ch <-chan struct{}) context.Context { return closedCtx{ch} }

type closedCtx struct{ ch <-chan struct{} }

func (closedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c closedCtx) Done() <-chan struct{}     { return c.ch }
func (c closedCtx) Err() error {
	select {
	case <-c.ch:
		return context.Canceled
	default:
		return nil
	}
}
func (closedCtx) Value(any) any { return nil }
