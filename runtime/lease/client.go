package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client runs protected calls against one Redis deployment. It is safe for
// concurrent use; create one per process and Close it when done.
type Client struct {
	rdb     redis.UniversalClient // the client commands go through
	derived redis.UniversalClient // non-nil when New made rdb; closed by Close

	prefix         string
	obs            Observer
	replicas       int
	replicaTimeout time.Duration
	releaseTimeout time.Duration
	counterTTL     time.Duration

	hub    *waitHub
	renew  *renewer
	closed atomic.Bool
}

// Option configures a Client.
type Option func(*Client) error

// WithObserver sends every lease event to o (see Observer; combine several
// with Observers).
func WithObserver(o Observer) Option {
	return func(c *Client) error {
		if o == nil {
			return errors.New("lease: WithObserver(nil)")
		}
		c.obs = o
		return nil
	}
}

// WithPrefix sets the namespace of the runtime's Redis keys (default
// "lease:"). It must not contain '{' or '}', which would break the hash tag
// that keeps one lease's keys in one Cluster slot.
func WithPrefix(p string) Option {
	return func(c *Client) error {
		if strings.ContainsAny(p, "{}") {
			return fmt.Errorf("lease: WithPrefix(%q): the prefix must not contain '{' or '}'", p)
		}
		c.prefix = p
		return nil
	}
}

// WithReplicas requires each grant to be acknowledged by n replicas (Redis
// WAIT on the connection that wrote it, for at most timeout) before the
// function is entered. A grant acknowledged by fewer is released and the call
// fails with an error wrapping ErrUnknown: after a failover it may be lost.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *Client) error {
		if n < 0 || timeout <= 0 {
			return fmt.Errorf("lease: WithReplicas(%d, %v): need n >= 0 and timeout > 0", n, timeout)
		}
		c.replicas, c.replicaTimeout = n, timeout
		return nil
	}
}

// WithReleaseTimeout bounds each release (default 250ms). The same amount,
// capped at a tenth of Spec.Deadline, is reserved from every call's budget so
// that the release fits within the deadline.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: WithReleaseTimeout(%v): need a positive duration", d)
		}
		c.releaseTimeout = d
		return nil
	}
}

// WithCounterTTL sets how long a fence counter outlives its last grant
// (default 24h). Tokens keep increasing after it expires thanks to the
// server-time floor; the counter only matters when the server clock steps
// back or several grants fall within one microsecond.
func WithCounterTTL(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: WithCounterTTL(%v): need a positive duration", d)
		}
		c.counterTTL = d
		return nil
	}
}

// New returns a Client that sends commands through rdb.
//
// Deadlines must reach socket reads, which go-redis only does when
// ContextTimeoutEnabled is set. When it is not, New derives a dedicated client
// from rdb's options with it enabled (same address, TLS, credentials and
// retries) and Close closes that client; rdb itself is never modified or
// closed. Implementations other than *redis.Client and *redis.ClusterClient
// cannot be checked and are refused, and so is *redis.Ring: it moves keys
// between shards when one misses heartbeats, which would split a lease.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	c := &Client{
		prefix:         "lease:",
		obs:            nopObserver{},
		releaseTimeout: 250 * time.Millisecond,
		counterTTL:     24 * time.Hour,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	switch r := rdb.(type) {
	case nil:
		return nil, errors.New("lease: New(nil): need a *redis.Client or *redis.ClusterClient")
	case *redis.Ring:
		return nil, errors.New("lease: redis.Ring is not supported: it remaps keys when a shard misses heartbeats, so two owners could hold one lease; use a *redis.Client or *redis.ClusterClient")
	case *redis.Client:
		if r == nil {
			return nil, errors.New("lease: New: nil *redis.Client")
		}
		c.rdb = r
		if !r.Options().ContextTimeoutEnabled {
			o := *r.Options()
			o.ContextTimeoutEnabled = true
			reinitClient(&o)
			c.derived = redis.NewClient(&o)
			c.rdb = c.derived
		}
	case *redis.ClusterClient:
		if r == nil {
			return nil, errors.New("lease: New: nil *redis.ClusterClient")
		}
		c.rdb = r
		if !r.Options().ContextTimeoutEnabled {
			o := *r.Options()
			o.ContextTimeoutEnabled = true
			reinitCluster(&o)
			c.derived = redis.NewClusterClient(&o)
			c.rdb = c.derived
		}
	default:
		return nil, fmt.Errorf("lease: unsupported client %T: need a *redis.Client or *redis.ClusterClient (the runtime must know that context deadlines reach socket reads)", rdb)
	}
	c.hub = newWaitHub(c.rdb)
	c.renew = newRenewer(c)
	return c, nil
}

// Close stops the shared subscription and closes the client New derived, if
// any. Calls in progress may fail; later calls return an error.
func (c *Client) Close() error {
	if c == nil || !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.renew.close()
	err := c.hub.close()
	if c.derived != nil {
		err = errors.Join(err, c.derived.Close())
	}
	return err
}

// Redis returns the client the runtime sends commands through (derived by
// New when needed). Tests and adapters use it to inspect lease keys.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// pipeliner returns a pipeline that runs on one connection to the node that
// owns key, so that WAIT follows the write it must confirm.
func (c *Client) pipeliner(ctx context.Context, key string) (redis.Pipeliner, error) {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Pipeline(), nil
	}
	return c.rdb.Pipeline(), nil
}

// go-redis normalizes options when a client is built (-1 "none" becomes 0,
// 0 "default" becomes a value), so options read back from a client would be
// normalized again to different values. reinit maps the "none" results back
// to the spelling that survives: a client with retries disabled must not get
// three retries from being derived.
func reinitClient(o *redis.Options) {
	// The push processor is per-client state that NewClient stored in the
	// options; sharing it makes the derived client's handler registration
	// clash. The lease commands receive no push notifications.
	o.PushNotificationProcessor = nil
	o.ReadTimeout = unNormalize(o.ReadTimeout)
	o.WriteTimeout = unNormalize(o.WriteTimeout)
	o.MinRetryBackoff = unNormalize(o.MinRetryBackoff)
	o.MaxRetryBackoff = unNormalize(o.MaxRetryBackoff)
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
}

func reinitCluster(o *redis.ClusterOptions) {
	o.ReadTimeout = unNormalize(o.ReadTimeout)
	o.WriteTimeout = unNormalize(o.WriteTimeout)
	o.MinRetryBackoff = unNormalize(o.MinRetryBackoff)
	o.MaxRetryBackoff = unNormalize(o.MaxRetryBackoff)
	if o.MaxRedirects == 0 {
		o.MaxRedirects = -1
	}
}

func unNormalize(d time.Duration) time.Duration {
	switch d {
	case 0:
		return -1
	case -1:
		return -2
	}
	return d
}
