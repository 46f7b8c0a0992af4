package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Client runs protected calls against one Redis deployment. It is safe for
// concurrent use; create one per process and Close it when done.
type Client struct {
	rdb redis.UniversalClient // every command goes through it: the user's client (see New)
	// user is the client given to New (Redis returns it): rdb itself, or
	// for a *redis.Client without ContextTimeoutEnabled the clone rdb is.
	user redis.UniversalClient

	// cluster: rdb is a Cluster client, which writes a request again to
	// follow MOVED and ASK (see afterWrite).
	cluster bool

	// cmdTable is closed once a Cluster client's command table is loaded
	// (nil for a single server): see loadCommandTable.
	cmdTable chan struct{}

	prefix         string
	obs            Observer
	callObs        CallObserver // obs, when it wants to hear of each call's start
	quiet          bool         // no observer: events are not even built
	replicas       int
	replicaTimeout time.Duration
	releaseTimeout time.Duration
	counterTTL     time.Duration
	recheck        time.Duration

	// Script arguments that are the same for every call, boxed once.
	tombTTLArg, counterTTLArg any

	hub    *waitHub
	renew  *renewer
	clock  clock // release deadlines, keeps' ends
	closed atomic.Bool
	// closeDone is closed when the first Close returns; closeUntil (set
	// before closed) is the bound of its wait, which a later Close waits
	// for too.
	closeDone  chan struct{}
	closeUntil time.Time

	// When a release's message was last reported refused (UnixNano; see
	// publishRefused).
	pubRefusedAt atomic.Int64

	keptMu        sync.Mutex
	kept          map[string]*kept  // user key -> a lease kept between calls (Spec.Keep)
	keptByChannel map[string]string // release channel -> user key of a kept lease
	// keptReleases counts releases of forgotten kept leases on goroutines
	// of their own (a waiter asked, the keep ran out, a loss): Close waits
	// for them to be sent, as for the kept leases it releases itself.
	keptReleases sync.WaitGroup

	// askNodes are connections of the Client's own to Cluster masters
	// that an ASK redirect named but the client's slot map does not list
	// (see askTarget), by address; closed by Close.
	askMu    sync.Mutex
	askNodes map[string]*redis.Client
	// running counts the calls in run (their renewals may need askNodes
	// after Close: closed when the last of them returns).
	running atomic.Int64
	// unsettled counts the calls (Do, a Lead's term) outside their
	// function: acquiring, waiting, deciding whether to keep, releasing.
	// Close waits for them (see Close), except for those held up on a
	// goroutine that runs Close (obsRuns, closers; see blocked): a Close
	// called from an Observer does not wait for a call that cannot go on
	// until the Observer returns, nor for one that waits for its report.
	unsettled atomic.Int64
	obsMu     sync.Mutex
	obsRuns   map[obsRun]int
	closers   map[uint64]int // goroutines running Close (see blocked)

	// granting are the calls granted a lease (an acquire's grant or a
	// release's handover) that have not entered their function yet: Close
	// takes them (grantShut), releases their leases itself and they
	// return ErrClosed without entering or sending anything (see
	// call.enter).
	grantMu   sync.Mutex
	granting  map[*call]struct{}
	grantShut bool
}

// Option configures a Client.
type Option func(*Client) error

// WithObserver sends every lease event to o (see Observer; combine several
// with Observers).
func WithObserver(o Observer) Option {
	return func(c *Client) error {
		if isNilObserver(o) {
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
// Renewals are acknowledged the same way (WAIT after them, bounded by the
// renewal's own deadline): one that fewer replicas acknowledged is unknown
// and does not extend the lease's validity, so that renewals a demoted
// primary still accepts after a failover, which the new primary never sees,
// cannot keep a holder in its function past the key's expiry there.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *Client) error {
		if n < 0 || timeout <= 0 {
			return fmt.Errorf("lease: WithReplicas(%d, %v): need n >= 0 and timeout > 0", n, timeout)
		}
		c.replicas, c.replicaTimeout = n, timeout
		return nil
	}
}

// DefaultReleaseTimeout bounds each release unless WithReleaseTimeout says
// otherwise.
const DefaultReleaseTimeout = 250 * time.Millisecond

// WithReleaseTimeout bounds each release (default DefaultReleaseTimeout). The same amount,
// capped at a tenth of Spec.Deadline, is reserved from every call's budget so
// that the release fits within the deadline.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: WithReleaseTimeout(%v): need a positive duration", d)
		}
		// Capped as WithRecheck's interval: the sums made of it (a
		// tombstone lives 4 release timeouts; a leader's term reserves one
		// from its unbounded budget) cannot wrap
		// (TestAdversary45_HugeReleaseTimeoutNeverLeads).
		c.releaseTimeout = min(d, maxIntervalOption)
		return nil
	}
}

// WithRecheck bounds how long a waiter relies on release notifications
// alone (default 500ms): a waiter whose holder's lease runs longer looks
// again at least this often, so a missed notification (a dropped
// subscription, a missing permission, a failover) costs at most this much.
func WithRecheck(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: WithRecheck(%v): need a positive duration", d)
		}
		// Longer is as good as never: capped, so that the sums made of it
		// (a queue place lasts two re-checks and a little more) cannot wrap
		// (TestAdversary44_HugeRecheckKeepsQueuePlace).
		c.recheck = min(d, maxIntervalOption)
		return nil
	}
}

// maxIntervalOption is the longest re-check interval and release timeout (about
// 36 years): the longest WithRecheck and WithReleaseTimeout take.
const maxIntervalOption = time.Duration(1 << 60)

// WithCounterTTL sets how long a fence counter outlives its last grant
// (default 24h). Tokens keep increasing after it expires thanks to the
// server-time floor; the counter only matters when the server clock steps
// back or several grants fall within one microsecond. A grant that a
// release hands to this Client's waiting call (the releaser mints its
// token) keeps the counter for this Client's duration too, whoever
// releases; a waiter of a version before it keeps the releaser's.
func WithCounterTTL(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: WithCounterTTL(%v): need a positive duration", d)
		}
		c.counterTTL = d
		return nil
	}
}

// New returns a Client that sends commands through rdb itself: its
// connection pool, its hooks (instrumentation such as redisotel) and, for a
// Sentinel client from redis.NewFailoverClient, its failover handling.
//
// Deadlines must reach socket reads, which go-redis does only when
// ContextTimeoutEnabled is set. A *redis.Client without it (as
// redis.NewClient makes one by default) is not modified: lease commands go
// through a clone of it (go-redis's WithTimeout, with its own read and
// write timeouts) that has ContextTimeoutEnabled set and shares its
// connection pool and its Sentinel failover handling, but not its hooks
// (go-redis's clone starts without them): set ContextTimeoutEnabled on
// your client for its hooks (redisotel, ...) to see lease commands. A
// *redis.ClusterClient has no such clone, and one built from its options
// would have pools and a slot map of its own besides: New refuses one
// without ContextTimeoutEnabled. For the same reason New refuses
// ReadTimeout or WriteTimeout -2 (no socket deadlines at all); -1 is
// fine. *redis.Ring is
// refused: it moves keys between shards when one misses heartbeats, which
// would split a lease. Close the Client before rdb.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	c := &Client{
		prefix:         "lease:",
		obs:            nopObserver{},
		releaseTimeout: DefaultReleaseTimeout,
		counterTTL:     24 * time.Hour,
		recheck:        500 * time.Millisecond,
		closeDone:      make(chan struct{}),
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
		o := r.Options()
		if o.ReadTimeout < 0 || o.WriteTimeout < 0 { // -2 as given (see errNoDeadlines)
			return nil, errNoDeadlines("*redis.Client", "redis.Options")
		}
		c.rdb, c.user = r, r
		if !o.ContextTimeoutEnabled {
			c.rdb = withContextTimeouts(r)
		}
	case *redis.ClusterClient:
		if r == nil {
			return nil, errors.New("lease: New: nil *redis.ClusterClient")
		}
		if !r.Options().ContextTimeoutEnabled {
			return nil, errors.New("lease: New: the *redis.ClusterClient needs ContextTimeoutEnabled: true in its redis.ClusterOptions, so that context deadlines bound socket reads (without it a call could outlive its deadline by the read timeout)")
		}
		if o := r.Options(); o.ReadTimeout < 0 || o.WriteTimeout < 0 {
			return nil, errNoDeadlines("*redis.ClusterClient", "redis.ClusterOptions")
		}
		c.rdb, c.user, c.cluster = r, r, true
	default:
		return nil, fmt.Errorf("lease: unsupported client %T: need a *redis.Client or *redis.ClusterClient (the runtime must know that context deadlines reach socket reads)", rdb)
	}
	c.callObs, _ = c.obs.(CallObserver)
	_, c.quiet = c.obs.(nopObserver)
	c.tombTTLArg, c.counterTTLArg = ms(c.tombTTL()), ms(c.counterTTL)
	c.kept, c.keptByChannel = map[string]*kept{}, map[string]string{}
	c.hub = newWaitHub(c)
	c.renew = newRenewer(c)
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		c.cmdTable = make(chan struct{})
		go c.loadCommandTable(cc, c.cmdTable)
	}
	return c, nil
}

// withContextTimeouts is r for lease traffic when r's reads ignore context
// deadlines: go-redis's WithTimeout clone (the same pools and dialer, so
// the same Sentinel failover handling; no hooks; r's options copied, not
// shared) with r's own read and write timeouts and ContextTimeoutEnabled
// set in the copy. The clone is never closed: it owns nothing that r
// does not (closing it would close r's pool).
func withContextTimeouts(r *redis.Client) *redis.Client {
	o := r.Options()
	clone := r.WithTimeout(o.ReadTimeout)
	co := clone.Options()
	co.WriteTimeout = o.WriteTimeout
	co.ContextTimeoutEnabled = true
	return clone
}

// errNoDeadlines refuses a client whose ReadTimeout or WriteTimeout is -2:
// go-redis then sets no socket deadline at all, so not even
// ContextTimeoutEnabled bounds a read, and a call could wait for a silent
// server forever.
func errNoDeadlines(client, options string) error {
	return fmt.Errorf("lease: New: the %s has ReadTimeout or WriteTimeout -2 in its %s, which turns socket deadlines off, so that no context deadline can bound a read (a call could wait for a silent server forever); use -1 (no timeout of its own: the context's deadline still applies) or a positive timeout", client, options)
}

// Close stops the Client: later calls (Do, Lead, Leader, Inspect, List,
// ForceRelease, Watch; WatchLeader reports it as Err) return ErrClosed,
// Lead, Watch and WatchLeader end, calls waiting for a
// lease return ErrClosed at once, and the shared subscription is closed.
// Kept leases (Spec.Keep) not in use, and those whose release is already
// under way, are released before Close returns
// (each bounded by the release timeout); the queue places of the waiting
// calls it ends (with a lease a release handed one of them meanwhile,
// which passes to the next waiter) are given up by releases sent before
// Close returns (within the release timeout), not left to those calls;
// so are the leases of calls granted but not yet in their function (a
// handover, an Observer's EventAcquired): they return ErrClosed without
// entering. Calls outside their function are waited for within the same
// bound: one whose acquire is on its way (a grant it gets is released by
// the call, which does not enter), one deciding whether to keep its lease,
// one releasing. Calls already running their function keep their leases
// (renewed) until they return and release them, so close the go-redis
// client only after they have. Close waits for nothing else and may be
// called from an Observer, on the Observer's goroutine: it does not wait
// for a call that Observer holds up (the call it reports on, when that
// call is on the same goroutine or waits for a report of its loss), nor
// does any other Close meanwhile; a Close that an Observer starts on
// another goroutine and waits for waits for that call until its bound. A
// later Close (another part of the service, an Observer) returns when the
// first does, at the latest at the first's bound. The bound is a
// limit: what does not fit in the release timeout ends after Close
// returned (and, once the go-redis client is closed, cannot release what
// it was granted): calls queued for a pool whose connections are all
// taken, a server slower than that, and a call whose acquire is already
// sent (a waiter's re-check, a candidate's campaign) to a server that
// stopped answering, which ends when that request's own limit passes (its
// TTL less the drift, or its budget if sooner): go-redis ends a read at a
// deadline, not on cancellation.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	// Everything Close waits for, it waits for until the release timeout
	// from now.
	until := time.Now().Add(c.releaseTimeout)
	if !c.quiet {
		// With an Observer, Close may run in one: listed, so that no
		// Close waits for the calls it holds up (see blocked).
		defer c.closing(goid())()
	}
	c.grantMu.Lock()
	if c.closed.Load() {
		// Closed already (another part of the service, or an Observer):
		// this Close returns when the first does, so that whoever closes
		// the go-redis client after it finds the same state. Bounded by
		// the first's wait: a Close called from an Observer that the
		// first waits for still returns.
		first := c.closeUntil
		c.grantMu.Unlock()
		t := time.NewTimer(time.Until(first))
		defer t.Stop()
		select {
		case <-c.closeDone:
		case <-t.C:
		}
		return nil
	}
	c.closeUntil = until
	c.closed.Store(true)
	c.grantMu.Unlock()
	defer close(c.closeDone)
	abandoned := c.hub.close()
	c.grantMu.Lock()
	c.grantShut = true
	var grants []*call
	for a := range c.granting {
		a.gate = gateAbandoned
		grants = append(grants, a)
	}
	c.granting = nil
	c.grantMu.Unlock()
	sent := make([]abandonedRelease, len(abandoned)+len(grants))
	for i, a := range grants {
		// A call granted a lease but not in its function yet: it will
		// not enter (call.enter), and its lease is released now, as an
		// abandoned waiter's place is, not by the call after Close
		// returned.
		x := &sent[len(abandoned)+i]
		x.done = make(chan struct{})
		if l := a.keptL; l != nil {
			// A kept lease the call took: released as Close releases
			// the kept leases not in use (with their hold-min).
			go func() {
				defer close(x.done)
				c.releaseKept(l, time.Time{}, nil)
			}()
			continue
		}
		tomb := "1"
		if a.unbounded {
			tomb = "l"
		}
		x.start(c, &a.k, &a.tomb, &a.id, &a.member, tomb)
	}
	for i, w := range abandoned {
		// The place of a waiter that Close ended (and a lease a release
		// may have handed it meanwhile) is given up now, not by the
		// waiter's own call after Close returned: the service may close
		// its go-redis client right after Close, and the handover would
		// then hold the key for the waiter's full TTL.
		x := &sent[i]
		x.done = make(chan struct{})
		tomb := w.k.tomb + w.id
		x.start(c, w.k, &tomb, &w.id, &w.member, "1")
	}
	c.releaseAllKept(until)
	// Close returns once each of those releases was answered, or written
	// to a connection (the server carries it out even if the go-redis
	// client is closed next; a silent server does not hold Close up for
	// the reply), within the release timeout.
	for i := range sent {
		x := &sent[i]
		for (x.r == nil || x.r.hold.writes.Load() == 0) && time.Now().Before(until) {
			select {
			case <-x.done:
			case <-time.After(100 * time.Microsecond):
				continue
			}
			break
		}
	}
	// The calls outside their function go on until they end: a call
	// whose acquire is on its way (its grant, if any, is released by the
	// call once answered: it will not enter), one deciding whether to keep
	// its lease, one releasing. Close waits for them within the same
	// bound, so that the go-redis client may be closed once Close returned
	// and no call is in its function (a Close called from an Observer does
	// not wait for a call whose Observer callback runs on this goroutine:
	// see obsRuns).
	for c.unsettled.Load() > c.blocked() && time.Now().Before(until) {
		time.Sleep(200 * time.Microsecond)
	}
	// Calls still in their function keep their leases, renewed (through
	// askNodes too): the last of them closes askNodes (leftRun).
	if c.running.Load() == 0 {
		c.closeAskNodes()
	}
	return nil
}

// closeAskNodes closes the Client's own ASK-target clients.
func (c *Client) closeAskNodes() {
	c.askMu.Lock()
	for addr, n := range c.askNodes {
		_ = n.Close()
		delete(c.askNodes, addr)
	}
	c.askMu.Unlock()
}

// leftRun is run's last step: once the Client is closed, the last call
// to leave closes askNodes (Close left them to the calls still running).
func (c *Client) leftRun() {
	if c.running.Add(-1) == 0 && c.closed.Load() {
		c.closeAskNodes()
	}
}

// abandonedRelease is Close's release of an abandoned waiter's place or
// of a grant it took from a call.
type abandonedRelease struct {
	r    *relArgs
	done chan struct{}
}

// start sends the release of identity id (queue member member) on a
// goroutine, within the release timeout; done closes when it is answered.
func (x *abandonedRelease) start(c *Client, k *keys, tomb, id, member *string, tombVal string) {
	x.r = new(relArgs)
	go func() {
		defer close(x.done)
		ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
		defer cancel()
		_, _ = c.releaseWith(ctx, x.r, k, tomb, id, member, 0, tombVal)
	}()
}

// Redis returns the client given to New. Tests and adapters use it to
// inspect lease keys.
func (c *Client) Redis() redis.UniversalClient { return c.user }

// reloadTopology asks a Cluster client to reload the slot map (after a
// redirect or a connection error: a node may have failed or a slot moved).
func (c *Client) reloadTopology() {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// mayReload reloads a Cluster client's slot map after err, a request's,
// when it may come from a node that failed or no longer serves the slot
// (mayHaveMoved): a request that timed out on a hung master, whose
// replica took over, would otherwise go on to it until go-redis reloads
// by itself, once a minute. Every path that sends a request to a key's
// node calls it, reads included (TestAdversary67_ClusterHungMasterKeysGrantedAfterFailover).
func (c *Client) mayReload(err error) {
	if mayHaveMoved(err) {
		c.reloadTopology()
	}
}

// askTarget returns the Cluster master an ASK redirect (err) names, or nil.
func (c *Client) askTarget(ctx context.Context, err error) *redis.Client {
	cc, ok := c.rdb.(*redis.ClusterClient)
	f := strings.Fields(err.Error())
	if !ok || len(f) != 3 || f[0] != "ASK" {
		return nil
	}
	var (
		mu     sync.Mutex
		target *redis.Client
	)
	_ = cc.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		if node.Options().Addr == f[2] {
			mu.Lock()
			target = node
			mu.Unlock()
		}
		return nil
	})
	if target == nil {
		target = c.askNode(cc, f[2])
	}
	return target
}

// askNode returns a client of the Client's own for the Cluster master at
// addr, which an ASK named but the slot map does not list: a master just
// added to the cluster that a migration is moving slots onto (a master
// without slots is in no CLUSTER SLOTS answer, so go-redis's map of
// masters lacks it, and the node go-redis makes to follow an ASK itself
// is closed at its next reload of the map). WithReplicas sends renewals
// and WAIT there on one connection, so it needs a client for that node
// (TestAdversary33_ReplicatedRenewalsDuringMigrationToNewMaster). It is
// made from the Cluster client's options (through its NewClient when
// set), as go-redis makes its node clients; hooks added to the Cluster
// client, or to its nodes by OnNewNode, do not run on it.
func (c *Client) askNode(cc *redis.ClusterClient, addr string) *redis.Client {
	c.askMu.Lock()
	defer c.askMu.Unlock()
	if c.closed.Load() && c.running.Load() == 0 {
		return nil // closed, and no call left whose renewals need it
	}
	if n := c.askNodes[addr]; n != nil {
		return n
	}
	o := cc.Options()
	opt := &redis.Options{
		Addr:                         addr,
		ClientName:                   o.ClientName,
		Dialer:                       o.Dialer,
		OnConnect:                    o.OnConnect,
		Protocol:                     o.Protocol,
		Username:                     o.Username,
		Password:                     o.Password,
		CredentialsProvider:          o.CredentialsProvider,
		CredentialsProviderContext:   o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		MaxRetries:                   o.MaxRetries,
		MinRetryBackoff:              o.MinRetryBackoff,
		MaxRetryBackoff:              o.MaxRetryBackoff,
		DialTimeout:                  o.DialTimeout,
		ReadTimeout:                  o.ReadTimeout,
		WriteTimeout:                 o.WriteTimeout,
		ContextTimeoutEnabled:        o.ContextTimeoutEnabled,
		PoolFIFO:                     o.PoolFIFO,
		PoolSize:                     o.PoolSize,
		PoolTimeout:                  o.PoolTimeout,
		ConnMaxIdleTime:              o.ConnMaxIdleTime,
		ConnMaxLifetime:              o.ConnMaxLifetime,
		TLSConfig:                    o.TLSConfig,
		DisableIdentity:              o.DisableIdentity,
		IdentitySuffix:               o.IdentitySuffix,
		UnstableResp3:                o.UnstableResp3,
		// go-redis v9.22.0 would otherwise look addr's host up in DNS as
		// it makes the client (for maintenance notifications), for up to
		// 2 s whatever the renewal's deadline, holding askMu: a Cluster
		// that announces host names with a resolver that did not answer
		// would hold renewals that long (TestAskNodeMakesNoLookup). This
		// client only carries renewals and WAIT on one connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled, EndpointType: maintnotifications.EndpointTypeNone},
	}
	var n *redis.Client
	if o.NewClient != nil {
		n = o.NewClient(opt)
	} else {
		n = redis.NewClient(opt)
	}
	if c.askNodes == nil {
		c.askNodes = map[string]*redis.Client{}
	}
	c.askNodes[addr] = n
	return n
}

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
