package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/leaseobs"
	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// config is what one run of the example talks to.
type config struct {
	redisURL string // "" for an embedded miniredis
	dbURL    string // "" for an in-memory ledger
	// prefix namespaces every Redis key of the run (lease.WithPrefix);
	// against REDIS_URL the run deletes its keys at the end.
	prefix string
	// metrics is the address to serve /metrics on while the run lasts
	// ("" for none).
	metrics string
	// beforeStop, if set, is called with the /metrics URL after the run,
	// before the metrics server stops: main waits there for Ctrl-C, tests
	// scrape.
	beforeStop func(url string) error
}

// defaultPrefix is unique per run, so runs never share leases or tokens.
func defaultPrefix() string { return fmt.Sprintf("leasegen-example-%d:", time.Now().UnixNano()) }

// counterTTL bounds how long a fence counter outlives its last grant here
// (the runtime's default is 24h): if a run is killed before it cleans up,
// its counters are gone a minute later. Tokens still increase across the
// counter's expiry (they are floored by the server's clock).
const counterTTL = time.Minute

func main() {
	cfg := config{redisURL: os.Getenv("REDIS_URL"), dbURL: os.Getenv("DATABASE_URL")}
	flag.StringVar(&cfg.prefix, "prefix", defaultPrefix(), "namespace of the run's Redis keys; with REDIS_URL they are deleted at the end")
	flag.StringVar(&cfg.metrics, "metrics", "", "serve the lease metrics at http://ADDR/metrics (Prometheus text format) while the run lasts, e.g. :9090")
	flag.Parse()
	if cfg.metrics != "" {
		cfg.beforeStop = func(url string) error { // keep serving for a scrape
			fmt.Printf("\nServing %s until interrupted (Ctrl-C).\n", url)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		}
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// cleanup deletes the keys under prefix: the run's lock, hold and fence
// counter keys. It scans with a pattern that matches the prefix literally.
func cleanup(ctx context.Context, rdb *redis.Client, prefix string) (int, error) {
	pattern := globEscaper.Replace(prefix) + "*"
	n := 0
	iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		k, err := rdb.Unlink(ctx, batch...).Result()
		n += int(k)
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// counter is the example's Observer: it counts events by kind.
type counter struct {
	mu sync.Mutex
	n  map[lease.EventKind]int
}

func (c *counter) Observe(e lease.Event) {
	c.mu.Lock()
	c.n[e.Kind]++
	c.mu.Unlock()
}

func (c *counter) get(k lease.EventKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// connect returns a client for REDIS_URL (redis:// or rediss://, with
// user:password), or for an in-process miniredis whose clock follows real
// time so that TTLs expire as on a real server.
func connect(url string) (*redis.Client, func(), error) {
	if url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		opt.ContextTimeoutEnabled = true // lease.New requires it: deadlines must reach socket reads
		rdb := redis.NewClient(opt)
		return rdb, func() { rdb.Close() }, rdb.Ping(context.Background()).Err()
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, nil, err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // drive miniredis's clock in real time
		defer close(done)
		last := time.Now()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				m.SetTime(now)
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { rdb.Close(); close(stop); <-done; m.Close() }, nil
}

// partitionedNode is a second lease client whose connections run through a
// fault proxy, so the demo can cut it off from Redis.
func partitionedNode(rdb *redis.Client, obs lease.Observer, prefix string) (*lease.Client, func(bool), func(), error) {
	p, err := leasetest.NewProxy(rdb.Options().Addr)
	if err != nil {
		return nil, nil, nil, err
	}
	o := *rdb.Options()
	o.Addr = p.Addr()
	o.PushNotificationProcessor = nil
	o.MaxRetries = 1
	arb := redis.NewClient(&o)
	c, err := lease.New(arb, lease.WithObserver(obs), lease.WithPrefix(prefix), lease.WithCounterTTL(counterTTL))
	if err != nil {
		return nil, nil, nil, err
	}
	cut := func(on bool) {
		if on {
			p.Set(leasetest.Blackhole)
		} else {
			p.Set(leasetest.Pass)
		}
	}
	return c, cut, func() { c.Close(); arb.Close(); p.Close() }, nil
}

func run(ctx context.Context, cfg config) (err error) {
	if cfg.prefix == "" {
		cfg.prefix = defaultPrefix()
	}
	rdb, closeRedis, err := connect(cfg.redisURL)
	if err != nil {
		return err
	}
	defer closeRedis()
	where := "embedded miniredis (set REDIS_URL=redis://host:6379 for a real server)"
	if cfg.redisURL != "" {
		where = "REDIS_URL"
		// Runs after the lease clients below are closed (defers run in
		// reverse), so nothing recreates a key once it is deleted.
		defer func() {
			n, cerr := cleanup(context.WithoutCancel(ctx), rdb, cfg.prefix)
			if cerr != nil {
				err = errors.Join(err, fmt.Errorf("deleting the keys under %q: %w", cfg.prefix, cerr))
				return
			}
			fmt.Printf("\nDeleted this run's %d Redis keys (prefix %q).\n", n, cfg.prefix)
		}()
	}
	fmt.Println("leasegen example: Redis =", where)

	obs := &counter{n: map[lease.EventKind]int{}}
	metrics := &leaseobs.Text{}
	if cfg.metrics != "" {
		url, stop, err := serveMetrics(cfg.metrics, metrics)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Println("metrics:", url)
		if cfg.beforeStop != nil {
			defer func() { err = errors.Join(err, cfg.beforeStop(url)) }()
		}
	}
	observers := lease.Observers{obs, metrics}
	leases, err := lease.New(rdb, lease.WithObserver(observers), lease.WithPrefix(cfg.prefix), lease.WithCounterTTL(counterTTL))
	if err != nil {
		return err
	}
	defer leases.Close()
	var ledger Ledger = newMemLedger()
	if cfg.dbURL != "" {
		pg, err := newPGLedger(ctx, cfg.dbURL, fmt.Sprintf("leasegen_example_%d", time.Now().UnixNano()))
		if err != nil {
			return err
		}
		defer pg.Close()
		ledger = pg
		fmt.Println("ledger: PostgreSQL (DATABASE_URL)")
	} else {
		fmt.Println("ledger: in memory (set DATABASE_URL=postgres://… for PostgreSQL)")
	}
	s := &Server{leases: leases, charged: map[string]Receipt{}, ledger: ledger}

	fmt.Println("\n1. Five workers race to charge order 42: one charges, the others wait and find it done.")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var tokens []lease.Token
	for w := 1; w <= 5; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.ChargeOrder(ctx, "42", 1999)
			if err != nil {
				fmt.Printf("  worker %d: %v\n", w, err)
				return
			}
			mu.Lock()
			tokens = append(tokens, r.Token)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if charged, err := s.ledger.Value(ctx, "orders:42"); err != nil || len(tokens) != 5 || charged != 1999 {
		return fmt.Errorf("order 42: %d receipts, ledger %d cents (%v); want 5 and one charge of 1999", len(tokens), charged, err)
	}
	fmt.Printf("  5 receipts, 1 charge of 1999 cents (fencing token %d)\n", tokens[0])

	fmt.Println("\n2. Three nodes run the settlement job at once: one runs it, two skip (busy=skip, hold-min=1s).")
	for node := 1; node <= 3; node++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Settle(ctx, node); err != nil {
				fmt.Printf("  node %d: %v\n", node, err)
			}
		}()
	}
	wg.Wait()

	fmt.Println("\n3. Node A is cut off from Redis mid-write (renewals fail); node B takes over.")
	nodeA, partition, closeA, err := partitionedNode(rdb, observers, cfg.prefix)
	if err != nil {
		return err
	}
	defer closeA()
	a := &Server{leases: nodeA, charged: map[string]Receipt{}, ledger: ledger}
	stalled := make(chan error, 1)
	go func() {
		stalled <- a.UpdateStock(ctx, "sku-7", -1, func() {
			partition(true)                     // A's connection to Redis goes dark
			time.Sleep(1200 * time.Millisecond) // and A's work ignores its cancelled ctx
		})
	}()
	time.Sleep(100 * time.Millisecond)
	if err := s.UpdateStock(ctx, "sku-7", -2, nil); err != nil { // B waits for A's lease to expire
		return fmt.Errorf("node B: %w", err)
	}
	fmt.Println("  node B: lease granted after A's expired; write accepted")
	err = <-stalled
	partition(false)
	if !errors.Is(err, fence.ErrStale) || !errors.Is(err, lease.ErrLost) {
		return fmt.Errorf("node A: got %v, want a lost lease and a rejected write", err)
	}
	fmt.Printf("  node A: context cancelled (lease lost); its late write was rejected:\n    %v\n", err)

	fmt.Println("\n4. A slow export with a 300ms budget is cut off.")
	start := time.Now()
	err = s.SlowExport(ctx, "2026-11-29")
	if !errors.Is(err, lease.ErrDeadline) {
		return fmt.Errorf("slow export: got %v, want ErrDeadline", err)
	}
	fmt.Printf("  returned after %v: %v\n", time.Since(start).Round(10*time.Millisecond), err)

	fmt.Println("\n5. Three nodes campaign for the settlement loop (//lease:leader): one runs it at a time; a shutdown hands it over at once.")
	if err := settleAsLeaders(ctx, rdb, observers, cfg.prefix, ledger, leases); err != nil {
		return err
	}

	printDashboard(os.Stdout, metrics)
	if v, _ := s.ledger.Value(ctx, "stock:sku-7"); v != -2 {
		return fmt.Errorf("stock:sku-7 = %d, want -2 (only node B's write)", v)
	}
	if obs.get(lease.EventStaleWriteRejected) != 1 {
		return fmt.Errorf("observer saw %d stale writes, want 1", obs.get(lease.EventStaleWriteRejected))
	}
	return nil
}

// settleAsLeaders runs step 5: three nodes (each with its own lease
// Client, as three processes would have) run SettleLoopAsLeader; each
// leader settles two batches and shuts down, handing the loop to the next.
// A watcher on the main Client follows the leaders. It checks that one
// node led at a time, in increasing terms, and that every batch was
// booked once.
func settleAsLeaders(ctx context.Context, rdb *redis.Client, obs lease.Observer, prefix string, ledger Ledger, watcher *lease.Client) error {
	const key = "jobs:settle-loop"
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var seen []string
	watched := make(chan struct{})
	// The watcher starts during the first term: the first leader is held in
	// its term (its next batch waits to be taken) until the watcher has
	// reported it, or it could be gone before the watcher looks.
	firstSeen := make(chan struct{})
	watch := func() { // from the first term on: each handover is reported
		defer close(watched)
		for l := range watcher.WatchLeader(wctx, key) {
			if l.Owner != "" && (len(seen) == 0 || seen[len(seen)-1] != l.Owner) {
				seen = append(seen, l.Owner)
				if len(seen) == 1 {
					close(firstSeen)
				}
			}
		}
	}
	batches := make(chan batch)
	type node struct {
		stop context.CancelFunc
		done chan error
	}
	nodes := map[string]*node{}
	defer func() { // every node stops and returns before its Client closes
		for _, n := range nodes {
			n.stop()
			<-n.done
		}
	}()
	for i := 1; i <= 3; i++ {
		c, err := lease.New(rdb, lease.WithObserver(obs), lease.WithPrefix(prefix), lease.WithCounterTTL(counterTTL))
		if err != nil {
			return err
		}
		defer c.Close()
		name := fmt.Sprintf("node-%d", i)
		s := &Server{leases: c, node: name, ledger: ledger, batches: batches}
		nctx, stop := context.WithCancel(ctx)
		n := &node{stop: stop, done: make(chan error, 1)}
		nodes[name] = n
		go func() { n.done <- s.SettleLoopAsLeader(nctx) }()
	}
	var last lease.Token
	var order []string
	stoppedAt := time.Time{}
	for stopped := 0; stopped < 3; {
		b := <-batches
		switch {
		case b.n == 1 && (len(order) > 0 && b.node == order[len(order)-1] || b.term <= last):
			return fmt.Errorf("settlement loop: %s started term %d after %v (term %d): want another node and a greater term", b.node, b.term, order, last)
		case b.n == 1 && stoppedAt.IsZero():
			fmt.Printf("  %s leads (term %d)\n", b.node, b.term)
			go watch()
			select {
			case <-firstSeen:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("the watcher did not report %s, the leader, within 10s", b.node)
			}
		case b.n == 1:
			fmt.Printf("  %s took over in %v (term %d)\n", b.node, round(time.Since(stoppedAt)), b.term)
		}
		if b.n == 1 {
			order, last = append(order, b.node), b.term
		}
		if b.n == 2 { // two batches settled: this node shuts down
			fmt.Printf("  %s: settled batches 1 and 2; shutting down\n", b.node)
			stoppedAt = time.Now()
			nodes[b.node].stop()
			if err := <-nodes[b.node].done; err != nil {
				return fmt.Errorf("%s: %w", b.node, err)
			}
			delete(nodes, b.node)
			stopped++
		}
	}
	if v, err := ledger.Value(ctx, "settlements"); err != nil || v != 6 {
		return fmt.Errorf("settlements = %d (%v), want 6: two batches under each of three leaders", v, err)
	}
	stopWatch()
	<-watched
	if !slices.Equal(seen, order) {
		return fmt.Errorf("the watcher saw leaders %v, want %v", seen, order)
	}
	fmt.Printf("  a watcher saw the leaders change: %s\n", strings.Join(seen, " -> "))
	return nil
}
