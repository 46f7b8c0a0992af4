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
	l, _ := FromContext(ctx)
	for ; l != nil; l = l.parent {
		if l.fenced {
			return l.token, true
		}
	}
	return 0, false
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
