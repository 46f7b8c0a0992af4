// Command leasebench measures leasegen side by side with the libraries users
// would pick instead (go-redsync/redsync, bsm/redislock) and a raw floor, in
// one run, on one redis-server it starts itself, interleaving libraries round
// by round. It prints markdown tables with medians and ratios to the floor
// and writes an SVG of the contended handoff gaps.
//
//	cd cmd/leasebench && go run . [-svg handoff.svg]
//
// With LEASEBENCH_WORKER_CPUPROFILE=DIR, each worker process of 2c writes
// its CPU profile over its loops to DIR/worker-KIND-INDEX.pprof (KIND is
// the library's row, from 0), to be read together:
// go tool pprof -top leasebench DIR/worker-1-*.pprof.
//
// It is a separate module so that its peers stay out of leasegen's
// dependencies.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var (
	rounds  = flag.Int("rounds", 5, "uncontended: rounds (libraries interleaved in each)")
	cycles  = flag.Int("cycles", 2000, "uncontended: acquire+release cycles per library per round")
	workers = flag.Int("workers", 8, "contended: workers")
	loops   = flag.Int("loops", 200, "contended: locks per worker")
	hold    = flag.Duration("hold", time.Millisecond, "contended: time each lock is held")
	many    = flag.Int("leases", 10000, "many-leases: leases held at once on one Client")
	svgOut  = flag.String("svg", "handoff.svg", "where to write the contended handoff-gap chart (empty: none)")
	genN    = flag.Int("genfuncs", 1000, "generator: annotated functions in the synthetic package (0: skip)")
	only    = flag.String("run", "1,2,2b,2c,3,4,5", "scenarios to run, comma-separated")
	repo    = flag.String("repo", "../..", "generator: path of the leasegen repository")
)

func main() {
	flag.Parse()
	if *workerKind >= 0 {
		if err := workerMain(); err != nil {
			fmt.Fprintln(os.Stderr, "leasebench worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "leasebench:", err)
		os.Exit(1)
	}
}

func run() error {
	srv, err := leasetest.Start()
	if err != nil {
		return err
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
	defer rdb.Close()
	rdb.AddHook(sent) // counts the commands every library sends
	lc, err := lease.New(rdb)
	if err != nil {
		return err
	}
	defer lc.Close()
	ver, _ := rdb.Info(context.Background(), "server").Result()
	fmt.Printf("# leasebench\n\n%s, redis-server %s on 127.0.0.1, %d CPUs (GOMAXPROCS %d). Round trips are commands the client sent (a pipeline counts each command); server calls include the commands scripts run.\n\n",
		time.Now().Format("2006-01-02"), field(ver, "redis_version"), runtime.NumCPU(), runtime.GOMAXPROCS(0))

	libs := []locker{
		raw{rdb},
		leasegenDo{c: lc},
		leasegenDo{c: lc, fence: true},
		leasegenWrapper{&Service{leases: lc}},
		newRedsync(rdb),
		bsmLocker{redislock.New(rdb)},
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		want[strings.TrimSpace(s)] = true
	}
	if want["1"] {
		if err := uncontended(rdb, libs); err != nil {
			return err
		}
	}
	if want["2"] {
		if err := contended(rdb, libs); err != nil {
			return err
		}
	}
	kinds := contendedKinds()
	if want["2b"] {
		if err := contendedProcesses(srv.Addr(), kinds); err != nil {
			return err
		}
	}
	if want["2c"] {
		if err := contendedOSProcesses(srv.Addr(), osKinds()); err != nil {
			return err
		}
	}
	if want["3"] {
		if err := manyLeases(rdb, lc); err != nil {
			return err
		}
	}
	if want["5"] {
		if err := keptLeases(srv.Addr()); err != nil {
			return err
		}
	}
	if want["4"] && *genN > 0 {
		if err := generator(*repo, *genN); err != nil {
			return err
		}
	}
	return nil
}

// contendedKinds are the libraries of the cross-process scenarios (2b,
// 2c), each made on a client of its own.
func contendedKinds() []kind {
	return []kind{
		{"raw SET NX + EVALSHA DEL (poll 2ms)", func(r *redis.Client) (locker, func()) { return raw{r}, func() {} }},
		{"leasegen lease.Do", func(r *redis.Client) (locker, func()) {
			c, _ := lease.New(r)
			return leasegenDo{c: c}, func() { c.Close() }
		}},
		{"leasegen lease.Do (fence)", func(r *redis.Client) (locker, func()) {
			c, _ := lease.New(r)
			return leasegenDo{c: c, fence: true}, func() { c.Close() }
		}},
		{"go-redsync/redsync v4 (retry 2ms)", func(r *redis.Client) (locker, func()) { return newRedsync(r), func() {} }},
		{"bsm/redislock (LinearBackoff 2ms)", func(r *redis.Client) (locker, func()) { return bsmLocker{redislock.New(r)}, func() {} }},
	}
}

func field(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return "?"
}

// sentHook counts commands sent by the client.
type sentHook struct{ n atomic.Int64 }

var sent = &sentHook{}

func (h *sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// commands returns the server's total command count (INFO commandstats),
// less the INFO call itself.
func commands(rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0
	}
	var n int64
	for _, l := range strings.Split(info, "\n") {
		i := strings.Index(l, "calls=")
		if i < 0 {
			continue
		}
		v := l[i+len("calls="):]
		v = v[:strings.IndexByte(v, ',')]
		c, _ := strconv.ParseInt(v, 10, 64)
		n += c
	}
	return n
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
