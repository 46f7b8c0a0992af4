package lease

import (
	"context"
	"sync"
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
	key    string
	owner  string // the grant's identity
	token  Token
	fenced bool
	parent *Lease

	mu         sync.Mutex
	validUntil time.Time // monotonic; only ever moves forward
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
	l.c.obs.Observe(Event{Kind: EventStaleWriteRejected, Ctx: context.Background(), Key: l.key, Token: l.token, Err: err})
}

// Remaining returns how long the lease is known to be valid, by this
// process's monotonic clock (0 once it has ended).
func (l *Lease) Remaining() time.Duration {
	select {
	case <-l.lost:
		return 0
	default:
	}
	l.mu.Lock()
	d := time.Until(l.validUntil)
	l.mu.Unlock()
	return max(d, 0)
}

// Lost is closed when the lease is lost while the function runs.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
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

// held returns the lease on key that c already holds in ctx, if any.
func (c *Client) held(ctx context.Context, key string) *Lease {
	l, _ := FromContext(ctx)
	for ; l != nil; l = l.parent {
		if l.c == c && l.key == key {
			return l
		}
	}
	return nil
}
