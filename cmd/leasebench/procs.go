package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Worker mode: cmd/leasebench starts itself once per worker for 2c.
var (
	workerKind = flag.Int("worker-kind", -1, "internal (2c): run as one worker process of this library (index)")
	workerAddr = flag.String("worker-addr", "", "internal (2c): redis-server address")
	workerKey  = flag.String("worker-key", "", "internal (2c): the contended key")
	workerIdx  = flag.Int("worker-index", 0, "internal (2c): this worker's place among the workers")
)

// osKinds are the rows of 2c: the libraries of contendedKinds, then the
// floor of any handover between processes that a server notification
// starts (see relay).
func osKinds() []kind {
	return append(contendedKinds(), kind{"floor: pub/sub relay (no lock)", newRelay})
}

// 2c. Contended across operating-system processes: as 2b, but each worker
// is a process of its own (this program, started again in worker mode),
// with its own go-redis client, library instance and Go scheduler. A
// handover then wakes another process, as it would in production; in 2b
// all workers share one Go runtime, whose scheduler sees both ends. The
// last row is no lock but the floor under a fair handover (see relay).
func contendedOSProcesses(addr string, kinds []kind) error {
	fmt.Printf("## 2c. Contended across OS processes: %d worker processes × %d loops × %v hold on one key\n\n", *workers, *loops, *hold)
	fmt.Println("| library | wall | wall / raw | handoffs to another worker | handoff gap p50 | mean | p99 | max wait | commands/lock | p99 wait | workers' CPU/lock | server CPU/lock |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	var rawWall time.Duration
	for i, k := range kinds {
		r, err := runWorkerProcesses(self, addr, i, fmt.Sprintf("os:%d", i), stats)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		if i == 0 {
			rawWall = r.wall
		}
		n := time.Duration(len(r.grants))
		contendedRow(k.name, r.grants, r.wall, rawWall, r.cmds, us(r.cpu/n), us(r.serverCPU/n))
	}
	fmt.Println()
	return nil
}

// workersRun is what the workers of one library reported.
type workersRun struct {
	grants    []grant
	wall      time.Duration
	cmds      int64
	cpu       time.Duration // the workers' CPU time (user + system) over their loops
	serverCPU time.Duration // redis-server's (INFO cpu) from "go" to the last report
}

// runWorkerProcesses starts the workers of library kind, lets them go at
// once when all are connected, and collects their grants. Wall time is
// from the first ask to the last release, by the machine's clock (the
// processes share it). stats reads the server's CPU time.
func runWorkerProcesses(self, addr string, kind int, key string, stats *redis.Client) (workersRun, error) {
	var r workersRun
	type proc struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		out   *bufio.Scanner
		lines []string
	}
	procs := make([]*proc, *workers)
	kill := func() {
		for _, p := range procs {
			if p != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}
	for w := range procs {
		cmd := exec.Command(self, "-worker-kind", strconv.Itoa(kind), "-worker-addr", addr, "-worker-key", key,
			"-worker-index", strconv.Itoa(w), "-workers", strconv.Itoa(*workers),
			"-loops", strconv.Itoa(*loops), "-hold", hold.String())
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			kill()
			return r, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			kill()
			return r, err
		}
		if err := cmd.Start(); err != nil {
			kill()
			return r, err
		}
		p := &proc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
		procs[w] = p
	}
	for w, p := range procs {
		if !p.out.Scan() || p.out.Text() != "ready" {
			kill()
			return r, fmt.Errorf("worker %d did not start: %v", w, p.out.Err())
		}
	}
	cpu0, err := serverCPU(stats)
	if err != nil {
		kill()
		return r, err
	}
	for _, p := range procs {
		_, _ = io.WriteString(p.in, "go\n")
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.out.Scan() {
				p.lines = append(p.lines, p.out.Text())
			}
		}()
	}
	wg.Wait()
	cpu1, err := serverCPU(stats)
	if err != nil {
		kill()
		return r, err
	}
	r.serverCPU = cpu1 - cpu0
	var first, last time.Time
	for w, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			kill()
			return r, fmt.Errorf("worker %d: %w", w, err)
		}
		for _, l := range p.lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 2 && f[0] == "cmds":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				r.cmds += n
			case len(f) == 2 && f[0] == "cpu":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				r.cpu += time.Duration(n)
			case len(f) == 4 && f[0] == "g":
				var t [3]time.Time
				for j := range t {
					ns, _ := strconv.ParseInt(f[j+1], 10, 64)
					t[j] = time.Unix(0, ns)
				}
				g := grant{worker: w, asked: t[0], got: t[1], rel: t[2]}
				if first.IsZero() || g.asked.Before(first) {
					first = g.asked
				}
				if g.rel.After(last) {
					last = g.rel
				}
				r.grants = append(r.grants, g)
			default:
				return r, fmt.Errorf("worker %d: unexpected output %q", w, l)
			}
		}
	}
	if len(r.grants) != *workers**loops {
		return r, fmt.Errorf("%d grants reported, want %d", len(r.grants), *workers**loops)
	}
	r.wall = last.Sub(first)
	return r, nil
}

// serverCPU is the CPU time redis-server has used (user + system, all
// its threads), from INFO cpu.
func serverCPU(rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, l := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || name != "used_cpu_sys" && name != "used_cpu_user" {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", name, err)
		}
		total += time.Duration(s * float64(time.Second))
	}
	return total, nil
}

// processCPU is this process's CPU time (user + system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// workerMain is one worker process of 2c: it connects, says "ready",
// waits for "go" on stdin, takes the lock loops times, and prints its
// grants ("g asked got released" in Unix nanoseconds) and the commands it
// sent.
func workerMain() error {
	kinds := osKinds()
	if *workerKind >= len(kinds) {
		return fmt.Errorf("no library %d", *workerKind)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *workerAddr, ContextTimeoutEnabled: true, PoolSize: 4})
	defer rdb.Close()
	rdb.AddHook(sent)
	l, closeFn := kinds[*workerKind].make(rdb)
	defer closeFn()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("no start signal: %q %v", line, err)
	}
	if dir := os.Getenv("LEASEBENCH_WORKER_CPUPROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d-%d.pprof", *workerKind, *workerIdx)))
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	t0, cpu0 := sent.n.Load(), processCPU()
	out := make([]grant, 0, *loops)
	for range *loops {
		g, err := holdOnce(l, *workerKey)
		if err != nil {
			return err
		}
		out = append(out, g)
	}
	cmds, cpu := sent.n.Load()-t0, processCPU()-cpu0
	w := bufio.NewWriter(os.Stdout)
	for _, g := range out {
		fmt.Fprintf(w, "g %d %d %d\n", g.asked.UnixNano(), g.got.UnixNano(), g.rel.UnixNano())
	}
	fmt.Fprintf(w, "cmds %d\ncpu %d\n", cmds, cpu)
	return w.Flush()
}

// relay is not a lock: it is the floor under any fair handover between
// processes that a message from the server starts, as leasegen's does. The
// workers pass a token around a ring by PUBLISH: worker i waits for its
// channel's message, runs fn, and publishes to worker i+1's channel. No
// script runs and no acquire or release is sent; what is left of a
// handover is the notification itself: a publish, the server's delivery,
// and the wake of a process that sat idle through the hold, with one hop
// from go-redis's receiving goroutine to the caller's (as in leasegen's
// hub).
type relay struct {
	rdb   *redis.Client
	ch    <-chan *redis.Message
	next  string
	token bool // worker 0 starts with it
}

func newRelay(rdb *redis.Client) (locker, func()) {
	ctx := context.Background()
	own := func(w int) string { return fmt.Sprintf("relay:%s:%d", *workerKey, w) }
	sub := rdb.Subscribe(ctx, own(*workerIdx))
	if _, err := sub.Receive(ctx); err != nil { // subscribed before "ready"
		panic(err)
	}
	r := &relay{rdb: rdb, ch: sub.Channel(), next: own((*workerIdx + 1) % *workers), token: *workerIdx == 0}
	return r, func() { _ = sub.Close() }
}

func (*relay) name() string   { return "pub/sub relay" }
func (*relay) config() string { return "a token passed around the workers by PUBLISH" }

func (r *relay) with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error {
	if !r.token {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-r.ch:
		case <-t.C:
			return errors.New("relay: no token")
		}
	}
	r.token = false
	fn()
	return r.rdb.Publish(ctx, r.next, "t").Err()
}
