package lease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitHub lets waiters sleep until a lease is released to them. One
// subscription connection serves every waiter of a Client. A release hands
// the lease to the first waiter in the key's queue (across processes) and
// tells that waiter's Client on its inbox, naming the waiter, so a
// notification wakes exactly the waiter it names (and no other process);
// "h" (a hold-min release: the lease ends sooner) wakes every waiter of
// the key to look at the new expiry.
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
	probe   string        // this Client's probe channel (see read)

	mu      sync.Mutex
	chans   map[string]*chanState
	closed  bool
	running bool // the manager goroutine runs
	down    bool // the subscription is failing (one event per episode)

	// Waiters hear releases on the Client's inbox, its probe channel: a
	// release that hands a waiter the key, or ends a hold, tells each
	// waiting Client on its inbox (see release.lua), so that a release
	// wakes the Clients it concerns, not every Client subscribed to the
	// key. The key's own channel is subscribed only for kept leases and
	// listeners, or for waiters when an ACL refuses the inbox.
	inboxAsked bool      // a subscription connection with the inbox was asked for
	inboxLive  time.Time // when the inbox's subscription was confirmed (zero: not live)
	inboxOff   bool      // an ACL refused the inbox: waiters listen on key channels

	// Identities are unique, so these are kept for the Client, not per
	// key: a key's state comes and goes with its waiters.
	pending map[string]string // waiters about to join (see expect): the last message naming each, or ""

	departed []departedWaiter // waiters that left without the lease (see leave)
}

// chanState is one release channel: its subscription and its waiters.
type chanState struct {
	asked     bool      // SUBSCRIBE sent on the current connection
	live      time.Time // when the subscription was confirmed (zero: not live)
	checked   time.Time // when the last question that found a kept lease's key still its own was sent
	suspect   time.Time // when a notice last said the key may have changed hands (checks sent before it do not count)
	waiters   []*waiter
	keepers   int       // kept leases of this Client on the channel's key (they hear "w")
	idleSince time.Time // when the last waiter left (zero: has waiters)
}

// departedWaiter is a waiter that stopped waiting without the lease. A
// release may still hand it the key while its queue entry lives (its
// giving up, a release of its place, did not reach Redis): the handover's
// message then has nobody to enter, and the key is released on its behalf.
type departedWaiter struct {
	id    string
	k     *keys
	until time.Time // its queue entry has expired by then
}

// needsKey reports whether cs's key channel must be subscribed (h.mu held).
func (h *waitHub) needsKey(cs *chanState) bool {
	if cs.keepers > 0 || h.inboxOff && len(cs.waiters) > 0 {
		return true
	}
	for _, w := range cs.waiters {
		if w.all {
			return true
		}
	}
	return false
}

// liveSince is when the waiters of cs could start hearing releases (h.mu
// held): the inbox's confirmation, or the key channel's for listeners and
// when the inbox is refused.
func (h *waitHub) liveSince(cs *chanState, w *waiter) time.Time {
	if w.all || h.inboxOff {
		return cs.live
	}
	return h.inboxLive
}

// departedMax bounds the departed waiters remembered.
const departedMax = 1024

// expect registers identity id as a waiter about to join: a call that may
// wait registers before its acquire is sent, since a release can hand it
// the lease between the acquire's busy answer and its join. A message
// naming it meanwhile is kept for the join (add), however many others
// come; see forget for a call that never joins.
func (h *waitHub) expect(id string) {
	h.mu.Lock()
	if h.pending == nil {
		h.pending = map[string]string{}
	}
	if _, ok := h.pending[id]; !ok {
		h.pending[id] = ""
	}
	h.mu.Unlock()
}

// forget ends expect for a call that returns, joined or not. A call that
// did not get the lease and was handed it meanwhile (a message came) has
// the grant released on its behalf; one that may still be handed it is
// remembered as departed (see leave).
func (h *waitHub) forget(id string, k *keys, granted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	note, ok := h.pending[id]
	if !ok {
		return // joined: add took it over
	}
	delete(h.pending, id)
	if !granted && !h.closed {
		h.left(id, k, note)
	}
}

// left handles a waiter that left without the lease, h.mu held: a
// handover that already named it (note) is released on its behalf; one
// that may still come finds it among the departed.
func (h *waitHub) left(id string, k *keys, note string) {
	if note != "" {
		go h.c.releaseOrphan(k, id)
		return
	}
	h.depart(id, k)
}

// depart remembers a waiter that left without the lease until its queue
// entry has expired: up to 2 re-checks + 100ms after its last acquire
// (see acquireArgs), h.mu held.
func (h *waitHub) depart(id string, k *keys) {
	now := time.Now()
	h.departed = slices.DeleteFunc(h.departed, func(d departedWaiter) bool { return now.After(d.until) })
	if len(h.departed) >= departedMax {
		h.departed = h.departed[1:]
	}
	h.departed = append(h.departed, departedWaiter{id, k, now.Add(2*h.c.recheck + time.Second)})
}

type waiter struct {
	channel string
	id      string
	wake    chan struct{} // buffered(1): a pending notification
	all     bool          // a listener (WatchLeader): woken by every message on the channel
	note    string        // the last message naming it (h.mu; see notice)
	k       *keys         // its call's keys, to release a grant it left behind (see leave)
	member  string        // its call's queue entry (see close)
	state   atomic.Int32  // waiterActive, waiterAsleep or waiterAbandoned (see call.sleep)
}

// A waiter's state: Close gives up the place of a waiter that is asleep
// (no request of its call in flight) on its behalf, and the waiter, when
// it wakes, finds it was abandoned and returns ErrClosed without sending
// anything more.
const (
	waiterActive int32 = iota
	waiterAsleep
	waiterAbandoned
)

// inboxMessage splits a message on a Client's inbox: the length of the
// key's channel, ":", the channel, then the message about the key (see
// release.lua); a channel may hold any byte.
func inboxMessage(payload string) (channel, msg string, ok bool) {
	n, rest, ok := strings.Cut(payload, ":")
	if !ok {
		return "", "", false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(rest) {
		return "", "", false
	}
	return rest[:l], rest[l:], true
}

// noteID is the identity a handover message names: the message is the
// identity, or "identity|seq|token|px" (see release.lua).
func noteID(payload string) string {
	id, _, _ := strings.Cut(payload, "|")
	return id
}

// probeEvery is how often the reader checks the subscription end to end:
// it publishes on its probe channel through the Client's command path and
// expects the message back on the subscription. A probe not back within
// probeEvery marks the subscription dead and it is replaced; on a
// standalone or Sentinel deployment, a probe that reached no subscriber
// does so at once (the subscription sits on another node than the one
// commands go to, such as a demoted primary after a failover).
const probeEvery = time.Second

// idleUnsubscribe is how long a channel stays subscribed without waiters,
// so that a busy key is not subscribed and unsubscribed for every wait.
const idleUnsubscribe = time.Second

func newWaitHub(c *Client) *waitHub {
	return &waitHub{c: c, kick: make(chan struct{}, 1), closing: make(chan struct{}), chans: map[string]*chanState{},
		// A channel in the key channels' namespace (an ACL that grants
		// "prefix{*}:c" grants it), which no user key can produce: an
		// escaped key never has '%' before a non-hex letter.
		probe: c.prefix + "{%probe-" + newID() + "}:c"}
}

// join registers a waiter with identity id on channel. It never blocks on
// the network: it asks the manager for a subscription if needed. sent is
// when the waiter's last acquire was sent; if a notification may have been
// missed since (the subscription was not live then, or a message named
// this waiter before it registered), the waiter is woken at once to look
// again, or when the subscription is confirmed.
func (h *waitHub) join(k *keys, id, member string, sent time.Time) *waiter {
	return h.add(&waiter{channel: k.channel, id: id, k: k, member: member, wake: make(chan struct{}, 1)}, sent)
}

// listen registers a listener on channel: a waiter woken by every release
// notification of the key, whoever it names, and when the subscription is
// confirmed (WatchLeader re-reads the key then). Leave with leave.
func (h *waitHub) listen(channel string, sent time.Time) *waiter {
	return h.add(&waiter{channel: channel, wake: make(chan struct{}, 1), all: true}, sent)
}

func (h *waitHub) add(w *waiter, sent time.Time) *waiter {
	channel, id := w.channel, w.id
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return w // sleep sees closing at once
	}
	cs := h.chans[channel]
	if cs == nil {
		cs = &chanState{}
		h.chans[channel] = cs
	}
	cs.waiters = append(cs.waiters, w)
	cs.idleSince = time.Time{}
	if note, ok := h.pending[id]; ok {
		delete(h.pending, id)
		if note != "" {
			w.note = note
			signal(w) // handed over before the join
		}
	}
	if !cs.asked && h.needsKey(cs) || !h.inboxAsked {
		h.poke()
	}
	switch live := h.liveSince(cs, w); {
	case live.IsZero() || h.down:
		// Not live: the confirmation wakes this waiter to look again.
	case !live.Before(sent):
		signal(w) // live only since the attempt: a release may have been missed
	}
	return w
}

// keeper registers (+1) or unregisters (-1) a kept lease on channel: the
// channel stays subscribed while it has keepers, so that a waiter's "w"
// reaches the Client.
func (h *waitHub) keeper(channel string, delta int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	cs := h.chans[channel]
	if cs == nil {
		if delta < 0 {
			return
		}
		cs = &chanState{}
		h.chans[channel] = cs
	}
	cs.keepers += delta
	if cs.keepers > 0 {
		cs.idleSince = time.Time{}
		if !cs.asked {
			h.poke()
		}
	} else if len(cs.waiters) == 0 {
		cs.idleSince = time.Now()
		h.poke()
	}
}

// trusted reports whether a kept lease on channel's key may be reused
// without asking Redis: the subscription is live and the key was checked
// by a question sent after it was confirmed (what happened before the
// confirmation, a restart or a release from outside, was not heard).
func (h *waitHub) trusted(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[channel]
	return cs != nil && !cs.live.IsZero() && !h.down && !cs.checked.Before(cs.live)
}

// suspect marks channel's key as needing a check before a kept lease on it
// is reused again (a notice that may say it was released or handed over).
func (h *waitHub) suspect(channel string) {
	h.mu.Lock()
	if cs := h.chans[channel]; cs != nil {
		cs.suspect, cs.checked = time.Now(), time.Time{}
	}
	h.mu.Unlock()
}

// checked records that channel's key was found holding a kept lease by a
// question sent at sent. It reports false when a notice came after sent
// (the answer proves nothing about what the notice announced).
func (h *waitHub) checked(channel string, sent time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[channel]
	if cs == nil {
		return true // not subscribed: no notice to be newer than the answer
	}
	if !sent.After(cs.suspect) {
		return false
	}
	if sent.After(cs.checked) {
		cs.checked = sent
	}
	return true
}

// poke wakes the manager (h.mu held).
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

// leave removes w; granted tells whether its call got the lease. The
// channel is unsubscribed after it has been idle a while. A waiter that
// leaves without the lease is remembered a moment: a handover to it that
// comes later (its giving up did not reach Redis) is released on its
// behalf, as is one that came and was not used.
func (h *waitHub) leave(w *waiter, granted bool) {
	if w == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[w.channel]
	if cs == nil {
		return
	}
	if i := slices.Index(cs.waiters, w); i >= 0 {
		cs.waiters = slices.Delete(cs.waiters, i, i+1)
	}
	if !granted && w.k != nil && !h.closed {
		h.left(w.id, w.k, w.note)
	}
	if len(cs.waiters) == 0 && cs.keepers == 0 {
		if !cs.asked {
			delete(h.chans, w.channel) // nothing to unsubscribe or remember
			return
		}
		cs.idleSince = time.Now()
		h.poke()
	}
}

// notice returns (and forgets) the last message that named w.
func (h *waitHub) notice(w *waiter) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := w.note
	w.note = ""
	return n
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// notify handles a message on channel: a waiter's identity wakes that
// waiter (kept for its join if it has not registered yet, see expect;
// released on its behalf if it has left); anything else wakes every waiter
// of the channel, except "g" (a Lead term's grant), which wakes its
// listeners. It reports whether it woke a waiter.
func (h *waitHub) notify(channel, payload string) (woke bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[channel]
	if payload == "g" {
		// A Lead term was granted (see acquire.lua): news for listeners
		// only, the key is not free for waiters.
		if cs != nil {
			for _, w := range cs.waiters {
				if w.all {
					signal(w)
					woke = true
				}
			}
		}
		return woke
	}
	if len(payload) <= 1 {
		if cs != nil {
			for _, w := range cs.waiters {
				signal(w)
			}
		}
		return cs != nil && len(cs.waiters) > 0
	}
	id := noteID(payload)
	if cs != nil {
		named := false
		for _, w := range cs.waiters {
			switch {
			case w.all:
				signal(w) // a listener hears every handover
			case !named && w.id == id:
				w.note = payload
				signal(w)
				named = true
			}
		}
		if named {
			return true
		}
	}
	if _, ok := h.pending[id]; ok {
		h.pending[id] = payload // for its join
		return false
	}
	now := time.Now()
	for i, d := range h.departed {
		if d.id == id {
			h.departed = slices.Delete(h.departed, i, i+1)
			if !h.closed && now.Before(d.until) {
				go h.c.releaseOrphan(d.k, d.id)
			}
			return false
		}
	}
	// Anything else names another process's waiter (a key channel carries
	// every handover), or a call of this Client that got the lease.
	return false
}

// inboxConfirmed marks the inbox live and wakes every waiter that listens
// on it to look again: a release may have been published before.
func (h *waitHub) inboxConfirmed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inboxLive = time.Now()
	for _, cs := range h.chans {
		for _, w := range cs.waiters {
			if !w.all {
				signal(w)
			}
		}
	}
}

// inboxRefused switches waiters to the key channels: an ACL refuses the
// inbox. Their confirmations wake the waiters to look again.
func (h *waitHub) inboxRefused() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.inboxOff {
		h.inboxOff = true
		h.poke()
	}
}

// confirmed marks channel's subscription live and wakes all its waiters to
// look again: a release may have been published before it took effect.
func (h *waitHub) confirmed(channel string) {
	keepers := false
	h.mu.Lock()
	if cs := h.chans[channel]; cs != nil {
		cs.live = time.Now()
		for _, w := range cs.waiters {
			signal(w)
		}
		keepers = cs.keepers > 0
	}
	h.mu.Unlock()
	if keepers {
		// A waiter's "w" may have been published before this: look at the
		// queue once (not on the reader goroutine: it is I/O).
		go h.c.checkKept(channel)
	}
}

// failed records a subscription failure: every channel must be confirmed
// again, waiters re-check on their own meanwhile, and the first failure of
// an episode is reported.
func (h *waitHub) failed(err error) {
	h.mu.Lock()
	for _, cs := range h.chans {
		cs.live = time.Time{}
	}
	h.inboxLive = time.Time{}
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
// be called from anywhere, an Observer included; they exit promptly. It
// returns the waiters it found asleep, now abandoned: their places in the
// queues are for the caller to give up (Client.Close), since their own
// calls may find the go-redis client closed by then.
func (h *waitHub) close() (abandoned []*waiter) {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		// Abandon the sleeping waiters before closing h.closing: a waiter
		// woken by it first would take itself back (asleep to active) and
		// give up its place after Close returned, when the go-redis
		// client may be closed.
		for _, cs := range h.chans {
			for _, w := range cs.waiters {
				if w.k != nil && w.member != "" && w.state.CompareAndSwap(waiterAsleep, waiterAbandoned) {
					abandoned = append(abandoned, w)
				}
			}
		}
		close(h.closing)
	}
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
	return abandoned
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
		h.mu.Lock()
		h.inboxAsked, h.inboxLive = false, time.Time{}
		h.mu.Unlock()
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
		next := time.Hour
		now := time.Now()
		want := false // a connection is needed (the inbox, for waiters)
		for ch, cs := range h.chans {
			switch {
			case ps == nil:
				// A new connection subscribes every key channel that
				// needs it (see needsKey); idle ones are forgotten.
				if len(cs.waiters) == 0 && cs.keepers == 0 {
					delete(h.chans, ch)
					continue
				}
				want = true
				cs.asked, cs.live = false, time.Time{}
				if h.needsKey(cs) {
					cs.asked = true
					sub = append(sub, ch)
				}
			case len(cs.waiters) > 0 || cs.keepers > 0:
				if !cs.asked && h.needsKey(cs) {
					cs.asked = true
					sub = append(sub, ch)
				}
			default:
				if d := cs.idleSince.Add(idleUnsubscribe).Sub(now); d > 0 {
					next = min(next, d)
					continue
				}
				delete(h.chans, ch)
				if cs.asked {
					unsub = append(unsub, ch)
				}
			}
		}
		fresh := ps == nil && (want || len(sub) > 0)
		if fresh {
			h.inboxAsked = true
		}
		h.mu.Unlock()

		var err error
		if fresh || len(sub) > 0 || len(unsub) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if fresh {
				ps = h.c.rdb.Subscribe(ctx)
				dead = make(chan struct{})
				go h.read(ps, dead)
			}
			if len(sub) > 0 {
				err = ps.Subscribe(ctx, sub...)
			}
			if err == nil && fresh {
				// On its own, after the key channels: an ACL that refuses
				// it refuses nothing else (see read).
				err = ps.Subscribe(ctx, h.probe)
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
				if cs := h.chans[ch]; cs != nil {
					cs.asked = false // ask again
				}
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

// readSlice bounds each receive, and with it anything go-redis does on the
// way (a reconnect: dial, HELLO, re-subscribe), since go-redis cannot
// interrupt a read: the reader notices Close within about this long. The
// price: a server whose replies take more than about a third of it each
// cannot be subscribed to again after the connection drops (waiters then
// re-check on their own; kept leases are verified on reuse).
const readSlice = 400 * time.Millisecond

// read receives on ps until it is closed or found dead: confirmations and
// release notifications wake waiters, and every probeEvery a probe checks
// that the subscription still hears what commands publish (see probeEvery).
// When an ACL refuses the probe channel, a PING answered in time is the
// check instead (it cannot see a subscription left on a demoted primary).
func (h *waitHub) read(ps *redis.PubSub, dead chan struct{}) {
	defer close(dead)
	closing := ctxOf(h.closing)
	_, cluster := h.c.rdb.(*redis.ClusterClient)
	var (
		started      = time.Now()
		probeLive    bool      // the probe channel's subscription is confirmed
		probeRefused bool      // an ACL refused it: PING instead
		probed       time.Time // when the outstanding probe or PING was sent (zero: none)
		nextProbe    = started.Add(probeEvery)
	)
	for {
		ctx, cancel := context.WithTimeout(closing, readSlice)
		msg, err := ps.ReceiveTimeout(ctx, readSlice)
		cancel()
		select {
		case <-h.closing:
			return
		default:
		}
		if err != nil {
			var rerr redis.Error
			var ne net.Error
			switch {
			case errors.Is(err, redis.ErrClosed):
				return
			case errors.As(err, &rerr):
				// The server answered: the connection is alive.
				probed = time.Time{}
				m := strings.ToLower(err.Error())
				if !strings.Contains(m, "subscribe") && !strings.Contains(m, "channel") {
					break // a refused PING, say
				}
				if !probeLive && h.keyChannelsLive() {
					// The key channels are confirmed and the probe's own
					// SUBSCRIBE came after them: the probe was refused. Drop
					// it from the set go-redis re-subscribes after a
					// reconnect, so that it cannot refuse the others then.
					probeRefused = true
					h.inboxRefused()
					uctx, ucancel := context.WithTimeout(closing, readSlice)
					_ = ps.Unsubscribe(uctx, h.probe)
					ucancel()
					break
				}
				// A key channel refused (an ACL without it): no
				// notifications for it; waiters re-check.
				h.failed(err)
			case errors.As(err, &ne) && ne.Timeout():
			default:
				// A broken connection: go-redis dials again (and
				// re-subscribes) on the next receive.
				h.failed(err)
				if !sleepCtx(closing, 50*time.Millisecond) {
					return
				}
			}
		} else {
			switch m := msg.(type) {
			case *redis.Subscription:
				switch {
				case m.Kind != "subscribe":
				case m.Channel == h.probe:
					probeLive = true
					h.inboxConfirmed()
				default:
					h.healthy()
					h.confirmed(m.Channel)
				}
			case *redis.Pong:
				probed = time.Time{}
				h.healthy()
			case *redis.Message:
				switch {
				case m.Channel == h.probe:
					probed = time.Time{}
					h.healthy()
					// Besides the probe ("p"), what a release tells this
					// Client's waiters (see release.lua).
					if ch, note, ok := inboxMessage(m.Payload); ok && h.notify(ch, note) {
						// Let the woken waiter run on this thread now,
						// instead of after this loop's next receive has
						// parked it (or on a thread woken for it).
						runtime.Gosched()
					}
				case m.Payload == "w":
					h.c.wanted(m.Channel) // a waiter elsewhere: a kept lease is released
				default:
					if len(m.Payload) > 1 || m.Payload == "x" {
						h.c.keptNotice(m.Channel, m.Payload) // handed over or released from outside
					}
					if h.notify(m.Channel, m.Payload) {
						runtime.Gosched()
					}
				}
			}
		}
		now := time.Now()
		switch {
		case !probed.IsZero() && now.Sub(probed) >= probeEvery:
			h.failed(fmt.Errorf("lease: the subscription did not answer its check within %v", probeEvery))
			return
		case !probeLive && !probeRefused && now.Sub(started) >= 3*probeEvery:
			h.failed(fmt.Errorf("lease: the subscription was not confirmed within %v", 3*probeEvery))
			return
		case !probed.IsZero() || now.Before(nextProbe) || !probeLive && !probeRefused:
			continue
		}
		nextProbe = now.Add(probeEvery)
		pctx, pcancel := context.WithTimeout(closing, readSlice)
		if probeRefused {
			if err := ps.Ping(pctx); err == nil {
				probed = now
			}
			pcancel()
			continue
		}
		n, perr := h.c.rdb.Publish(pctx, h.probe, "p").Result()
		pcancel()
		switch {
		case perr != nil:
			// The command path fails too: a server problem, not the
			// subscription's; waiters see it in their own calls.
		case n == 0 && !cluster:
			h.failed(errors.New("lease: the subscription is not on the node commands go to (a failover?)"))
			return
		default:
			probed = now
		}
	}
}

// keyChannelsLive reports whether every key channel asked of the current
// subscription is confirmed.
func (h *waitHub) keyChannelsLive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cs := range h.chans {
		if cs.asked && cs.live.IsZero() {
			return false
		}
	}
	return true
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
