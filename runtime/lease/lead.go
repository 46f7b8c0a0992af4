package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leader election. A candidate (Lead) campaigns for the lease on a key the
// way a waiting Do does: it joins the key's queue and sleeps until a
// release hands the lease to it, the holder's TTL runs out or a re-check is
// due, for as long as it takes. A grant with MinValidity left starts a
// term: fn runs with the lease, renewed every TTL/3, and its context is
// cancelled with a cause wrapping ErrLost the moment the lease can no
// longer be proven (the validity clock, a refused renewal). When fn returns
// the lease is released, handed at once to the next candidate in the
// queue, and the candidate campaigns again. A term is one call of the
// machinery Do uses (acquire, wait, run, renew, release), with no total
// deadline and the candidate's owner in its identity (see redisKeys); every
// term is fenced, and its token is the term number.

//go:embed leader.lua
var leaderSrc string

var leaderScript = redis.NewScript(leaderSrc)

// LeadSpec describes a candidacy for the leadership of a key (Client.Lead,
// Client.Elect). Zero values take defaults.
type LeadSpec struct {
	// TTL is the term's lease length (default 30s): renewed every TTL/3
	// while leading. A leader that dies or is cut off is replaced within
	// about TTL plus a re-check (WithRecheck).
	TTL time.Duration
	// MinValidity is the least lease time that must remain after a grant
	// for a term to start (default TTL/2): a grant read too late starts no
	// term, however the campaign went.
	MinValidity time.Duration
	// Owner names the candidate, such as a host or pod name (default
	// DefaultOwner: host name and process id). It is stored with the lease
	// while the candidate leads; Leader and WatchLeader report it. At most
	// 200 bytes.
	Owner string
	// Backoff is the pause before campaigning again after a campaign or a
	// term that ended with an error (default 500ms), doubled after each
	// failure in a row up to 16 times Backoff but not past TTL, so that a
	// standby is back in the campaign within a TTL of the errors ending. A
	// term that ends without an error (fn returned nil) is followed by a
	// new campaign at once.
	Backoff time.Duration
	// Name is a low-cardinality name for events (Spec.Name); the generator
	// sets the target's qualified name.
	Name string
}

// DefaultBackoff is LeadSpec.Backoff's default.
const DefaultBackoff = 500 * time.Millisecond

// maxOwner bounds LeadSpec.Owner: it travels in every script call of a
// term.
const maxOwner = 200

// forever stands for "no deadline" in a leader term's call: its wait and
// budget (about a century, well inside time.Duration's range).
const forever = 100 * 365 * 24 * time.Hour

// DefaultOwner is the owner a candidate stores when LeadSpec.Owner is
// empty: the host name and the process id, such as "web-7-12345".
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "pid"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// Check reports whether Lead would accept s, with the message Lead would
// return. leasegen calls it at generate time.
func (s LeadSpec) Check() error {
	_, err := s.normalize()
	return err
}

func (s LeadSpec) normalize() (LeadSpec, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", s.TTL}, {"MinValidity", s.MinValidity}, {"Backoff", s.Backoff}} {
		if d.v < 0 {
			return s, fmt.Errorf("lease: LeadSpec.%s is negative (%v)", d.name, d.v)
		}
	}
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	if s.MinValidity == 0 {
		s.MinValidity = s.TTL / 2
	}
	if s.MinValidity >= s.TTL {
		return s, fmt.Errorf("lease: LeadSpec.MinValidity %v must be less than TTL %v", s.MinValidity, s.TTL)
	}
	if v := s.TTL - drift(s.TTL); v-s.MinValidity < minEntryWindow {
		return s, fmt.Errorf("lease: LeadSpec.TTL %v cannot be entered with MinValidity %v: a grant is trusted for TTL − drift (1%% + 2ms) = %v, which leaves less than %v for the acquire's reply; use a longer TTL or a smaller MinValidity", s.TTL, s.MinValidity, v, minEntryWindow)
	}
	if len(s.Owner) > maxOwner {
		return s, fmt.Errorf("lease: LeadSpec.Owner is %d bytes long, at most %d are stored", len(s.Owner), maxOwner)
	}
	if s.Backoff == 0 {
		s.Backoff = DefaultBackoff
	}
	return s, nil
}

// Lead campaigns for the leadership of key until ctx ends, and runs fn for
// every term it wins. Terms of one key never overlap in time, unless one
// of them is reported lost.
//
// A term starts only on a confirmed grant with at least spec.MinValidity
// left, and lasts while fn runs. fn's context carries the lease
// (FromContext) and the term's fencing token (TokenFrom): the term number,
// strictly increasing per key, for the resources the leader writes to. It
// is cancelled with a cause wrapping ErrLost the moment leadership can no
// longer be proven (the lease's validity ran out before a renewal was
// confirmed, or a renewal found the key taken or gone), with ctx's cause
// when ctx ends, and with one wrapping ErrClosed when the Client is
// closed. When fn returns, the lease is released at once (handed to the
// next candidate waiting, which starts its term about one round trip
// later) and Lead campaigns again: at once after a term whose fn returned
// nil, after spec.Backoff otherwise. fn runs again only after its previous
// call returned, so return when ctx is done.
//
// Lead returns nil when ctx ends (after releasing the lease if it led, or
// if a campaign's grant may have been made: the release has the release
// timeout after ctx ends, whether ctx was cancelled or reached its
// deadline), an error wrapping ErrClosed when the Client is closed, or a configuration
// error at once (a bad spec or key). Every other failure is retried: each
// campaign and term is reported to the Observer as a call (EventAcquired
// when a term starts, EventLost, EventDone with the term's outcome, fn's
// error included), its Spec fenced, without a deadline.
func (c *Client) Lead(ctx context.Context, key string, spec LeadSpec, fn func(ctx context.Context) error) error {
	return c.lead(ctx, key, spec, fn, nil)
}

// lead is Lead; after, when set, runs after each term that started,
// once it has ended and its lease was released (Elect's OnStoppedLeading).
func (c *Client) lead(ctx context.Context, key string, spec LeadSpec, fn func(context.Context) error, after func()) error {
	switch {
	case c == nil:
		return errors.New("lease: Lead on a nil *Client")
	case fn == nil:
		return errors.New("lease: Lead with a nil function")
	case key == "":
		return fmt.Errorf("%w: empty key", ErrBadKey)
	}
	if spec.Owner == "" {
		spec.Owner = DefaultOwner()
	}
	spec, err := spec.normalize()
	if err != nil {
		return err
	}
	owner := KeyPart(spec.Owner)
	backoff := spec.Backoff
	for {
		if ctx.Err() != nil {
			return nil
		}
		if c.closed.Load() {
			return fmt.Errorf("%w: Lead of key %q", ErrClosed, key)
		}
		entered, err := c.term(ctx, key, spec, owner, fn, after)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrClosed) || c.closed.Load():
			return fmt.Errorf("%w: Lead of key %q", ErrClosed, key)
		case err == nil:
			backoff = spec.Backoff
			continue
		case entered:
			backoff = spec.Backoff // a term ran: the failure is not a streak
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		case <-c.hub.closing:
			return fmt.Errorf("%w: Lead of key %q", ErrClosed, key)
		}
		backoff = min(2*backoff, max(spec.Backoff, min(16*spec.Backoff, spec.TTL)))
	}
}

// term runs one campaign and, if it wins, one term: a call without a total
// deadline that waits for as long as it takes and mints a fencing token.
// It reports whether fn was entered; after (if set) runs once the term has
// ended and its lease was released.
func (c *Client) term(ctx context.Context, key string, spec LeadSpec, owner string, fn func(context.Context) error, after func()) (entered bool, err error) {
	// Close ends the term as a cancelled ctx would, with ErrClosed.
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(ctxOf(c.hub.closing), func() {
		cancel(fmt.Errorf("%w: Lead of key %q", ErrClosed, key))
	})
	defer func() {
		stop()
		cancel(nil)
	}()
	s := Spec{TTL: spec.TTL, Deadline: forever, Wait: forever, MinValidity: spec.MinValidity, Fence: true, Name: spec.Name}
	start := time.Now()
	if c.callObs != nil {
		ctx = c.callObs.StartCall(ctx, key, s)
	}
	// A term has no budget: ctx's deadline, if any, says when to stop
	// leading, not how long the release may take. The release gets the
	// release timeout after ctx ends, by a deadline as by a cancel, so that
	// a term (or a grant whose reply was cut by the deadline) is handed over
	// at once and not left on the server for its TTL.
	a := newCall(false)
	a.c, a.ctx, a.key, a.spec, a.start, a.unbounded, a.owner = c, ctx, key, s, start, true, owner
	a.end = start.Add(forever)
	a.reserve = c.releaseTimeout
	a.k = redisKeys(c.prefix, key)
	a.unsettle()
	done := false
	defer func() {
		a.settle()
		if !done {
			a.observe(Event{Kind: EventDone, Entered: !a.entered.IsZero(), Lost: a.lostOwn, Err: errPanicked})
		}
		if after != nil && !a.entered.IsZero() {
			after()
		}
	}()
	l, err := a.obtain(ctx)
	if err == nil {
		err = a.run(ctx, l, fn)
	}
	done = true
	a.settle()
	a.observe(Event{Kind: EventDone, Entered: !a.entered.IsZero(), Lost: a.lostOwn, Err: err})
	return !a.entered.IsZero(), err
}

// Leader is the holder of a key's lease as Leader and WatchLeader read it.
// The zero value (Holder empty) means nobody holds the lease.
type Leader struct {
	// Holder is the grant's identity (see Lease.Owner), "" when the key is
	// free.
	Holder string
	// Owner is the leader's LeadSpec.Owner, such as a host name; "" for a
	// lease taken by Do, which stores none.
	Owner string
	// Term is the term's fencing token: the term number, strictly
	// increasing per key (0 for a lease taken by Do without fencing).
	Term Token
	// Remaining is how long the lease lasts unless renewed, by the
	// server's clock less the round trip of the read: a leader that dies
	// now is replaced after about this long.
	Remaining time.Duration
	// Err is set by WatchLeader when the key could not be read and the
	// leader last reported can no longer be vouched for (its Remaining
	// has run out, or none was known): who leads is unknown. Holder, Owner
	// and Term are empty then.
	Err error
}

// Leader reads who holds the lease on key: the leader's owner, its term
// and how long its lease lasts unless renewed. It writes nothing. A free
// key gives a zero Leader and a nil error.
func (c *Client) Leader(ctx context.Context, key string) (Leader, error) {
	if key == "" {
		return Leader{}, fmt.Errorf("%w: empty key", ErrBadKey)
	}
	if c.closed.Load() {
		return Leader{}, fmt.Errorf("%w: reading the leader of key %q", ErrClosed, key)
	}
	if err := c.waitCommandTable(ctx, "reading the leader", key, time.Time{}); err != nil {
		return Leader{}, err
	}
	return c.readLeader(ctx, redisKeys(c.prefix, key).lock, key)
}

func (c *Client) readLeader(ctx context.Context, lock, key string) (Leader, error) {
	sent := time.Now()
	vals, err := leaderScript.Run(ctx, c.rdb, []string{lock}).Slice()
	if err != nil {
		c.mayReload(err)
		return Leader{}, fmt.Errorf("lease: reading the leader of key %q: %w", key, err)
	}
	rtt := time.Since(sent)
	var v string
	var pttl int64
	ok := len(vals) == 2
	if ok {
		v, ok = vals[0].(string)
	}
	if ok {
		pttl, ok = vals[1].(int64)
	}
	if !ok {
		return Leader{}, fmt.Errorf("lease: reading the leader of key %q: unexpected reply %v", key, vals)
	}
	if v == "" {
		return Leader{}, nil
	}
	id, tok, found := strings.Cut(strings.TrimPrefix(v, "~"), ":")
	n, err := strconv.ParseUint(tok, 10, 64)
	if !found || err != nil || id == "" {
		return Leader{}, fmt.Errorf("lease: key %q holds %q, which the runtime did not write", key, v)
	}
	_, owner := splitIdentity(id)
	return Leader{Holder: id, Owner: owner, Term: Token(n), Remaining: max(time.Duration(pttl)*time.Millisecond-rtt, 0)}, nil
}

// WatchLeader reports the leader of key on the returned channel: first the
// current one, then every change (a new holder or term, nobody, or Err
// when it cannot be read), until ctx ends or the Client is closed; then
// the channel is closed. A slow reader gets the latest state, not every
// one in between.
//
// A term that starts (by a handover to a waiting candidate or on a free
// key), and a leader's graceful stop with no candidate waiting (the
// term's release), are reported at once (the grant's or the release's
// notification on the key's channel); any other change, such as a leader
// whose lease ran out or a Do's lease taken or released on the key,
// within a re-check interval (WithRecheck). A watch never vouches for a
// leader past its lease: when the key cannot be read, the leader last
// reported is replaced by a Leader with Err set once its Remaining has
// run out (within 50ms, however long WithRecheck lets a read take). A
// read takes at most the re-check interval or a second, whichever is
// shorter, and while reads fail the watch reads again within that. A
// term that starts and ends within one re-check without a handover can be
// missed.
func (c *Client) WatchLeader(ctx context.Context, key string) <-chan Leader {
	ch := make(chan Leader, 1)
	switch {
	case key == "":
		ch <- Leader{Err: fmt.Errorf("%w: empty key", ErrBadKey)}
		close(ch)
		return ch
	case c.closed.Load():
		ch <- Leader{Err: fmt.Errorf("%w: watching the leader of key %q", ErrClosed, key)}
		close(ch)
		return ch
	}
	go c.watchLeader(ctx, key, ch)
	return ch
}

// watchRead bounds a watch's read, and the time between its reads while
// they fail (see watchLeader).
const watchRead = time.Second

// lastLook is how soon a watch looks again at a leader read with no time
// left (see watchLeader).
const lastLook = 100 * time.Millisecond

// vouchGrace is how long past the reported leader's lease a watch's read
// may take before the watch reports Err instead (see watchLeader).
const vouchGrace = 50 * time.Millisecond

func (c *Client) watchLeader(ctx context.Context, key string, ch chan Leader) {
	defer close(ch)
	k := redisKeys(c.prefix, key)
	w := c.hub.listen(k.channel, time.Now())
	defer c.hub.leave(w, true)
	emit := func(l Leader) {
		select { // keep only the latest state for a slow reader
		case ch <- l:
		default:
			select {
			case <-ch:
			default:
			}
			ch <- l
		}
	}
	var (
		last       Leader
		reported   bool
		validUntil time.Time // how long last can be vouched for
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// A read has a re-check to answer, but not while it would vouch
		// for the leader last reported: from the moment that leader's
		// lease may have run out, only a short grace (a read that hangs,
		// on a paused or unreachable server, then reports Err at once
		// instead of a re-check later).
		// Nor more than watchRead otherwise: a read that hangs (on a
		// master that stopped answering, until the slot map is reloaded)
		// would leave a watch with a long re-check deaf to notifications
		// for as long.
		budget := min(max(c.recheck, 50*time.Millisecond), watchRead)
		if reported && last.Err == nil && last.Holder != "" {
			budget = min(budget, max(time.Until(validUntil), 0)+vouchGrace)
		}
		rctx, cancel := context.WithTimeout(ctx, budget)
		// As Leader: wait for a Cluster client's command table within the
		// read's budget rather than let go-redis load it under its own.
		var cur Leader
		err := c.waitCommandTable(rctx, "watching the leader", key, time.Time{})
		if err == nil {
			cur, err = c.readLeader(rctx, k.lock, key)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		next := now.Add(c.recheck)
		switch {
		case err != nil:
			// Read again within watchRead, not a whole re-check later:
			// what failed (a hung master replaced by its replica, a
			// server restarting) may answer sooner.
			next = now.Add(min(c.recheck, watchRead))
			if !reported || last.Err == nil && (last.Holder == "" || !now.Before(validUntil)) {
				last, reported = Leader{Err: err}, true
				emit(last)
			} else if last.Err == nil && validUntil.Before(next) {
				next = validUntil
			}
		default:
			if !reported || cur.Holder != last.Holder || cur.Term != last.Term || last.Err != nil {
				emit(cur)
			}
			last, reported = cur, true
			validUntil = now.Add(cur.Remaining)
			// Look when it would run out; a Remaining of 0 (a key without
			// expiry, or in its last milliseconds: the read's round trip
			// is taken off) is looked at again within lastLook, not every
			// millisecond, and not only a re-check later (a minute-long
			// re-check vouched for a leader whose lease ran out just
			// after the read: a CI run of
			// TestAdversary68_GrantReplyLostWatchReportsThatTerm).
			switch {
			case cur.Holder == "":
			case cur.Remaining > 0 && validUntil.Before(next):
				next = validUntil.Add(time.Millisecond)
			case cur.Remaining == 0:
				next = now.Add(min(c.recheck, lastLook))
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-w.wake:
			timer.Stop() // Go 1.23 timers: no stale tick after Stop or Reset
		case <-timer.C:
		case <-ctx.Done():
			return
		case <-c.hub.closing:
			return
		}
	}
}

// LeaderCallbacks are Elect's hooks, in the shape of client-go's
// leaderelection.LeaderCallbacks.
type LeaderCallbacks struct {
	// OnStartedLeading runs in a goroutine of its own when a term starts,
	// with a context cancelled when the term ends (with a cause wrapping
	// ErrLost when leadership could no longer be proven). Required.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called once after every term, whatever ended it
	// (loss, ctx, Close), once its context is cancelled and its lease was
	// released or found lost; it does not wait for OnStartedLeading to
	// return. Optional.
	OnStoppedLeading func()
	// OnNewLeader is called with the owner of each new leader observed
	// (WatchLeader), this candidate included, from one goroutine, in
	// order. Optional.
	OnNewLeader func(identity string)
}

// Elect is Lead with client-go's callbacks: it campaigns for key until ctx
// ends; each term runs cb.OnStartedLeading in its own goroutine and lasts
// until leadership is lost or ctx ends (not until OnStartedLeading
// returns); cb.OnStoppedLeading follows every term. A new term starts only
// after the previous OnStartedLeading has returned, so two never run at
// once in one process. Elect returns as Lead does, once its callbacks have
// returned.
func (c *Client) Elect(ctx context.Context, key string, spec LeadSpec, cb LeaderCallbacks) error {
	if cb.OnStartedLeading == nil {
		return errors.New("lease: Elect needs LeaderCallbacks.OnStartedLeading")
	}
	if cb.OnNewLeader != nil && c != nil && key != "" {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		defer func() { stop(); <-watched }()
		go func() {
			defer close(watched)
			prev := ""
			for l := range c.WatchLeader(wctx, key) {
				if l.Owner != "" && l.Owner != prev {
					prev = l.Owner
					cb.OnNewLeader(l.Owner)
				}
			}
		}()
	}
	var running chan struct{} // closed when the term's OnStartedLeading returns
	return c.lead(ctx, key, spec, func(lctx context.Context) error {
		running = make(chan struct{})
		go func() {
			defer close(running)
			cb.OnStartedLeading(lctx)
		}()
		<-lctx.Done()
		return nil
	}, func() {
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading()
		}
		<-running
	})
}
