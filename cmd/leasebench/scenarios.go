package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
	"github.com/leasegen/leasegen/runtime/lease"
)

// 1. Uncontended acquire+release. Latency cycles alternate library by
// library, one cycle each, so that every library sees the same machine;
// allocations and round trips are counted in a separate pass per library.
func uncontended(rdb *redis.Client, libs []locker) error {
	ctx := context.Background()
	lat := make([][]time.Duration, len(libs))
	order := make([]int, len(libs))
	for i := range order {
		order[i] = i
	}
	for range *rounds * *cycles {
		// A new random order every cycle: a library's place in the
		// rotation (who ran just before it, whether the scheduler had a
		// thread spinning) must not become part of its time.
		mrand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			l := libs[i]
			t := time.Now()
			if err := l.with(ctx, fmt.Sprintf("u:%d", i), 10*time.Second, 0, func() {}); err != nil {
				return fmt.Errorf("%s: %w", l.name(), err)
			}
			lat[i] = append(lat[i], time.Since(t))
		}
	}
	floor := percentile(lat[0], 0.5)
	fmt.Printf("## 1. Uncontended acquire + release\n\n%d cycles per library, library by library in a new random order every cycle.\n\n", *rounds**cycles)
	fmt.Println("| library | p50 | p99 | p50 / raw | allocs/op | round trips/cycle | server calls/cycle |")
	fmt.Println("|---|---|---|---|---|---|---|")
	var ms runtime.MemStats
	const n = 500
	for i, l := range libs {
		c0, t0 := commands(rdb), sent.n.Load()
		runtime.ReadMemStats(&ms)
		m0 := ms.Mallocs
		for range n {
			if err := l.with(ctx, fmt.Sprintf("u:%d", i), 10*time.Second, 0, func() {}); err != nil {
				return err
			}
		}
		runtime.ReadMemStats(&ms)
		allocs := (ms.Mallocs - m0) / n
		trips := float64(sent.n.Load()-t0) / n
		calls := float64(commands(rdb)-c0-1) / n
		p50 := percentile(lat[i], 0.5)
		fmt.Printf("| %s | %s | %s | %.2f× | %d | %.2f | %.2f |\n", l.name(), us(p50), us(percentile(lat[i], 0.99)),
			float64(p50)/float64(floor), allocs, trips, calls)
	}
	fmt.Println()
	return nil
}

type grant struct {
	worker          int
	asked, got, rel time.Time
}

// holdOnce takes key with l (waiting up to 30s), holds it for hold, and
// releases it: one lock of the contended scenarios, timed.
func holdOnce(l locker, key string) (grant, error) {
	g := grant{asked: time.Now()}
	err := l.with(context.Background(), key, 10*time.Second, 30*time.Second, func() {
		g.got = time.Now()
		time.Sleep(*hold)
		g.rel = time.Now()
	})
	return g, err
}

// 2. Contended: workers × loops on one key, each holding for hold.
func contended(rdb *redis.Client, libs []locker) error {
	fmt.Printf("## 2. Contended: %d workers × %d loops × %v hold on one key\n\n", *workers, *loops, *hold)
	fmt.Println("| library | wall | locks/s | handoffs to another worker | handoff gap p50 | p99 | max wait | round trips/lock | waiting |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	gaps := map[string][]time.Duration{}
	var order []string
	for i, l := range libs {
		if _, ok := l.(leasegenWrapper); ok {
			continue // same runtime path as lease.Do (fence)
		}
		key := fmt.Sprintf("c:%d", i)
		var mu sync.Mutex
		var gs []grant
		t0 := sent.n.Load()
		start := time.Now()
		var wg sync.WaitGroup
		var firstErr error
		for w := range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range *loops {
					g, err := holdOnce(l, key)
					g.worker = w
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", l.name(), err)
					}
					gs = append(gs, g)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		if firstErr != nil {
			return firstErr
		}
		cmds := sent.n.Load() - t0
		sort.Slice(gs, func(a, b int) bool { return gs[a].got.Before(gs[b].got) })
		changed := 0
		var gap, waits []time.Duration
		for k, g := range gs {
			waits = append(waits, g.got.Sub(g.asked))
			if k == 0 {
				continue
			}
			if g.worker != gs[k-1].worker {
				changed++
			}
			gap = append(gap, g.got.Sub(gs[k-1].rel))
		}
		gaps[l.name()] = gap
		order = append(order, l.name())
		n := len(gs)
		fmt.Printf("| %s | %v | %.0f | %.0f%% | %s | %s | %v | %.2f | %s |\n", l.name(), wall.Round(time.Millisecond), float64(n)/wall.Seconds(),
			100*float64(changed)/float64(n-1), us(percentile(gap, 0.5)), us(percentile(gap, 0.99)), percentile(waits, 1).Round(time.Millisecond),
			float64(cmds)/float64(n), l.config())
	}
	fmt.Println()
	if *svgOut != "" {
		if err := os.WriteFile(*svgOut, gapSVG(order, gaps), 0o644); err != nil {
			return err
		}
		fmt.Printf("Handoff-gap distribution: [%s](%s).\n\n", *svgOut, *svgOut)
	}
	return nil
}

// kind builds one library's locker on a go-redis client of its own, as a
// separate process would have.
type kind struct {
	name string
	make func(rdb *redis.Client) (locker, func())
}

// 2b. Contended across processes: as 2, but every worker has its own
// go-redis client and its own library instance (its own lease.Client), as
// separate processes would. The in-process queue of a shared Client cannot
// help here; fairness and wake-ups must work across clients.
func contendedProcesses(addr string, kinds []kind) error {
	fmt.Printf("## 2b. Contended across processes: %d workers × %d loops × %v hold on one key, one client per worker\n\n", *workers, *loops, *hold)
	fmt.Println("| library | wall | wall / raw | handoffs to another worker | handoff gap p50 | mean | p99 | max wait | commands/lock | p99 wait |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	var rawWall time.Duration
	for i, k := range kinds {
		key := fmt.Sprintf("p:%d", i)
		lockers := make([]locker, *workers)
		var closers []func()
		for w := range lockers {
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 4})
			rdb.AddHook(sent)
			l, closeFn := k.make(rdb)
			lockers[w] = l
			closers = append(closers, func() { closeFn(); rdb.Close() })
		}
		var mu sync.Mutex
		var gs []grant
		var firstErr error
		t0 := sent.n.Load()
		start := time.Now()
		var wg sync.WaitGroup
		for w := range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range *loops {
					g, err := holdOnce(lockers[w], key)
					g.worker = w
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", k.name, err)
					}
					gs = append(gs, g)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		cmds := sent.n.Load() - t0
		for _, c := range closers {
			c()
		}
		if firstErr != nil {
			return firstErr
		}
		if i == 0 {
			rawWall = wall
		}
		contendedRow(k.name, gs, wall, rawWall, cmds)
	}
	fmt.Println()
	return nil
}

// contendedRow prints one library's row of a cross-process table (2b,
// 2c) from its grants; extra are more columns (2c's CPU times).
func contendedRow(name string, gs []grant, wall, rawWall time.Duration, cmds int64, extra ...string) {
	sort.Slice(gs, func(a, b int) bool { return gs[a].got.Before(gs[b].got) })
	changed := 0
	var waits, gap []time.Duration
	var gapSum time.Duration
	for j, g := range gs {
		waits = append(waits, g.got.Sub(g.asked))
		if j == 0 {
			continue
		}
		if g.worker != gs[j-1].worker {
			changed++
		}
		d := g.got.Sub(gs[j-1].rel)
		gap = append(gap, d)
		gapSum += d
	}
	n := len(gs)
	fmt.Printf("| %s | %v | %.2f× | %.0f%% | %s | %s | %s | %v | %.2f | %v |", name, wall.Round(time.Millisecond), float64(wall)/float64(rawWall),
		100*float64(changed)/float64(n-1), us(percentile(gap, 0.5)), us(gapSum/time.Duration(len(gap))), us(percentile(gap, 0.99)),
		percentile(waits, 1).Round(time.Millisecond), float64(cmds)/float64(n), percentile(waits, 0.99).Round(time.Millisecond))
	for _, e := range extra {
		fmt.Printf(" %s |", e)
	}
	fmt.Println()
}

// 5. Kept leases: a process calling one key over and over keeps its lease
// between calls (Spec.Keep); another process that wants the key waits at
// most for the call in flight plus a couple of round trips.
func keptLeases(addr string) error {
	const n = 20000
	ctx := context.Background()
	mk := func() (*redis.Client, *lease.Client) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		rdb.AddHook(sent)
		c, _ := lease.New(rdb)
		return rdb, c
	}
	rdbA, a := mk()
	defer rdbA.Close()
	defer a.Close()
	rdbB, b := mk()
	defer rdbB.Close()
	defer b.Close()
	keep := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Keep: time.Second, Fence: true}
	loop := func(spec lease.Spec, key string, calls int) (time.Duration, int64) {
		t0 := sent.n.Load()
		start := time.Now()
		for range calls {
			if err := a.Do(ctx, key, spec, func(context.Context) error { return nil }); err != nil {
				panic(err)
			}
		}
		return time.Since(start), sent.n.Load() - t0
	}
	plain := keep
	plain.Keep = 0
	// Alternate short runs so that all see the same machine.
	var keptWall, plainWall, rawWall time.Duration
	var keptCmds, plainCmds int64
	floor := raw{rdbA}
	for range 10 {
		w, c := loop(keep, "k:kept", n/10)
		keptWall, keptCmds = keptWall+w, keptCmds+c
		w, c = loop(plain, "k:plain", n/100)
		plainWall, plainCmds = plainWall+w*10, plainCmds+c*10
		start := time.Now()
		for range n / 100 {
			if err := floor.with(ctx, "k:raw", 10*time.Second, 0, func() {}); err != nil {
				return err
			}
		}
		rawWall += time.Since(start) * 10
	}
	// A second process wants the kept key while A keeps calling it with a
	// 1ms call. The target is a wait of at most the call in flight plus 2
	// round trips: each ask's wait is split into what remained of A's call
	// in flight and the rest, and a PING after the same idle time gives the
	// round trip to compare with (after 20ms idle this machine's round
	// trips are far slower than back to back).
	stop := make(chan struct{})
	done := make(chan struct{})
	call := keep
	var callsMu sync.Mutex
	var calls [][2]time.Time // A's fn start and end
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = a.Do(ctx, "k:shared", call, func(context.Context) error {
				t := time.Now()
				time.Sleep(time.Millisecond)
				callsMu.Lock()
				calls = append(calls, [2]time.Time{t, time.Now()})
				callsMu.Unlock()
				return nil
			})
		}
	}()
	time.Sleep(50 * time.Millisecond)
	type ask struct{ at, entered time.Time }
	var asks []ask
	var pings []time.Duration
	for range 20 {
		time.Sleep(20 * time.Millisecond)
		t := time.Now()
		if err := rdbB.Ping(ctx).Err(); err != nil {
			return err
		}
		pings = append(pings, time.Since(t))
		time.Sleep(20 * time.Millisecond)
		var k ask
		k.at = time.Now()
		err := b.Do(ctx, "k:shared", lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second, MinValidity: time.Second, Fence: true}, func(context.Context) error {
			k.entered = time.Now()
			return nil
		})
		if err != nil {
			return fmt.Errorf("kept: second process: %w", err)
		}
		asks = append(asks, k)
	}
	close(stop)
	<-done
	fmt.Printf("## 5. Kept leases (keep=1s, fence): one process calling one key %d times\n\n", n)
	fmt.Println("| | calls/s | µs/call | commands/call |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| lease.Do, keep=1s | %.0f | %.1f | %.4f |\n", float64(n)/keptWall.Seconds(), float64(keptWall.Microseconds())/n, float64(keptCmds)/n)
	fmt.Printf("| lease.Do, no keep | %.0f | %.1f | %.2f |\n", float64(n)/plainWall.Seconds(), float64(plainWall.Microseconds())/n, float64(plainCmds)/n)
	fmt.Printf("| raw SET NX + EVALSHA DEL | %.0f | %.1f | 2.00 |\n", float64(n)/rawWall.Seconds(), float64(rawWall.Microseconds())/n)
	// A's call in flight at each ask: the one that began before it and
	// ended after it (none if the ask fell between two calls).
	callsMu.Lock()
	var waits, beyond []time.Duration
	for _, k := range asks {
		waits = append(waits, k.entered.Sub(k.at))
		from := k.at
		for _, c := range calls {
			if !c[0].After(k.at) && c[1].After(k.at) {
				from = c[1]
			}
		}
		beyond = append(beyond, k.entered.Sub(from))
	}
	callsMu.Unlock()
	fmt.Printf("\nkept: %.0f× the raw floor's calls per second (%.0f× lease.Do without keep). A second process asking for the key while the first keeps calling it (1ms calls), over %d asks: wait p50 %v, max %v; after the end of the call in flight, p50 %v, max %v; a PING after the same 20ms idle took p50 %v, max %v.\n\n",
		float64(rawWall)/float64(keptWall), float64(plainWall)/float64(keptWall), len(asks),
		percentile(waits, 0.5).Round(10*time.Microsecond), percentile(waits, 1).Round(10*time.Microsecond),
		percentile(beyond, 0.5).Round(10*time.Microsecond), percentile(beyond, 1).Round(10*time.Microsecond),
		percentile(pings, 0.5).Round(10*time.Microsecond), percentile(pings, 1).Round(10*time.Microsecond))
	return nil
}

// 3. Many held leases: renewal cost.
func manyLeases(rdb *redis.Client, lc *lease.Client) error {
	const ttl = 3 * time.Second
	n := *many
	release := make(chan struct{})
	var held sync.WaitGroup
	var done sync.WaitGroup
	held.Add(n)
	errs := make(chan error, n)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			err := lc.Do(context.Background(), fmt.Sprintf("m:%d", i), lease.Spec{TTL: ttl, Deadline: time.Minute}, func(ctx context.Context) error {
				held.Done()
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	held.Wait()
	t0 := sent.n.Load()
	c0 := commands(rdb)
	cpu0 := cpuTime()
	periods := 3
	wall := time.Duration(periods) * ttl / 3 * 3
	time.Sleep(wall)
	cpu := cpuTime() - cpu0
	cmds := commands(rdb) - c0 - 1
	trips := sent.n.Load() - t0
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		return fmt.Errorf("many leases: %w", err)
	}
	renewals := float64(n) * float64(wall) / float64(ttl/3)
	fmt.Printf("## 3. %d leases held on one Client for %v (%d renewal periods of ttl/3 = %v)\n\n", n, wall, int(wall/(ttl/3)), ttl/3)
	fmt.Println("| renewals due | round trips | round trips per renewal | server calls | process CPU | share of one core |")
	fmt.Println("|---|---|---|---|---|---|")
	fmt.Printf("| %.0f | %d | %.3f | %d | %v | %.1f%% |\n\n", renewals, trips, float64(trips)/renewals, cmds, cpu.Round(time.Millisecond), 100*float64(cpu)/float64(wall))
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// 4. The generator against go vet on the same synthetic package.
func generator(repo string, n int) error {
	root, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "leasebench-gen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := gentest.Module(root, "example.com/big", dir); err != nil {
		return err
	}
	var src strings.Builder
	src.WriteString("package big\n\nimport (\n\t\"context\"\n\n\t\"github.com/leasegen/leasegen/runtime/lease\"\n)\n\ntype S struct{ c *lease.Client }\n\ntype Req struct{ ID int64; Name *string }\n\n")
	for i := range n {
		fmt.Fprintf(&src, "//lease:lock k%d:{id}:{req.ID} ttl=10s deadline=1m wait=2s fence\nfunc (s *S) f%d(ctx context.Context, id string, req *Req) (int, error) { return %d, nil }\n\n", i, i, i)
	}
	os.WriteFile(filepath.Join(dir, "big.go"), []byte(src.String()), 0o644)
	os.Setenv("GOFLAGS", "-mod=mod")
	var genT, vetT []time.Duration
	for i := range 6 { // alternate, changing the source so nothing is cached
		os.WriteFile(filepath.Join(dir, "touch.go"), []byte(fmt.Sprintf("package big\n\n// %d\n", i)), 0o644)
		t := time.Now()
		if _, err := gen.Generate(gen.Config{Dir: dir}); err != nil {
			return err
		}
		genT = append(genT, time.Since(t))
		os.WriteFile(filepath.Join(dir, "touch.go"), []byte(fmt.Sprintf("package big\n\n// v%d\n", i)), 0o644)
		cmd := exec.Command("go", "vet", ".")
		cmd.Dir = dir
		t = time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go vet: %v\n%s", err, out)
		}
		vetT = append(vetT, time.Since(t))
	}
	g, v := percentile(genT[1:], 0.5), percentile(vetT[1:], 0.5)
	fmt.Printf("## 4. Generator on %d annotated methods\n\n| tool | median wall time | ratio to go vet |\n|---|---|---|\n", n)
	fmt.Printf("| leasegen (in-process gen.Generate) | %v | %.2f× |\n| go vet | %v | 1.00× |\n\n", g.Round(time.Millisecond), float64(g)/float64(v), v.Round(time.Millisecond))
	return nil
}
