package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ChangeKind is what Watch saw happen to a lease.
type ChangeKind int

const (
	// ChangeHeld: the lease was held when Watch started.
	ChangeHeld ChangeKind = iota + 1
	// ChangeGranted: the lease was granted to a new holder (Change.Info).
	ChangeGranted
	// ChangeHoldStarted: the holder returned and released the lease with a
	// hold-min; it ends when its TTL runs out.
	ChangeHoldStarted
	// ChangeEnded: the holder's lease ended (Change.Info is the last state seen;
	// Change.How says how, when known).
	ChangeEnded
)

func (k ChangeKind) String() string {
	switch k {
	case ChangeHeld:
		return "held"
	case ChangeGranted:
		return "granted"
	case ChangeHoldStarted:
		return "hold"
	case ChangeEnded:
		return "ended"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// Change is one change of a lease that Watch saw.
type Change struct {
	Kind ChangeKind
	At   time.Time
	Info Info // after the change; for ChangeEnded, the last state seen
	// How a lease ended (ChangeEnded), as far as the runtime can tell: "released" (by
	// its holder), "force-released" (ForceRelease), "handed over" (its
	// holder released it to the first waiter), "hold ended"
	// (ForceRelease during a hold-min), "hold ran out", "expired" (its TTL
	// ran out, or its key was deleted by hand), or "" when it ended unseen
	// (released, or expired, between two looks more than a second apart).
	How string
}

// Watch reports changes of the leases whose keys match pattern (as List)
// to fn, from one goroutine, until ctx ends; it then returns nil. It first
// reports every lease held (ChangeHeld), then grants, hold-min releases and
// endings as it sees them.
//
// Two sources: the keys' release channels (one PSUBSCRIBE on their
// pattern: a release handing the lease to a waiter, a hold-min release, a
// forced release), which make Watch look at that key at once; and a
// listing every interval, which finds grants and the releases nobody was
// notified of (a release with no waiter publishes nothing). A lease granted
// and released within one interval may go unseen. Keyspace notifications
// are not used: servers have them off by default, they cost every write,
// and on a Cluster each node sends only its own.
//
// When the Client is closed, Watch returns an error wrapping ErrClosed,
// also while a read waits for a server that stopped answering: each read
// is bounded by every (at least the release timeout), and one not
// answered in time ends the watch with its error, as any failed read does.
// The subscription, at the start, is a new connection's setup and its
// confirmation, up to four round trips (dial, HELLO, CLIENT SETINFO,
// PSUBSCRIBE): it is bounded by four times that.
func (c *Client) Watch(ctx context.Context, pattern string, every time.Duration, fn func(Change)) error {
	if every <= 0 {
		return fmt.Errorf("lease: Watch: interval %v, need > 0", every)
	}
	// Close ends the watch as a cancelled ctx would, with ErrClosed.
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ctxOf(c.hub.closing), cancel)()
	ended := func() error { // the watch's ctx is done: why
		if parent.Err() == nil {
			return fmt.Errorf("%w: Watch of %q", ErrClosed, pattern)
		}
		return nil
	}
	// A read that failed because the watch ended: its ctx is done, or the
	// Client is closing (the cancel above runs on a goroutine of its own,
	// and a read cut by its own bound may fail first:
	// TestAdversary29b_CloseLeavesNothingRunning, seen under load).
	stopped := func() bool { return ctx.Err() != nil || c.closed.Load() }
	if c.closed.Load() {
		return ended()
	}
	// An ACL allows PSUBSCRIBE only of a channel pattern it names
	// literally: with the precise pattern refused, all lease channels
	// (prefix{*}:c) will do, keeping messages of the leases watched.
	precise, all := c.notePattern(pattern), c.notePattern("*")
	w := &changeWatch{c: c, fn: fn, every: every, seen: map[string]seenLease{}, notes: map[string]string{}}
	// The subscription is bounded as the reads are, for each of its
	// round trips on the new connection (one bound for all of them failed
	// a Watch on a server slow but in time: TestAdversary76_WatchSlowServer):
	// a Watch that starts while its server is silent ends with the
	// error, or at its ctx's end or Close, within that
	// (TestAdversary75c_WatchStartedOnSilentServer).
	sub := func(p string) (*redis.PubSub, error) {
		d := w.readBound()
		if d < math.MaxInt64/subscribeRoundTrips { // an interval of centuries: unbounded
			d *= subscribeRoundTrips
		}
		sctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return psubscribe(sctx, c.rdb, p)
	}
	ps, err := sub(precise)
	filter := false
	if err != nil && precise != all && redis.HasErrorPrefix(err, "NOPERM") {
		ps, err = sub(all)
		filter = true
	}
	if err != nil {
		if stopped() {
			return ended()
		}
		if redis.HasErrorPrefix(err, "NOPERM") {
			return fmt.Errorf("lease: watch: PSUBSCRIBE %s: %w (an ACL user needs the channel pattern &%s)", all, err, all)
		}
		return fmt.Errorf("lease: watch: PSUBSCRIBE %s: %w", all, err)
	}
	msgs := ps.Channel()
	defer func() {
		ps.Close()
		// go-redis's reader goroutine may be handing over a message that
		// nobody reads any more (many releases while the watch ended): it
		// would wait up to its channel's send timeout, a minute. Drained,
		// it finds the subscription closed and ends
		// (TestAdversary76_WatchShortEveryUnderLoad).
		for range msgs {
		}
	}()
	if err := w.scan(ctx, pattern, true); err != nil {
		if stopped() {
			return ended()
		}
		return err
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ended()
		case <-t.C:
			if err := w.scan(ctx, pattern, false); err != nil {
				if stopped() {
					return ended()
				}
				return err
			}
		case m, ok := <-msgs:
			if !ok {
				return errors.New("lease: watch: the subscription closed")
			}
			key, ok := c.userKey(m.Channel, ":c")
			if _, seen := w.seen[key]; !ok || !userMatch(pattern, key) || filter && !seen {
				continue // not watched; a new lease is found by the listing
			}
			w.notes[key] = m.Payload
			read := time.Now()
			rctx, cancel := w.readCtx(ctx)
			info, err := c.Inspect(rctx, key)
			cancel()
			if err != nil {
				if stopped() {
					return ended()
				}
				return err
			}
			w.update(ctx, info, read)
		}
	}
}

// readCtx bounds a read of the watch (a listing page, an Inspect, a
// tombstone's GET) by its interval, at least the release timeout.
// go-redis interrupts a read only at a deadline, not when its context is
// cancelled: without one, Close (which cancels the watch's context) would
// not end a Watch waiting for a server that stopped answering until
// go-redis's ReadTimeout, or ever with ReadTimeout -1. A read not answered
// in time ends the watch with its error, as any failed read does.
func (w *changeWatch) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.readBound())
}

// readBound is the bound of each read: the interval, at least the release
// timeout.
func (w *changeWatch) readBound() time.Duration { return max(w.every, w.c.releaseTimeout) }

// subscribeRoundTrips is how many round trips Watch's subscription makes
// on its new connection: dial, HELLO, CLIENT SETINFO, PSUBSCRIBE.
const subscribeRoundTrips = 4

// psubscribe subscribes to pattern and waits for the confirmation.
func psubscribe(ctx context.Context, rdb redis.UniversalClient, pattern string) (*redis.PubSub, error) {
	ps := rdb.PSubscribe(ctx, pattern)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, err
	}
	return ps, nil
}

// notePattern is the PSUBSCRIBE pattern of the release channels of the
// keys pattern matches.
func (c *Client) notePattern(pattern string) string {
	p := c.lockPattern(pattern)
	return strings.TrimSuffix(p, ":l") + ":c"
}

type seenLease struct {
	info Info
	at   time.Time // when the read of info was sent (no later)
}

type changeWatch struct {
	c     *Client
	fn    func(Change)
	every time.Duration        // the listing interval
	seen  map[string]seenLease // held leases, by key
	notes map[string]string    // the last notification per key, until used
}

// scan lists the leases and reports what changed since the last look; a
// key no longer listed is inspected on its own (SCAN lists every key
// present for the whole scan, so a missing one was free at some point).
func (w *changeWatch) scan(ctx context.Context, pattern string, first bool) error {
	listed := map[string]bool{}
	// Keys SCAN returned twice in the first listing (it may, when the
	// server resizes its table meanwhile): what changed since they were
	// reported is reported once every held lease has been
	// (TestAdversary61_WatchFirstListingRepeatedKey).
	type readInfo struct {
		info Info
		read time.Time
	}
	var again []readInfo
	for cursor := ""; ; {
		read := time.Now() // the page's leases were read after this
		rctx, cancel := w.readCtx(ctx)
		page, next, err := w.c.List(rctx, pattern, cursor)
		cancel()
		if err != nil {
			return err
		}
		for _, info := range page {
			listed[info.Key] = true
			if first {
				if _, seen := w.seen[info.Key]; seen {
					// Reported held once (TestAdversary61_WatchFirstListingRepeatedKey).
					again = append(again, readInfo{info, read})
					continue
				}
				w.seen[info.Key] = seenLease{info, read}
				w.fn(Change{Kind: ChangeHeld, At: time.Now(), Info: info})
				continue
			}
			w.update(ctx, info, read)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	for _, r := range again {
		w.update(ctx, r.info, r.read)
	}
	for key := range w.seen {
		if listed[key] {
			continue
		}
		read := time.Now()
		rctx, cancel := w.readCtx(ctx)
		info, err := w.c.Inspect(rctx, key)
		cancel()
		if err != nil {
			return err
		}
		w.update(ctx, info, read)
	}
	return nil
}

// update reports the change from what was last seen of info.Key to info,
// read at read or later.
func (w *changeWatch) update(ctx context.Context, info Info, read time.Time) {
	now := time.Now()
	old, had := w.seen[info.Key]
	note := w.notes[info.Key]
	delete(w.notes, info.Key)
	if had && old.info.Holder != info.Holder {
		how := w.how(ctx, old, info, note)
		w.fn(Change{Kind: ChangeEnded, At: now, Info: old.info, How: how})
		had = false
	}
	switch {
	case info.Free():
		delete(w.seen, info.Key)
		return
	case !had:
		w.fn(Change{Kind: ChangeGranted, At: now, Info: info})
	case info.Hold && !old.info.Hold:
		w.fn(Change{Kind: ChangeHoldStarted, At: now, Info: info})
	}
	w.seen[info.Key] = seenLease{info, read}
}

// how tells how old's lease ended: from the identity's release tombstone
// while it lasts, the notification, or the TTL last seen.
func (w *changeWatch) how(ctx context.Context, old seenLease, now Info, note string) string {
	k := redisKeys(w.c.prefix, old.info.Key)
	tctx, cancel := w.readCtx(ctx)
	tomb, err := w.c.rdb.Get(tctx, k.tomb+old.info.Holder).Result()
	cancel()
	// The lease ended after old was read (no earlier than old.at), and
	// the tombstone was looked for before this.
	at := time.Now()
	// A failed look (not a missing key) tells nothing of the tombstone:
	// its absence is then no sign of an expiry.
	looked := err == nil || errors.Is(err, redis.Nil)
	if err != nil {
		tomb = ""
	}
	// The identity's tombstone first, and while it may still be there,
	// only it: the last message on the key's channel may be about a later
	// holder (one that took the key after this lease ended and handed it
	// on, or was forced out), and every release through the runtime
	// leaves a tombstone for at least minTombLife, a handover marked "1>"
	// or "l>" (TestAdversary71_WatchOwnEndingThenOthersHandover). A
	// release by a runtime older than that mark hands over leaving "1":
	// named "released".
	switch {
	case tomb == "x":
		return "force-released"
	case tomb == "e":
		return "hold ended"
	case tomb == "1>" || tomb == "l>": // the holder's release handed the key over
		return "handed over"
	case tomb == "1" || tomb == "l": // the holder's own release (a leader term's: "l")
		return "released"
	case tomb == "h":
		return "hold ran out"
	case looked && at.Sub(old.at) < minTombLife:
		// No release through the runtime ended it: its TTL (or a
		// hold-min's) ran out, or its key was deleted.
		if old.info.Hold {
			return "hold ran out"
		}
		return "expired"
	}
	// The tombstone may have run out: the message, if it is about this
	// lease, tells a handover or a forced release.
	switch {
	case note != "" && noteID(note) == now.Holder:
		return "handed over"
	case note == "x" && old.info.Hold:
		return "hold ended"
	case note == "x":
		return "force-released"
	case old.info.Hold:
		return "hold ran out"
	}
	// A release and a key lost before its TTL ran out (deleted by hand, a
	// restart without persistence, a failover) look the same, so neither
	// is claimed.
	return "" // expired, or released unseen
}

// minTombLife is the shortest life of a release's tombstone (see tombTTL).
const minTombLife = time.Second
