package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/leasegen/leasegen/runtime/lease"
)

// cli is one run of leasectl: its streams and environment.
type cli struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string

	// connection flags, shared by every command
	url      string
	cluster  bool
	sentinel string // the master's name: the URL names a Sentinel
	prefix   string
	cacert   string
	timeout  time.Duration

	// command flags
	json            bool          // list, show, watch
	yes             bool          // release
	id              string        // release
	interval, limit time.Duration // watch

	// servicesUser: the command runs with a service's ACL user (check),
	// whose recipe has no +ping.
	servicesUser bool
}

// command is one subcommand.
type command struct {
	name, args, summary, detail string
	flags                       func(c *cli, fs *flag.FlagSet)
	run                         func(c *cli, fs *flag.FlagSet) error
}

// commands in the order of the usage text.
var commands = []*command{listCmd, showCmd, releaseCmd, watchCmd, checkCmd}

// usageError is a command line mistake: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

const defaultURL = "redis://localhost:6379"

// Exit status.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &cli{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 {
		c.usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return c.dispatch(append([]string{args[1], "-h"}, args[2:]...))
		}
		c.usage(stdout)
		return exitOK
	}
	return c.dispatch(args)
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `leasectl shows and operates the leases of leasegen's runtime in Redis.

Usage:
	leasectl <command> [flags] [arguments]

Commands:
`)
	for _, cmd := range commands {
		fmt.Fprintf(w, "	%-8s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
Every command connects with -url (default $REDIS_URL, else
redis://localhost:6379), -cluster or -sentinel, -prefix, -cacert and
-timeout.
Run 'leasectl <command> -h' for a command's flags.
Exit status: 0 done, 1 failed, 2 usage.
`)
}

func (c *cli) dispatch(args []string) int {
	var cmd *command
	for _, k := range commands {
		if k.name == args[0] {
			cmd = k
		}
	}
	if cmd == nil {
		fmt.Fprintf(c.stderr, "leasectl: unknown command %q\nRun 'leasectl -h' for usage.\n", args[0])
		return exitUsage
	}
	fs := flag.NewFlagSet("leasectl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: leasectl %s [flags] %s\n\n%s\n\nFlags:\n", cmd.name, cmd.args, cmd.detail)
		fs.PrintDefaults()
	}
	c.connFlags(fs)
	if cmd.flags != nil {
		cmd.flags(c, fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage // the flag package has printed the error and usage
	}
	err := cmd.run(c, fs)
	var uerr usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(c.stderr, "leasectl %s: %s\nRun 'leasectl %s -h' for usage.\n", cmd.name, uerr.msg, cmd.name)
		return exitUsage
	default:
		fmt.Fprintf(c.stderr, "leasectl %s: %v\n", cmd.name, err)
		return exitFailure
	}
}

func (c *cli) connFlags(fs *flag.FlagSet) {
	// No default shown in -h: $REDIS_URL may hold a password.
	fs.StringVar(&c.url, "url", "", "Redis URL: redis://[user:password@]host:port[/db], rediss:// for TLS\n(default $REDIS_URL, else "+defaultURL+")")
	fs.BoolVar(&c.cluster, "cluster", false, "the URL names a Redis Cluster node; more seed nodes as ?addr=host:port&addr=...")
	fs.StringVar(&c.sentinel, "sentinel", "", "the URL names a Sentinel, and this is the name of the master it monitors: commands go\nto the current primary, as the services' failover clients do (go-redis's failover URL:\nthe URL's user and password are the Sentinel's, the data nodes' are ?username=&password=;\nmore Sentinels as ?addr=host:port&addr=...)")
	fs.StringVar(&c.prefix, "prefix", "lease:", "the services' key prefix (lease.WithPrefix)")
	fs.StringVar(&c.cacert, "cacert", "", "PEM file of the CA to trust for rediss:// (default: the system's roots)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "bound on each request to Redis")
}

// connect returns a lease client on the deployment the flags name, after
// a PING; close it with the returned func.
func (c *cli) connect() (*lease.Client, func(), error) {
	if c.timeout <= 0 {
		return nil, nil, usagef("-timeout %v: need a positive duration", c.timeout)
	}
	if strings.ContainsAny(c.prefix, "{}") { // as lease.WithPrefix
		return nil, nil, usagef("-prefix %q: a prefix must not contain '{' or '}'", c.prefix)
	}
	if c.url == "" {
		c.url = c.getenv("REDIS_URL")
	}
	if c.url == "" {
		c.url = defaultURL
	}
	// Both kinds: ContextTimeoutEnabled (lease.New requires it), and
	// -cacert in the TLS configuration a rediss:// URL made.
	var (
		tlsConf   **tls.Config
		newClient func() redis.UniversalClient
		sentinels []string // the Sentinels' addresses (-sentinel)
	)
	switch {
	case c.cluster && c.sentinel != "":
		return nil, nil, usagef("-cluster and -sentinel: choose one")
	case c.sentinel != "":
		// A node's own URL would reach that node even after Sentinel
		// demoted it: for about 9s it is still a writable master, and a
		// release there says "released" while the new primary's holder
		// keeps the lease (TestAdversary75c_LeasectlReleaseOnSentinelNodes).
		o, err := redis.ParseFailoverURL(c.url)
		if err != nil {
			return nil, nil, c.urlError(err)
		}
		o.MasterName = c.sentinel
		o.ContextTimeoutEnabled = true
		if o.DialTimeout == 0 { // not set by the URL (dial_timeout=)
			// go-redis asks every Sentinel at once but goes on only when
			// each one has answered or failed, and a Sentinel that
			// accepts connections and never answers held that for the
			// dial timeout (5s by default) whatever the command's
			// deadline: with one such Sentinel first and two healthy ones,
			// every command failed at -timeout 5s
			// (TestAdversary78_FirstSentinelDownOthersHealthy). A share of
			// -timeout, as for a Cluster's slot map below.
			o.DialTimeout = max(min(c.timeout/4, time.Second), 100*time.Millisecond)
		}
		sentinels = o.SentinelAddrs
		tlsConf, newClient = &o.TLSConfig, func() redis.UniversalClient { return redis.NewFailoverClient(o) }
	case c.cluster:
		o, err := redis.ParseClusterURL(c.url)
		if err != nil {
			return nil, nil, c.urlError(err)
		}
		o.ContextTimeoutEnabled = true
		o.MaintNotificationsConfig = noMaintNotifications()
		tlsConf, newClient = &o.TLSConfig, func() redis.UniversalClient { return redis.NewClusterClient(o) }
	default:
		o, err := redis.ParseURL(c.url)
		if err != nil {
			return nil, nil, c.urlError(err)
		}
		o.ContextTimeoutEnabled = true
		o.MaintNotificationsConfig = noMaintNotifications()
		tlsConf, newClient = &o.TLSConfig, func() redis.UniversalClient { return redis.NewClient(o) }
	}
	if err := c.trust(tlsConf); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	rdb, err := newWithin(ctx, newClient)
	if err != nil {
		if c.ctx.Err() != nil { // Ctrl-C or SIGTERM, not -timeout
			return nil, nil, fmt.Errorf("interrupted while go-redis was making its client for %s: nothing done (%w)", redactURL(c.url), err)
		}
		if c.sentinel != "" {
			return nil, nil, fmt.Errorf(`cannot reach Redis at %s: no answer within -timeout %v: go-redis had not finished making its failover client, which looks up the name "FailoverClient" in DNS (go-redis v9.22.0): is the resolver answering? (%s) (%w)`, redactURL(c.url), c.timeout, dialSentinels(sentinels, sentinelDial), err)
		}
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: no answer within -timeout %v: go-redis had not finished making its client (%w)", redactURL(c.url), c.timeout, err)
	}
	// Every request is bounded by -timeout, retries included, also those
	// that watch makes under its own context, which lasts until -for or
	// Ctrl-C: a server that stops answering ends the watch with an error.
	rdb.AddHook(timeoutHook{d: c.timeout})
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// List scans each master through its own client. The Cluster
		// client asks its nodes for the slot map and the command table one
		// after the other, in random order, each with the request's whole
		// budget: a stuck node asked first would use it up, and a command
		// on a healthy master would fail. Those questions get a share of
		// it (a node that does not answer in time is skipped; a missing
		// command table only costs go-redis its routing hints).
		meta := timeoutHook{d: c.timeout, meta: min(c.timeout/4, time.Second)}
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(meta) })
	}
	// check runs with a service's user, which has no +ping (the
	// service recipe): its NOPERM says the server is there.
	if err := ping(ctx, rdb); err != nil && !(c.servicesUser && strings.HasPrefix(err.Error(), "NOPERM")) {
		closeSoon(rdb)
		if c.sentinel != "" && strings.Contains(err.Error(), "all sentinels") {
			// go-redis says so also when the Sentinels answered that they
			// know no master by that name.
			return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w (is %q a master the Sentinels monitor? SENTINEL MASTERS lists them)", redactURL(c.url), err, c.sentinel)
		}
		if c.sentinel != "" && errors.Is(err, context.DeadlineExceeded) {
			// go-redis retries a Sentinel that refuses or does not answer
			// until the deadline, and then says only that (as for a
			// primary that does not answer).
			return nil, nil, fmt.Errorf("cannot reach Redis at %s: no answer within -timeout %v from the Sentinels there or the primary of %q (%s) (%w)", redactURL(c.url), c.timeout, c.sentinel, dialSentinels(sentinels, sentinelDial), err)
		}
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", redactURL(c.url), err)
	}
	lc, err := lease.New(rdb, lease.WithPrefix(c.prefix))
	if err != nil {
		closeSoon(rdb)
		return nil, nil, err
	}
	return lc, func() { lc.Close(); closeSoon(rdb) }, nil
}

// newWithin returns newClient's client, or ctx's error if ctx ends
// first; a client made after that is closed when it is. go-redis v9.22.0
// resolves the client's address in DNS as it makes a client (to choose
// how maintenance notifications name endpoints), for up to 2 s whatever
// the caller's deadline, and a failover client's address is the name
// "FailoverClient": with a resolver that did not answer (several runs at
// once here), -timeout 1s took 3 s (TestAdversary79_EveryKindEveryCommand
// at -parallel 8, TestSlowResolverBounded). Plain and Cluster clients are
// told not to (noMaintNotifications); a failover client cannot be (v9.23.0
// no longer resolves when notifications are off, as a failover client's
// are), so its making is bounded by -timeout like the rest.
func newWithin(ctx context.Context, newClient func() redis.UniversalClient) (redis.UniversalClient, error) {
	made := make(chan redis.UniversalClient, 1)
	go func() { made <- newClient() }()
	select {
	case rdb := <-made:
		return rdb, nil
	case <-ctx.Done():
		go func() { (<-made).Close() }()
		return nil, ctx.Err()
	}
}

// noMaintNotifications turns maintenance notifications (Redis Enterprise's
// and Redis Cloud's MOVING and MIGRATING pushes) off, with an endpoint
// type given, so go-redis does not resolve the address as it makes the
// client (see newWithin): leasectl's commands are short, one connection
// each, and are retried by whoever runs them.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled, EndpointType: maintnotifications.EndpointTypeNone}
}

// sentinelDial bounds dialSentinels' connection attempts.
const sentinelDial = 100 * time.Millisecond

// dialSentinels opens a TCP connection to each Sentinel address, all at
// once, each within d, sends nothing, and says what each one did. go-redis
// retries a Sentinel whose port refuses connections until the deadline,
// and then reports it as one that did not answer: this tells a Sentinel
// that is not running there (or an -url that names no Sentinel) from one
// that is hung. Run only after a command failed: at most d more.
func dialSentinels(addrs []string, d time.Duration) string {
	if len(addrs) == 0 {
		return "no Sentinel address to dial again"
	}
	states := make([]string, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", addr, d)
			if err == nil {
				conn.Close()
			}
			states[i] = addr + dialState(err, d)
		})
	}
	wg.Wait()
	what := "Sentinel"
	if len(addrs) > 1 {
		what = "Sentinels"
	}
	return fmt.Sprintf("dialled again, the %s: %s", what, strings.Join(states, ", "))
}

// dialState says what a dial within d did, after the address: by the
// error's type, not its text, which holds the host name (a name with
// "refused" in it that did not resolve was a refused connection; round 79).
// A name that did not resolve, or whose lookup ran out of time, is no
// Sentinel's doing.
func dialState(err error, d time.Duration) string {
	var (
		dns *net.DNSError
		op  *net.OpError
		ne  net.Error
	)
	switch {
	case err == nil:
		return " took the connection"
	case errors.As(err, &dns) && dns.IsTimeout:
		return fmt.Sprintf(": the name's lookup did not end within %v", d)
	case errors.As(err, &dns):
		return ": the name did not resolve (" + dns.Err + ")"
	case errors.As(err, &op) && op.Err != nil && strings.Contains(op.Err.Error(), "refused"):
		// The connect call's own error, without the address: "connection
		// refused", Windows' "actively refused it".
		return " refused the connection"
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf(" did not take the connection within %v", d)
	case errors.As(err, &op) && op.Err != nil:
		return ": " + op.Err.Error() // the address is said already
	}
	return ": " + err.Error()
}

// closeWait is how long closeSoon waits for the client to close.
const closeWait = 100 * time.Millisecond

// closeSoon closes rdb, waiting for it at most closeWait: a command ends
// within its -timeout, and the process exits right after. With the
// Sentinels down, go-redis's failover client took 1.5 s (a refused port)
// and 3 s (a Sentinel that accepts and never answers) to close after a
// PING that had given up at its 2s deadline: -timeout 2s took 3.6 s and
// 5 s before this (TestConnectBoundedWithSentinelsDown).
func closeSoon(rdb redis.UniversalClient) {
	done := make(chan struct{})
	go func() {
		rdb.Close()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// ping checks that Redis answers. A Cluster answers when one of its seed
// nodes does: every seed is asked at once. The Cluster client would send
// a PING to a random master, asking its nodes one after the other with
// the whole budget each, and one stuck master must not keep the operator
// from the others' leases (a command on a key of the stuck one fails on
// its own).
func ping(ctx context.Context, rdb redis.UniversalClient) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Ping(ctx).Err()
	}
	o := cc.Options()
	if len(o.Addrs) == 0 {
		return errors.New("no node address")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the others stop once one answered
	errs := make(chan error, len(o.Addrs))
	for _, addr := range o.Addrs {
		go func() {
			n := redis.NewClient(&redis.Options{Addr: addr, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
				Protocol: o.Protocol, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 1,
				// go-redis would look a seed's name up for 2 s as it
				// makes the client, whatever ctx says (round 81).
				MaintNotificationsConfig: noMaintNotifications()})
			defer n.Close()
			errs <- n.Ping(ctx).Err()
		}()
	}
	var first error
	for range o.Addrs {
		err := <-errs
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// trust adds -cacert to a TLS configuration (rediss:// only).
func (c *cli) trust(conf **tls.Config) error {
	if c.cacert == "" {
		return nil
	}
	if *conf == nil {
		return usagef("-cacert needs a rediss:// URL")
	}
	pem, err := os.ReadFile(c.cacert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("-cacert %s: no PEM certificate in it", c.cacert)
	}
	(*conf).RootCAs = pool
	return nil
}

// urlError is the usage error for a -url that does not parse, without
// its password: net/url's errors quote the whole URL. The redacted URL is
// parsed again for a message that cannot hold the password; if it parses,
// the password itself was the problem.
func (c *cli) urlError(err error) error {
	red := redactURL(c.url)
	if red == c.url {
		return usagef("-url: %v", err)
	}
	if i := queryPasswordAt(c.url); i >= 0 {
		// go-redis names a query option it does not know, and a password
		// with an unencoded & or # becomes one: its message may quote
		// the password's rest (TestAdversary77_LeasectlRedactsUnencodedDelimiters).
		for _, piece := range strings.FieldsFunc(c.url[i:], func(r rune) bool { return r == '&' || r == '#' || r == '=' }) {
			if strings.Contains(err.Error(), piece) {
				return usagef("-url %s: go-redis does not take it (its message is not shown: it may quote the password; percent-encode %%, &, # and + in a password)", red)
			}
		}
	}
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return usagef("-url: %s", strings.ReplaceAll(err.Error(), c.url, red))
	}
	if _, perr := url.Parse(red); perr != nil {
		return usagef("-url: %v", perr)
	}
	return usagef("-url %s: the password does not parse in a URL: percent-encode characters such as %%, @, / and :", red)
}

// redactURL hides the passwords of a URL for messages: the user
// information's (net/url's Redacted when the URL parses: an "@" in the
// query is no user info; else everything before the last "@" but the user
// name), and a password in the query (go-redis's failover URL, -sentinel:
// password=, sentinel_password=, their names decoded as go-redis decodes
// them) with everything after it: a password with an unencoded & or #
// would otherwise show its rest (TestAdversary77_LeasectlRedactsEveryPath).
func redactURL(u string) string {
	u = redactUser(u)
	if i := queryPasswordAt(u); i >= 0 {
		return u[:i] + "xxxxx"
	}
	return u
}

// queryPasswordAt returns where the value of the first password= or
// sentinel_password= of u's query begins, or -1.
func queryPasswordAt(u string) int {
	q := strings.IndexByte(u, '?')
	if q < 0 {
		return -1
	}
	at := q + 1
	for _, pair := range strings.Split(u[q+1:], "&") {
		name, _, ok := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); ok && err == nil && (n == "password" || n == "sentinel_password") {
			return at + len(name) + 1
		}
		at += len(pair) + 1
	}
	return -1
}

// redactUser hides the password of a URL's user information.
func redactUser(u string) string {
	if p, err := url.Parse(u); err == nil && p.Opaque == "" {
		return p.Redacted()
	}
	// Not parsed by net/url, or opaque to it: without "//"
	// (redis:user:password@host:port) it has no user information to
	// redact, and kept the password in every message (round 79).
	scheme, rest, ok := strings.Cut(u, ":")
	slashes := ""
	if strings.HasPrefix(rest, "//") {
		slashes, rest = "//", rest[2:]
	}
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return u
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + ":" + slashes + user + ":xxxxx" + rest[at:]
}

// call bounds one request (or a short sequence) by -timeout.
func (c *cli) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.timeout)
}

// timeoutHook bounds each command and pipeline by d, and a Cluster's
// metadata questions (COMMAND, CLUSTER ...) by meta when set (see
// connect).
type timeoutHook struct{ d, meta time.Duration }

func (timeoutHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h timeoutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		d := h.d
		if name := cmd.Name(); h.meta > 0 && (name == "command" || name == "cluster") {
			d = h.meta
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (h timeoutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := context.WithTimeout(ctx, h.d)
		defer cancel()
		return next(ctx, cmds)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
