// Package lease runs Go functions while holding a Redis lease, and stays
// correct under timeouts, process pauses and failover. It is the runtime of
// leasegen: the wrappers leasegen generates from //lease:lock directives call
// only [Client.Do], and code can call Do directly.
//
//	leases, err := lease.New(rdb) // rdb: a *redis.Client, or a *redis.ClusterClient with ContextTimeoutEnabled
//	...
//	err = leases.Do(ctx, "orders:"+lease.KeyPart(orderID),
//		lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 2 * time.Second, Fence: true},
//		func(ctx context.Context) error {
//			tok, _ := lease.TokenFrom(ctx)
//			return ledger.Charge(ctx, orderID, tok) // the ledger refuses older tokens
//		})
//
// # A call: acquire, wait, run and renew, release
//
// Every phase of Do is bounded by the call's budget: the earlier of ctx's
// deadline and start+[Spec.Deadline], less a reserve for the release. Do
// returns by then (plus a few milliseconds) even when Redis stops answering,
// whatever the go-redis client's read timeout.
//
//   - Acquire. One round trip: a Lua script grants the lease to a fresh
//     128-bit identity of this attempt (with [Spec.Fence], minting the
//     fencing token in the same script), or answers busy with the holder's
//     remaining TTL; an unfenced call that will not wait uses a plain
//     SET NX PX. Both are safe to replay: when go-redis re-sends after a
//     lost reply, the key already holds this attempt's identity and the
//     answer is "granted" again, with the same token, never busy. A
//     monotonic clock starts before the request is sent; the grant is valid
//     until send time + TTL − drift (drift: 1% of TTL + 2ms). A grant with
//     less than [Spec.MinValidity] left is released and Do returns
//     [ErrLowValidity].
//   - Wait. A caller that will wait ([Spec.Wait]) joins the key's queue,
//     shared by every process; a release hands the lease straight to the
//     first live waiter and names it on the key's channel (one shared
//     subscription per Client), so the lease goes to the longest waiter,
//     not to whoever loops fastest, and a releasing process that asks again
//     goes to the back. A waiter also looks again when the holder's TTL
//     runs out and at least every re-check interval ([WithRecheck]), so a
//     missed notification costs at most that, and it always makes a last
//     attempt before giving up with [ErrBusy] (or, with [BusySkip],
//     returning nil without calling fn). Waiting stops early when fn could
//     no longer get its MinValidity within the budget; the error says so.
//   - Run and renew. fn runs with a context that carries the lease
//     ([FromContext], [TokenFrom]) and ends before the release reserve.
//     Every TTL/3 a compare-identity PEXPIRE renews the lease: a confirmed
//     renewal sent at t makes it valid until t + TTL − drift, an unknown
//     outcome extends nothing, and "not the owner" means the lease is lost.
//     When the validity runs out or the lease is found lost, fn's context is
//     cancelled at once with cause [ErrLost]; when the budget runs out, with
//     cause [ErrDeadline]. There is no renewal past the deadline.
//   - Release. A compare-identity delete (with [Spec.HoldMin], a shortening
//     of the TTL to the rest of the hold) on a context detached from ctx, so
//     a cancelled request still releases, bounded by [WithReleaseTimeout]. It
//     never deletes or extends another holder's lease. A release whose reply
//     is lost is reported ([EventReleaseUnconfirmed]), not retried as a
//     plain DEL; the TTL ends the lease.
//
// # Errors
//
// Test errors with [errors.Is]. An error of Do wraps one of these classes
// together with its cause (the transport error, fn's error,
// [context.DeadlineExceeded]):
//
//   - [ErrBusy]: Redis answered "held by another" until the wait ran out.
//     fn was not called.
//   - [ErrUnknown]: a request was sent and no reply was read (timeout, EOF,
//     reset, cancelled context): the lease may have been granted. fn was not
//     called, and one bounded conditional release with the same identity was
//     sent; the error says so if that release is unconfirmed too. Unknown is
//     never reported as busy.
//   - [ErrLowValidity]: granted too late to enter; fn was not called.
//   - [ErrLost]: the lease ended while fn ran, fn returned after its
//     validity, or the release found that the key was no longer ours. Do
//     returns it even when fn returned nil: fn's side effects ran partly
//     unprotected, and the caller must know.
//   - [ErrDeadline]: the total budget ran out; the error also wraps
//     context.DeadlineExceeded, and fn's [context.Cause] is ErrDeadline.
//     There is no renewal after it, so an fn that goes on past its
//     deadline may outlive the lease too: the error then wraps both
//     ErrLost and ErrDeadline.
//   - [ErrBadKey]: an empty key, or a key part that could not be built.
//   - Definite failures are none of the above: nothing was sent (dial, TLS)
//     or the server refused the command (NOPERM, READONLY, OOM, ...). The
//     error names the cause; fn was not called and no release is needed.
//
// Otherwise Do returns fn's own error, or an error wrapping ctx.Err() when
// the caller's ctx was cancelled while waiting. When fn returned nil and
// ctx was cancelled afterwards, Do returns nil (the release goes on,
// detached). Every outcome is also reported to the [Observer] given with
// [WithObserver].
//
// # Reentrancy
//
// A nested Do on the same Client and key inside fn reuses the outer lease
// (no new acquire, the same token), but only while the outer call is still
// running and its lease is provably valid: a context that outlived its call,
// or whose lease was lost, gets no reentry. The inner Spec still applies: its
// Deadline bounds the inner fn, its MinValidity is checked against the outer
// lease's remaining validity, and Fence under an unfenced outer lease is an
// error, never a silently missing token. Different keys nest normally;
// [TokenFrom] returns the token of the innermost fenced lease.
//
// # Kept leases
//
// With [Spec.Keep], a call does not release its lease when fn returns: the
// Client keeps it, renewed, for up to Keep, and the next call on the key in
// the same Client enters at once (no round trip, the same token) if the
// lease suits it. A waiter in another process makes the Client release it
// as soon as no call uses it. A kept lease that is lost is forgotten, and
// Close releases kept leases.
//
// # Leader election
//
// [Client.Lead] campaigns for a key until its context ends and runs a
// function for every term it wins (leasegen's //lease:leader wrappers call
// it): a term is a call of the same machinery — the key's queue and
// release notifications, the validity clock, renewal, cancel-on-loss,
// the conditional release — without a total deadline, always fenced: the
// term's token is its term number. A graceful stop hands the lease to the
// next candidate at once. The candidate's owner (a host or pod name) is
// stored with the grant; [Client.Leader] reads who leads, with its term and
// remaining TTL, [Client.WatchLeader] reports each change, and
// [Client.Elect] offers client-go's callbacks.
//
// # Failure model
//
// A Redis lease is an efficiency and coordination tool, not a consensus
// lock. Asynchronous replication can lose a grant on failover; a paused
// process keeps running after its lease ends; cancellation is cooperative,
// so a write already sent cannot be recalled.
//
// What Do guarantees: it never calls fn on an unknown or insufficient grant;
// it tells fn when its lease ends (its context is cancelled with a cause); it
// never deletes or extends another holder's lease; and with fencing and a
// resource that checks tokens (package runtime/fence), a stale holder's late
// write is rejected.
//
// What it cannot guarantee: mutual exclusion across a failover that loses
// the last grants, or for side effects on resources that do not check
// fencing tokens. Tokens are max(counter + 1, server time in µs), so they
// keep increasing across the counter's expiry ([WithCounterTTL]), FLUSHALL
// and restarts without persistence, but not across a server clock that
// steps back or a new primary whose clock is behind the old one's.
// [WithReplicas] makes each grant wait for replica acknowledgement before fn
// is entered.
//
// # Keys and Redis Cluster
//
// Do maps the key into the runtime's namespace ([WithPrefix], default
// "lease:"), so no user key can reach the runtime's own counter and channel
// keys. Build keys from values with [KeyPart], which escapes separators so
// that distinct values give distinct keys. All keys of one lease share one
// hash tag, so on Redis Cluster each script touches one slot; release
// notifications use classic pub/sub, which the cluster broadcasts, so one
// subscription per Client serves every shard. A redis.Ring is refused: it
// moves keys between shards, which would split a lease.
//
// # Permissions
//
// A Redis ACL user needs the commands of the README's recipe. A missing one
// shows on the first call that needs it: a call that waits, a release that
// finds a waiter queued, a renewal. [Client.Check] runs every path at once,
// on keys of its own (on each master of a Cluster), and names what Redis
// refused; leasectl check runs it from the command line.
package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Token is a fencing token: strictly increasing per key across grants.
// Present it to the protected resource, which must reject writes carrying a
// token lower than one it has already seen (see runtime/fence).
type Token uint64

// Lease is a held lease as seen by the protected function, through
// FromContext.
type Lease struct {
	c      *Client
	a      *call                // the call that acquired it (its identity, keys, TTL)
	cur    atomic.Pointer[call] // the call using it now, or last (events)
	key    string
	owner  string // the grant's identity
	token  Token
	fenced bool

	// ended is set once the lease has been released.
	ended atomic.Bool
	// kept is set while the Client keeps the lease between calls
	// (Spec.Keep); w is its watcher, which outlives the acquiring call.
	kept atomic.Bool
	w    *watcher
	// cancel ends the context of the call now using the lease (the
	// function's, without the lease value) with a cause.
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	validUntil time.Time // monotonic; only ever moves forward
	holdUntil  time.Time // the release keeps the key until then (HoldMin, also of nested calls)
	lastErr    error     // the last failed renewal, for the loss cause
	cause      error     // why the lease was lost (wraps ErrLost); set once before lost closes
	lost       chan struct{}
	lostOnce   sync.Once
	reported   chan struct{} // made by markLost, closed by reportLoss
}

// observe reports e as an event of the call using the lease (or the last
// one, for a kept lease between calls).
func (l *Lease) observe(e Event) { l.cur.Load().observe(e) }

// Key returns the key passed to Do.
func (l *Lease) Key() string { return l.key }

// Token returns the fencing token of the grant, or 0 without fencing.
func (l *Lease) Token() Token { return l.token }

// Owner returns the identity this grant was made to: 128 random bits in
// hex, new for every grant (a leader's term adds "/" and its escaped
// LeadSpec.Owner, see Client.Lead). Fenced resources store it beside the
// token so that one holder may write several times under the same token
// while a different owner presenting that token is refused.
func (l *Lease) Owner() string { return l.owner }

// ReportStaleWrite tells the lease's observer that a fenced resource
// rejected a write made under this lease (EventStaleWriteRejected).
// runtime/fence calls it; other resources can too.
func (l *Lease) ReportStaleWrite(err error) {
	l.observe(Event{Kind: EventStaleWriteRejected, Token: l.token, Err: err})
}

// Remaining returns how long the lease is known to be valid, by this
// process's monotonic clock: 0 once it is lost or its call has returned
// and released it (a context that outlived the call still finds the
// Lease, but not a valid one).
func (l *Lease) Remaining() time.Duration {
	if l.isLost() || l.ended.Load() {
		return 0
	}
	l.mu.Lock()
	d := time.Until(l.validUntil)
	l.mu.Unlock()
	return max(d, 0)
}

// Lost is closed when the lease is lost while the function runs.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns why the lease was lost (an error wrapping ErrLost), an
// error saying it was released once its call has returned, or nil while
// it is held.
func (l *Lease) Err() error {
	if l.isLost() {
		return l.cause
	}
	if l.ended.Load() {
		return errEnded
	}
	return nil
}

func (l *Lease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

func (l *Lease) valid() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// extend moves valid-until forward to v (never back), unless valid-until
// has already passed: a renewal confirmed after the lease's validity ran
// out does not bring it back (§4 Loss: the lease is lost when valid-until
// passes, whether or not the validity timer has run yet). It reports
// whether the lease was still valid.
func (l *Lease) extend(v time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(l.validUntil) { // as the validity timer decides
		return false
	}
	if v.After(l.validUntil) {
		l.validUntil = v
	}
	return true
}

// holdTo makes the release keep the key until at least t, and returns
// what it kept it until before.
func (l *Lease) holdTo(t time.Time) (before time.Time) {
	l.mu.Lock()
	before = l.holdUntil
	if t.After(l.holdUntil) {
		l.holdUntil = t
	}
	l.mu.Unlock()
	return before
}

// lose marks l lost with cause and reports it (reportLoss), once.
func (l *Lease) lose(cause error) {
	if l.markLost(cause) {
		l.reportLoss(cause)
	}
}

// reportLoss reports a loss this goroutine marked (markLost): it cancels
// the function's context first (no observer can delay that), then reports
// the events in pre (a refused renewal) and EventLost; a kept lease is
// forgotten. The call using the lease waits for the events before its
// EventDone (awaitReport), so EventLost precedes EventDone even when
// another goroutine reports the loss. The observer is called without any
// lock held.
func (l *Lease) reportLoss(cause error, pre ...Event) {
	l.cancelCall(cause)
	defer func() { // even if an observer panics
		close(l.reported)
		if l.kept.Load() {
			l.c.dropKept(l)
		}
	}()
	for _, e := range pre {
		l.observe(e)
	}
	l.observe(Event{Kind: EventLost, Err: cause})
}

// lossReportWait bounds how long a returning call waits for its loss to be
// reported by another goroutine (an observer that itself waits for the
// call to return would otherwise never let it).
const lossReportWait = time.Second

// awaitReport reports whether l is lost and, if so, waits (bounded by
// lossReportWait) until the loss has been reported.
func (l *Lease) awaitReport() bool {
	if !l.isLost() {
		return false
	}
	select {
	case <-l.reported:
	default:
		t := time.NewTimer(lossReportWait)
		select {
		case <-l.reported:
		case <-t.C:
		}
		t.Stop()
	}
	return true
}

// setCall records how to cancel the call now using the lease, under l.mu:
// a kept lease passes from call to call while its timer and renewals may
// cancel it.
func (l *Lease) setCall(cancel context.CancelCauseFunc) {
	l.mu.Lock()
	l.cancel = cancel
	l.mu.Unlock()
}

func (l *Lease) cancelCall(cause error) {
	l.mu.Lock()
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// markLost records cause and closes Lost once; it reports whether this
// call did it, and then must report the loss (reportLoss).
func (l *Lease) markLost(cause error) bool {
	first := false
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.cause = cause
		l.mu.Unlock()
		l.reported = make(chan struct{}) // read only once lost is closed
		close(l.lost)
		first = true
	})
	return first
}

type ctxKey struct{}

// leaseRef is what a function's context carries: the lease, the call whose
// function runs under it, and the enclosing leases of the caller. It is one
// per call, so that a kept lease passed from call to call (Spec.Keep) never
// lends its identity to a context of an earlier call, and the chain of
// enclosing leases cannot loop.
type leaseRef struct {
	l      *Lease
	a      *call
	parent *leaseRef
}

func refFrom(ctx context.Context) *leaseRef {
	r, _ := ctx.Value(ctxKey{}).(*leaseRef)
	return r
}

// lease is the Lease as the context's call may see it: the lease itself
// while the call's function runs; once it has returned, a view that is
// no longer valid (Remaining 0, Err says released or why it was lost),
// even if the Client keeps the lease for later calls (Spec.Keep).
func (r *leaseRef) lease() *Lease {
	if r.a.inFn.Load() {
		return r.l
	}
	l := r.l
	v := &Lease{c: l.c, a: l.a, key: l.key, owner: l.owner, token: l.token, fenced: l.fenced, lost: make(chan struct{})}
	v.cur.Store(r.a)
	v.ended.Store(true)
	if l.isLost() {
		v.cause, v.reported = l.cause, l.reported
		close(v.lost)
	}
	return v
}

// FromContext returns the innermost lease held by the calling function.
// A context that outlived its call still finds the Lease, but not a
// valid one.
func FromContext(ctx context.Context) (*Lease, bool) {
	if r := refFrom(ctx); r != nil {
		return r.lease(), true
	}
	return nil, false
}

// TokenFrom returns the fencing token of the innermost fenced lease in ctx.
// It reports false when no lease in ctx was granted with fencing. A call
// without Spec.Fence that took a lease kept by a fenced call (Spec.Keep)
// holds a lease granted with fencing: its token is reported.
func TokenFrom(ctx context.Context) (Token, bool) {
	if l, ok := FencedFrom(ctx); ok {
		return l.token, true
	}
	return 0, false
}

// FencedFrom returns the innermost lease in ctx that was granted with
// fencing: the one whose token a resource should check.
func FencedFrom(ctx context.Context) (*Lease, bool) {
	for r := refFrom(ctx); r != nil; r = r.parent {
		if r.l.fenced {
			return r.lease(), true
		}
	}
	return nil, false
}

// FencedFromKey returns the innermost lease in ctx on key (as passed to
// Do) that was granted with fencing. With fenced leases nested on
// different keys, FencedFrom returns the inner one, whose token is not
// ordered against the outer key's grants; a write to the outer key's
// resource must carry the outer lease's token.
func FencedFromKey(ctx context.Context, key string) (*Lease, bool) {
	for r := refFrom(ctx); r != nil; r = r.parent {
		if r.l.fenced && r.l.key == key {
			return r.lease(), true
		}
	}
	return nil, false
}

// held returns the innermost lease on key of c in ctx, with the call it was
// given to, if any (the call may have returned: see reusable).
func (c *Client) held(ctx context.Context, key string) *leaseRef {
	for r := refFrom(ctx); r != nil; r = r.parent {
		if r.l.c == c && r.l.key == key {
			return r
		}
	}
	return nil
}
