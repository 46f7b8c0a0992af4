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
	a      *call // the call that acquired it (events)
	key    string
	owner  string // the grant's identity
	token  Token
	fenced bool
	parent *Lease

	// inCall is true while the acquiring call's function runs: only then
	// may a nested call on the same key reuse this lease.
	inCall atomic.Bool
	// ctx is the function's context without the lease value: done when the
	// lease is lost, the budget ends or the call returns. cancel ends it
	// with a cause.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	validUntil time.Time // monotonic; only ever moves forward
	holdUntil  time.Time // the release keeps the key until then (HoldMin, also of nested calls)
	lastErr    error     // the last failed renewal, for the loss cause
	cause      error     // why the lease was lost (wraps ErrLost); set once before lost closes
	lost       chan struct{}
	lostOnce   sync.Once
}

// Key returns the key passed to Do.
func (l *Lease) Key() string { return l.key }

// Token returns the fencing token of the grant, or 0 without fencing.
func (l *Lease) Token() Token { return l.token }

// Owner returns the identity this grant was made to: 128 random bits in
// hex, new for every grant. Fenced resources store it beside the token so
// that one holder may write several times under the same token while a
// different owner presenting that token is refused.
func (l *Lease) Owner() string { return l.owner }

// ReportStaleWrite tells the lease's observer that a fenced resource
// rejected a write made under this lease (EventStaleWriteRejected).
// runtime/fence calls it; other resources can too.
func (l *Lease) ReportStaleWrite(err error) {
	l.a.observe(Event{Kind: EventStaleWriteRejected, Token: l.token, Err: err})
}

// Remaining returns how long the lease is known to be valid, by this
// process's monotonic clock (0 once it has ended).
func (l *Lease) Remaining() time.Duration {
	if l.isLost() {
		return 0
	}
	l.mu.Lock()
	d := time.Until(l.validUntil)
	l.mu.Unlock()
	return max(d, 0)
}

// Lost is closed when the lease is lost while the function runs.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns why the lease was lost (an error wrapping ErrLost), or nil
// while it is not.
func (l *Lease) Err() error {
	if !l.isLost() {
		return nil
	}
	return l.cause
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

// extend moves valid-until forward to v (never back).
func (l *Lease) extend(v time.Time) {
	l.mu.Lock()
	if v.After(l.validUntil) {
		l.validUntil = v
	}
	l.mu.Unlock()
}

// holdTo makes the release keep the key until at least t.
func (l *Lease) holdTo(t time.Time) {
	l.mu.Lock()
	if t.After(l.holdUntil) {
		l.holdUntil = t
	}
	l.mu.Unlock()
}

// lose marks l lost with cause, cancels its function's context and reports
// EventLost, once. The observer is called without any lock held.
func (l *Lease) lose(cause error) {
	if l.cut(cause) {
		l.a.observe(Event{Kind: EventLost, Err: cause})
	}
}

// cut is lose without the event, for callers that hold a lock: it reports
// whether it did the cut, and then the caller must report EventLost.
func (l *Lease) cut(cause error) bool {
	if !l.markLost(cause) {
		return false
	}
	l.cancel(cause)
	return true
}

// markLost records cause and closes Lost once; it reports whether this
// call did it.
func (l *Lease) markLost(cause error) bool {
	first := false
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.cause = cause
		l.mu.Unlock()
		close(l.lost)
		first = true
	})
	return first
}

type ctxKey struct{}

// FromContext returns the innermost lease held by the calling function.
func FromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(ctxKey{}).(*Lease)
	return l, ok && l != nil
}

// TokenFrom returns the fencing token of the innermost fenced lease in ctx.
// It reports false when no lease in ctx was granted with fencing.
func TokenFrom(ctx context.Context) (Token, bool) {
	if l, ok := FencedFrom(ctx); ok {
		return l.token, true
	}
	return 0, false
}

// FencedFrom returns the innermost lease in ctx that was granted with
// fencing: the one whose token a resource should check.
func FencedFrom(ctx context.Context) (*Lease, bool) {
	l, _ := FromContext(ctx)
	for ; l != nil; l = l.parent {
		if l.fenced {
			return l, true
		}
	}
	return nil, false
}

// held returns the innermost lease on key of c in ctx, if any (it may have
// ended: see reentry).
func (c *Client) held(ctx context.Context, key string) *Lease {
	l, _ := FromContext(ctx)
	for ; l != nil; l = l.parent {
		if l.c == c && l.key == key {
			return l
		}
	}
	return nil
}
