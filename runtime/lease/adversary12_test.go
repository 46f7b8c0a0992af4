package lease_test

// Adversarial tests, round 12 (adv12): cross-process waiting and handover
// (commit 74b79ac and before), with real redis-server processes and real
// separate OS processes. Worker processes are this test binary started
// again (init dispatches on ADV12_WORKER, before TestMain starts any
// server); each runs Do loops on one key and reports every call on stdout,
// timestamped by the wall clock (all processes share the machine's clock):
//
//	ENTER <proc> <g> <n> <token> <fenced 0|1> <unix ns>   (first thing in fn)
//	BAD <proc> <g> <n> <what>                              (the key did not hold fn's grant)
//	EXIT <proc> <g> <n> <unix ns> <lost 0|1>              (last thing in fn)
//	DONE <proc> <g> <n> <start ns> <end ns> <class> <msg>  (Do returned)
//	BYE <proc>
//
// The parent kills (SIGKILL), pauses (SIGSTOP/SIGCONT) and partitions
// (a sniffing proxy of its own) the workers, and checks the promises:
// no two fn bodies overlap unless one of them reports ErrLost, fenced
// tokens strictly increase in entry order, the token in fn is the key's,
// every call returns within Deadline + ε, and handovers are prompt.
// Run: go test -race -count=1 -run 'TestAdversary12_' ./runtime/lease

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/proc"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func init() {
	if os.Getenv("ADV12_WORKER") != "" {
		adv12Worker()
		os.Exit(0)
	}
}

// ------------------------------------------------------------ the worker

// adv12GSpec is one worker goroutine's loop: Do with this spec, count
// times (0: until told to stop), fn sleeping hold.
type adv12GSpec struct {
	spec  lease.Spec
	hold  time.Duration
	count int
}

// adv12ParseG parses "ttl=1s,wait=2s,deadline=3s,hold=5ms,fence=1,keep=0,holdmin=0,minval=0,count=0".
func adv12ParseG(s string) adv12GSpec {
	g := adv12GSpec{spec: lease.Spec{TTL: time.Second, Deadline: 3 * time.Second, Wait: 2 * time.Second}}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d, _ := time.ParseDuration(v)
		switch k {
		case "ttl":
			g.spec.TTL = d
		case "wait":
			g.spec.Wait = d
		case "deadline":
			g.spec.Deadline = d
		case "hold":
			g.hold = d
		case "fence":
			g.spec.Fence = v == "1"
		case "keep":
			g.spec.Keep = d
		case "holdmin":
			g.spec.HoldMin = d
		case "minval":
			g.spec.MinValidity = d
		case "count":
			g.count, _ = strconv.Atoi(v)
		}
	}
	return g
}

func adv12Worker() {
	name := os.Getenv("ADV12_NAME")
	key := os.Getenv("ADV12_KEY")
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...)
		outMu.Unlock()
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("ADV12_ADDR"), ContextTimeoutEnabled: true})
	direct := redis.NewClient(&redis.Options{Addr: os.Getenv("ADV12_DIRECT"), ContextTimeoutEnabled: true})
	recheck, _ := time.ParseDuration(os.Getenv("ADV12_RECHECK"))
	opts := []lease.Option{lease.WithObserver(lease.ObserverFunc(func(ev lease.Event) {
		if ev.Kind == lease.EventSubscriptionFailed {
			say("SUBFAIL %s - - %s", name, strings.ReplaceAll(ev.Err.Error(), "\n", " "))
		}
	}))}
	if recheck > 0 {
		opts = append(opts, lease.WithRecheck(recheck))
	}
	c, err := lease.New(rdb, opts...)
	if err != nil {
		say("BYE %s %v", name, err)
		os.Exit(1)
	}
	// Warm the command pool (scripts loaded) on a key of the worker's own.
	_ = c.Do(context.Background(), "warm-"+name, lease.Spec{TTL: time.Second, Deadline: 2 * time.Second, Fence: true}, func(context.Context) error { return nil })
	stopCtx, stop := context.WithCancel(context.Background())
	if os.Getenv("ADV12_WATCH") != "" {
		ch := c.WatchLeader(stopCtx, key)
		go func() {
			for range ch {
			}
		}()
	}
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if in.Text() == "stop" {
				break
			}
		}
		stop()
	}()
	lockKey := "lease:{" + key + "}:l"
	var wg sync.WaitGroup
	for gi, gs := range strings.Split(os.Getenv("ADV12_SPECS"), ";") {
		g := adv12ParseG(gs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; (g.count == 0 || n < g.count) && stopCtx.Err() == nil; n++ {
				start := time.Now()
				err := c.Do(context.Background(), key, g.spec, func(ctx context.Context) error {
					at := time.Now().UnixNano()
					l, _ := lease.FromContext(ctx)
					tok := l.Token()
					fenced := 0
					if g.spec.Fence {
						fenced = 1
					}
					say("ENTER %s %d %d %d %d %d", name, gi, n, tok, fenced, at)
					gctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
					v, gerr := direct.Get(gctx, lockKey).Result()
					cancel()
					// A read that failed (a pause of this process outlived its
					// timeout) proves nothing; a key found missing or holding
					// anything else does.
					if want := l.Owner() + ":" + strconv.FormatUint(uint64(tok), 10); (gerr == nil || gerr == redis.Nil) && v != want {
						say("BAD %s %d %d key=%q want=%q err=%v", name, gi, n, v, want, gerr)
					}
					if g.hold > 0 {
						t := time.NewTimer(g.hold)
						select {
						case <-t.C:
						case <-ctx.Done():
						}
						t.Stop()
					}
					lost := 0
					if errors.Is(context.Cause(ctx), lease.ErrLost) {
						lost = 1
					}
					say("EXIT %s %d %d %d %d", name, gi, n, time.Now().UnixNano(), lost)
					return nil
				})
				msg := ""
				if err != nil {
					msg = strings.ReplaceAll(err.Error(), "\n", " ")
				}
				say("DONE %s %d %d %d %d %s %s", name, gi, n, start.UnixNano(), time.Now().UnixNano(), outcomeOf(err), msg)
			}
		}()
	}
	wg.Wait()
	stop()
	c.Close()
	rdb.Close()
	direct.Close()
	say("BYE %s", name)
}

// ------------------------------------------------------------ the parent

// adv12Call is one Do call of a worker, as its stdout told.
type adv12Call struct {
	proc        string
	g, n        int
	tok         uint64
	fenced      bool
	enter, exit time.Time // fn (zero: not entered / not exited)
	start, end  time.Time // Do (end zero: no DONE)
	class, msg  string
	lostCtx     bool
	bad         string
}

func (c *adv12Call) lost() bool { return c.lostCtx || c.class == "lost" }

func (c *adv12Call) String() string {
	return fmt.Sprintf("%s/g%d/#%d tok %d (%s) fn %s–%s", c.proc, c.g, c.n, c.tok, c.class,
		c.enter.Format("05.000000"), c.exit.Format("05.000000"))
}

// adv12Proc is one worker process.
type adv12Proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	bye   chan struct{}

	mu      sync.Mutex
	inFn    int
	killed  time.Time
	stopped []([2]time.Time) // SIGSTOP..SIGCONT intervals
}

// adv12Run is the record of one experiment with workers on one key.
type adv12Run struct {
	t     *testing.T
	key   string
	addr  string // for the lease Client of workers (unless given per worker)
	dir   string // direct address for fn's checks
	mu    sync.Mutex
	calls map[string]*adv12Call
	procs []*adv12Proc
	event chan string // ENTER/DONE lines, for tests that wait on them
	seen  []string    // lines read from event that no waitEvent has matched yet

	subFails []string // SUBFAIL lines: a worker's subscription failed
}

func newAdv12Run(t *testing.T, srv *leasetest.Server, key string) *adv12Run {
	return &adv12Run{t: t, key: key, addr: srv.Addr(), dir: srv.Addr(), calls: map[string]*adv12Call{}, event: make(chan string, 4096)}
}

func (r *adv12Run) call(proc, g, n string) *adv12Call {
	id := proc + "/" + g + "/" + n
	c := r.calls[id]
	if c == nil {
		gi, _ := strconv.Atoi(g)
		ni, _ := strconv.Atoi(n)
		c = &adv12Call{proc: proc, g: gi, n: ni}
		r.calls[id] = c
	}
	return c
}

func nsTime(s string) time.Time {
	ns, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, ns)
}

// start starts worker name with goroutine specs (each "ttl=…,…") and
// lease traffic through addr ("" for the server's).
func (r *adv12Run) start(name, addr string, recheck time.Duration, watch bool, specs ...string) *adv12Proc {
	r.t.Helper()
	if addr == "" {
		addr = r.addr
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ADV12_WORKER=1", "ADV12_NAME="+name, "ADV12_KEY="+r.key,
		"ADV12_ADDR="+addr, "ADV12_DIRECT="+r.dir, "ADV12_RECHECK="+recheck.String(), "ADV12_SPECS="+strings.Join(specs, ";"))
	if watch {
		cmd.Env = append(cmd.Env, "ADV12_WATCH=1")
	}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	p := &adv12Proc{name: name, cmd: cmd, stdin: stdin, bye: make(chan struct{})}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	r.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		select {
		case <-p.bye:
		case <-time.After(8 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	})
	go func() {
		defer close(p.bye)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			r.mu.Lock()
			switch f[0] {
			case "ENTER":
				if len(f) == 7 {
					c := r.call(f[1], f[2], f[3])
					c.tok, _ = strconv.ParseUint(f[4], 10, 64)
					c.fenced = f[5] == "1"
					c.enter = nsTime(f[6])
					p.mu.Lock()
					p.inFn++
					p.mu.Unlock()
				}
			case "EXIT":
				if len(f) == 6 {
					c := r.call(f[1], f[2], f[3])
					c.exit = nsTime(f[4])
					c.lostCtx = f[5] == "1"
					p.mu.Lock()
					p.inFn--
					p.mu.Unlock()
				}
			case "BAD":
				c := r.call(f[1], f[2], f[3])
				c.bad = strings.Join(f[4:], " ")
			case "SUBFAIL":
				r.subFails = append(r.subFails, line)
			case "DONE":
				if len(f) >= 7 {
					c := r.call(f[1], f[2], f[3])
					c.start, c.end, c.class = nsTime(f[4]), nsTime(f[5]), f[6]
					c.msg = strings.Join(f[7:], " ")
				}
			}
			r.mu.Unlock()
			if f[0] == "ENTER" || f[0] == "DONE" {
				select {
				case r.event <- line:
				default:
				}
			}
		}
	}()
	return p
}

// stopAll asks every worker still alive to finish its loops and waits.
func (r *adv12Run) stopAll() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		fmt.Fprintln(p.stdin, "stop")
	}
	for _, p := range procs {
		select {
		case <-p.bye:
		case <-time.After(10 * time.Second):
			r.t.Errorf("worker %s did not finish within 10s of stop", p.name)
		}
	}
}

func (p *adv12Proc) kill() {
	p.mu.Lock()
	p.killed = time.Now()
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
}

func (p *adv12Proc) pause(d time.Duration) {
	from := time.Now()
	_ = proc.Stop(p.cmd.Process)
	time.Sleep(d)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.mu.Lock()
	p.stopped = append(p.stopped, [2]time.Time{from, time.Now()})
	p.mu.Unlock()
}

// waitEvent waits for a line starting with prefix (and containing sub).
func (r *adv12Run) waitEvent(prefix, sub string, within time.Duration) string {
	r.t.Helper()
	match := func(l string) bool { return strings.HasPrefix(l, prefix) && strings.Contains(l, sub) }
	// A line an earlier wait read past (two processes' events come in
	// either order) is kept for the wait it matches.
	for i, l := range r.seen {
		if match(l) {
			r.seen = slices.Delete(r.seen, i, i+1)
			return l
		}
	}
	deadline := time.After(within)
	for {
		select {
		case l := <-r.event:
			if match(l) {
				return l
			}
			r.seen = append(r.seen, l)
		case <-deadline:
			r.t.Fatalf("no %q line with %q within %v", prefix, sub, within)
			return ""
		}
	}
}

// adv12Verdict is what check found.
type adv12Verdict struct {
	calls                     []*adv12Call // entered, in entry order
	all                       []*adv12Call
	overlaps, disorder, bad   int
	late, odd                 int
	lostUnpaused              int
	maxLate                   time.Duration
	classes                   map[string]int
	gaps                      []time.Duration // release → next entry, with no pause or kill around
	gapOf                     map[time.Duration]string
	stoppedCalls, killedCalls int
	sameProcKeptRepeats       int
	enteredByProc             map[string]int
	maxGapExcused             time.Duration
	excusedCount              int
}

// check verifies the safety promises over every recorded call, and the
// budget of calls that no pause or kill touched (eps beyond Deadline).
// keepOK: equal tokens for consecutive entries of one process (a kept lease).
func (r *adv12Run) check(deadlineOf func(*adv12Call) time.Duration, eps time.Duration, keepOK bool) adv12Verdict {
	t := r.t
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	procs := map[string]*adv12Proc{}
	var stops [][2]time.Time
	var kills []time.Time
	for _, p := range r.procs {
		procs[p.name] = p
		p.mu.Lock()
		stops = append(stops, p.stopped...)
		if !p.killed.IsZero() {
			kills = append(kills, p.killed)
		}
		p.mu.Unlock()
	}
	v := adv12Verdict{classes: map[string]int{}, gapOf: map[time.Duration]string{}, enteredByProc: map[string]int{}}
	touched := func(c *adv12Call) (stopped, killed bool) {
		p := procs[c.proc]
		p.mu.Lock()
		defer p.mu.Unlock()
		end := c.end
		if end.IsZero() {
			end = time.Now()
		}
		for _, s := range p.stopped {
			if s[0].Before(end.Add(50*time.Millisecond)) && s[1].After(c.start.Add(-50*time.Millisecond)) || c.start.IsZero() {
				stopped = true
			}
		}
		return stopped, !p.killed.IsZero() && c.end.IsZero()
	}
	for _, c := range r.calls {
		v.all = append(v.all, c)
		stopped, killed := touched(c)
		if killed {
			v.killedCalls++
			if !c.enter.IsZero() && c.exit.IsZero() {
				c.exit = procs[c.proc].killed // it cannot have run after its process died
			}
		}
		if stopped {
			v.stoppedCalls++
		}
		if !c.enter.IsZero() {
			v.calls = append(v.calls, c)
			v.enteredByProc[c.proc]++
			if c.exit.IsZero() {
				// Still running at the check (or stopped): open interval.
				c.exit = time.Now()
			}
		}
		if c.end.IsZero() {
			continue
		}
		v.classes[c.class]++
		if stopped || killed {
			continue
		}
		if late := c.end.Sub(c.start) - deadlineOf(c); late > eps {
			v.late++
			t.Logf("late: %v returned %v after its Deadline (%v): %s", c, late.Round(time.Millisecond), deadlineOf(c), c.msg)
		} else if late > v.maxLate {
			v.maxLate = late
		}
		switch c.class {
		case "ok", "busy":
		case "lost":
			v.lostUnpaused++
			t.Logf("lost without a pause of its process: %v: %s", c, c.msg)
		default:
			v.odd++
			t.Logf("unexpected outcome: %v: %s", c, c.msg)
		}
	}
	sort.Slice(v.calls, func(i, j int) bool { return v.calls[i].enter.Before(v.calls[j].enter) })
	var lastTok *adv12Call
	for i, a := range v.calls {
		if a.bad != "" && !a.lost() {
			v.bad++
			t.Logf("fn's grant not the key's (not reported lost): %v: %s", a, a.bad)
		}
		for _, b := range v.calls[i+1:] {
			if !b.enter.Before(a.exit) {
				break
			}
			if !a.lost() && !b.lost() {
				v.overlaps++
				t.Logf("overlap, neither reported lost: %v and %v", a, b)
			}
		}
		if a.fenced && !a.lost() {
			if lastTok != nil && a.tok <= lastTok.tok {
				if keepOK && a.tok == lastTok.tok && a.proc == lastTok.proc {
					v.sameProcKeptRepeats++
				} else {
					v.disorder++
					t.Logf("token order: %v entered after %v", a, lastTok)
				}
			}
			lastTok = a
		}
	}
	// Handover gaps: from one fn's exit to the next entry, when no pause
	// happened from 200ms before the exit to the entry, nor a kill from
	// 1.3s before.
	for i := 1; i < len(v.calls); i++ {
		prev, next := v.calls[i-1], v.calls[i]
		if !next.enter.After(prev.exit) {
			continue
		}
		excused := false
		for _, s := range stops {
			if s[0].Before(next.enter) && s[1].After(prev.exit.Add(-200*time.Millisecond)) {
				excused = true
			}
		}
		for _, k := range kills {
			// A killed waiter's queue entry lives up to 2 re-checks +
			// 100ms after its last acquire: a release may hand it a claim
			// until then.
			if k.Before(next.enter) && k.After(prev.exit.Add(-1300*time.Millisecond)) {
				excused = true
			}
		}
		gap := next.enter.Sub(prev.exit)
		if excused {
			v.excusedCount++
			v.maxGapExcused = max(v.maxGapExcused, gap)
			continue
		}
		if gap > 300*time.Millisecond {
			var near []string
			for _, s := range stops {
				if s[1].After(prev.exit.Add(-3*time.Second)) && s[0].Before(next.enter) {
					near = append(near, fmt.Sprintf("stop %s–%s", s[0].Format("05.000"), s[1].Format("05.000")))
				}
			}
			for _, k := range kills {
				if k.After(prev.exit.Add(-3*time.Second)) && k.Before(next.enter) {
					near = append(near, "kill "+k.Format("05.000"))
				}
			}
			t.Logf("gap %v: %v -> %v; faults within 3s before: %v", gap.Round(time.Millisecond), prev, next, near)
		}
		v.gaps = append(v.gaps, gap)
		v.gapOf[gap] = fmt.Sprintf("%v -> %v", prev, next)
	}
	return v
}

func (v adv12Verdict) gapStats() (p50, p99, maxGap time.Duration, maxWhat string) {
	if len(v.gaps) == 0 {
		return
	}
	s := slices.Clone(v.gaps)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)], s[len(s)-1], v.gapOf[s[len(s)-1]]
}

// ------------------------------------------------ 1. the chaos soak

// adv12Holding returns a process of procs that is in fn, or nil.
func adv12Holding(procs []*adv12Proc) *adv12Proc {
	for _, p := range procs {
		p.mu.Lock()
		in := p.inFn > 0
		p.mu.Unlock()
		if in {
			return p
		}
	}
	return nil
}

// Six worker processes (two goroutines each: fenced and unfenced, TTLs
// 400ms–1s, one with HoldMin) contend on one key with Wait for 12s while
// the parent kills random workers, mostly waiting ones (SIGKILL; a new
// worker replaces each) and pauses random workers, holders included (SIGSTOP 100–900ms).
// Promises checked over every call: no two fn bodies overlap unless one
// reports ErrLost; fenced tokens strictly increase in entry order among
// calls not reported lost; the key holds fn's grant when fn starts; calls
// no pause or kill touched return ok or busy, within Deadline + 300ms; and
// a handover no pause or kill came near takes less than the claim
// (re-check + 100ms) plus slack.
func TestAdversary12_ChaosKillStopSoak(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	key := "adv12-chaos"
	r := newAdv12Run(t, srv, key)
	specs := []string{
		"ttl=1s,wait=2500ms,deadline=3s,hold=40ms,fence=1",
		"ttl=400ms,wait=2500ms,deadline=3s,hold=5ms,fence=0,minval=100ms",
	}
	specsHoldMin := []string{
		"ttl=600ms,wait=2500ms,deadline=3s,hold=5ms,fence=1,holdmin=40ms,minval=150ms",
		"ttl=1s,wait=2500ms,deadline=3s,hold=10ms,fence=0",
	}
	next := 0
	spawn := func() *adv12Proc {
		next++
		s := specs
		if next%3 == 0 {
			s = specsHoldMin
		}
		return r.start(fmt.Sprint("w", next), "", 0, next%4 == 1, s...)
	}
	live := []*adv12Proc{}
	for range 6 {
		live = append(live, spawn())
	}
	rng := rand.New(rand.NewPCG(12, uint64(time.Now().UnixNano())))
	end := time.Now().Add(2 * *soak)   // 6s unless -soak says otherwise
	time.Sleep(800 * time.Millisecond) // the workers start
	kills, pauses := 0, 0
	for time.Now().Before(end) {
		time.Sleep(time.Duration(150+rng.IntN(300)) * time.Millisecond)
		p := live[rng.IntN(len(live))]
		if rng.IntN(2) == 0 {
			// Mostly waiters (no fn running); one kill in four may hit a
			// holder (a dying holder: the key waits for its TTL).
			p.mu.Lock()
			waiting := p.inFn == 0
			p.mu.Unlock()
			if !waiting && rng.IntN(4) != 0 {
				continue
			}
			p.kill()
			kills++
			live = slices.DeleteFunc(live, func(q *adv12Proc) bool { return q == p })
			live = append(live, spawn())
		} else {
			// Half the pauses go to a holder (a process in fn), when one
			// is found: its lease may run out while it is stopped.
			if rng.IntN(2) == 0 {
				for range 50 {
					if q := adv12Holding(live); q != nil {
						p = q
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			pauses++
			p.pause(time.Duration(100+rng.IntN(800)) * time.Millisecond)
		}
	}
	r.stopAll()
	v := r.check(func(*adv12Call) time.Duration { return 3 * time.Second }, 300*time.Millisecond, false)
	p50, p99, mx, what := v.gapStats()
	t.Logf("%d kills, %d pauses; %d calls, %d entered (%v); outcomes %v; calls touched by a pause %d, by a kill %d; losses without a pause %d; max lateness %v",
		kills, pauses, len(v.all), len(v.calls), v.enteredByProc, v.classes, v.stoppedCalls, v.killedCalls, v.lostUnpaused, v.maxLate.Round(time.Millisecond))
	t.Logf("handover gaps untouched by faults: %d, p50 %v p99 %v max %v (%s); gaps near a fault: %d, max %v",
		len(v.gaps), p50.Round(time.Microsecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond), what, v.excusedCount, v.maxGapExcused.Round(time.Millisecond))
	if len(v.calls) < 40 {
		t.Errorf("only %d entries", len(v.calls))
	}
	if v.overlaps+v.disorder+v.bad > 0 {
		t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
	}
	if v.late+v.odd > 0 {
		t.Errorf("%d calls late beyond Deadline+300ms, %d with an unexpected outcome", v.late, v.odd)
	}
	if mx > 600*time.Millisecond+400*time.Millisecond {
		t.Errorf("a handover with no fault nearby took %v (%s)", mx, what)
	}
}

// ------------------------------------- 2. a waiter killed while queued

// adv12Member returns the raw queue members of key (identity|ttl|fence|claim|inbox).
func adv12Members(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	m, err := rdb.ZRange(context.Background(), "lease:{"+key+"}:q", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A worker process queued first for a key is killed (SIGKILL) while a
// second worker process waits behind it; then the holder releases. The
// dead waiter's inbox has no subscriber any more, so the release may give
// it only the claim (re-check + 100ms = 600ms), and the live waiter must
// enter within that claim plus slack — not after the dead waiter's TTL
// (20s here). Released 100ms after the kill (the server has closed the
// dead process's connections by then: measured below), every trial must
// show a claim; released at the instant of the kill, the documented
// exception (a full TTL) may happen and is only counted.
func TestAdversary12_KilledQueuedWaiterGetsOnlyClaim(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	const claim = 600 * time.Millisecond // default re-check 500ms + 100ms
	fullAtInstant := 0
	var windows []time.Duration
	for trial, delay := range []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 0, 0} {
		key := fmt.Sprint("adv12-dead-", trial)
		r := newAdv12Run(t, srv, key)
		release := make(chan struct{})
		held := hold(t, holder, key, spec(20*time.Second, 30*time.Second), release)
		d := r.start("dead", "", 0, false, "ttl=20s,wait=15s,deadline=20s,fence=1,count=1")
		adv2WaitQueued(t, op, key, 1)
		members := adv12Members(t, admin, key)
		deadID, _, _ := strings.Cut(members[0], "|")
		// identity|ttl|fence|claim|inbox|counter ttl (a fenced waiter's)
		inbox := strings.SplitN(members[0], "|", 5)[4]
		inbox = inbox[:strings.LastIndex(inbox, "|")]
		r.start("live", "", 0, false, "ttl=2s,wait=15s,deadline=20s,fence=1,count=1")
		adv2WaitQueued(t, op, key, 2)
		time.Sleep(100 * time.Millisecond) // both sleep; their inboxes are live
		if n := admin.PubSubNumSub(context.Background(), inbox).Val()[inbox]; n != 1 {
			t.Fatalf("the dead-to-be waiter's inbox has %d subscribers", n)
		}
		killed := time.Now()
		d.kill()
		if delay > 0 {
			// How long the server takes to drop the killed process's
			// subscription (the documented window).
			for admin.PubSubNumSub(context.Background(), inbox).Val()[inbox] != 0 {
				time.Sleep(100 * time.Microsecond)
			}
			windows = append(windows, time.Since(killed))
			time.Sleep(delay - time.Since(killed))
		}
		released := time.Now()
		close(release)
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
		info, err := op.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Holder != deadID {
			t.Fatalf("trial %d: the release handed the key to %q, not to the first waiter %q", trial, info.Holder, deadID)
		}
		full := info.TTL > claim
		if full {
			if delay > 0 {
				t.Errorf("trial %d: released %v after the waiter was killed, the key went to it for %v (claim %v)", trial, delay, info.TTL.Round(time.Millisecond), claim)
			} else {
				fullAtInstant++
			}
			// Free the key for the live waiter: the documented case is
			// known, its 20s is not what is measured here.
			if _, err := op.ForceRelease(context.Background(), key, deadID); err != nil {
				t.Fatal(err)
			}
		}
		line := r.waitEvent("ENTER live", "", 5*time.Second)
		f := strings.Fields(line)
		lag := nsTime(f[6]).Sub(released)
		t.Logf("trial %d: released %v after the kill; dead waiter got %v (full: %v); the live waiter (another process) entered %v after the release",
			trial, delay, info.TTL.Round(time.Millisecond), full, lag.Round(time.Millisecond))
		if !full && lag > claim+400*time.Millisecond {
			t.Errorf("trial %d: the live waiter waited %v after a release to a dead waiter, beyond the claim %v + 400ms", trial, lag.Round(time.Millisecond), claim)
		}
		r.waitEvent("DONE live", "", 5*time.Second)
	}
	t.Logf("server dropped the killed process's subscription within %v; at the instant of the kill, %d of 2 releases gave the dead waiter its full TTL (documented)", windows, fullAtInstant)
}

// ------------------------ 3. a waiter's subscription or commands cut off

// adv12Proxy is a TCP proxy that tells a subscription connection (one
// whose client sent SUBSCRIBE) from command connections, so that either
// kind can be cut off alone: dropped (bytes discarded both ways, the
// connection left open: a partition the server does not notice) or closed.
type adv12Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[*adv12Conn]struct{}
	drop   map[bool]bool // sub? -> drop its traffic
	wg     sync.WaitGroup
}

type adv12Conn struct {
	client, server net.Conn
	sub            atomic.Bool
}

func adv12StartProxy(t *testing.T, target string) *adv12Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &adv12Proxy{ln: ln, target: target, conns: map[*adv12Conn]struct{}{}, drop: map[bool]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			sv, err := net.Dial("tcp", target)
			if err != nil {
				cl.Close()
				continue
			}
			c := &adv12Conn{client: cl, server: sv}
			p.mu.Lock()
			p.conns[c] = struct{}{}
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(c, cl, sv, true)
			go p.pipe(c, sv, cl, false)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.closeWhere(func(*adv12Conn) bool { return true })
		p.wg.Wait()
	})
	return p
}

// adv12SubCmd matches a SUBSCRIBE command in RESP (not the word in a
// script's source sent by EVAL).
var adv12SubCmd = regexp.MustCompile(`(^|\r\n)\*\d+\r\n\$9\r\nsubscribe\r\n`)

func (p *adv12Proxy) Addr() string { return p.ln.Addr().String() }

func (p *adv12Proxy) pipe(c *adv12Conn, from, to net.Conn, up bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if up && !c.sub.Load() && adv12SubCmd.Match(bytes.ToLower(buf[:n])) {
				c.sub.Store(true)
			}
			p.mu.Lock()
			drop := p.drop[c.sub.Load()]
			p.mu.Unlock()
			if !drop {
				if _, werr := to.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	c.client.Close()
	c.server.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// setDrop drops (or passes again) the traffic of subscription (sub) or
// command connections, open ones and new ones alike.
func (p *adv12Proxy) setDrop(sub, drop bool) {
	p.mu.Lock()
	p.drop[sub] = drop
	p.mu.Unlock()
}

// closeWhere closes the connections f selects, both sides.
func (p *adv12Proxy) closeWhere(f func(*adv12Conn) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if f(c) {
			c.client.Close()
			c.server.Close()
			n++
		}
	}
	return n
}

// A worker process waits for a key behind a holder in this process; its
// lease traffic goes through a proxy that can cut its subscription or its
// command connections at the moment of the handover.
//
//   - sub dropped (the server still counts the subscriber, so the release
//     sets the waiter's full TTL, but the message never arrives): the
//     waiter must find its grant at its re-check (500ms) and enter.
//   - sub closed just before the release (the server counts no
//     subscriber: a claim): the waiter must confirm the claim and enter
//     within a re-check.
//   - commands dropped (a partition of the waiter's command connections;
//     its subscription works): the waiter enters on the release's message
//     alone, its renewals are lost, so its fn must be cancelled with
//     ErrLost by its validity, and a third waiter (another process, not
//     partitioned) must enter only after that fn has exited, once the
//     key's TTL from the handover ran out.
func TestAdversary12_PartitionAtHandover(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	holder, _ := newClient(t, srv.Client(t))
	op, _ := newClient(t, srv.Client(t))
	for _, tc := range []string{"sub dropped", "sub closed", "commands dropped"} {
		t.Run(tc, func(t *testing.T) {
			key := "adv12-part-" + strings.ReplaceAll(tc, " ", "-")
			p := adv12StartProxy(t, srv.Addr())
			r := newAdv12Run(t, srv, key)
			release := make(chan struct{})
			held := hold(t, holder, key, spec(20*time.Second, 30*time.Second), release)
			wspec := "ttl=1500ms,wait=8s,deadline=10s,fence=1,count=1"
			if tc == "commands dropped" {
				wspec = "ttl=1500ms,wait=8s,deadline=10s,fence=1,count=1,hold=4s"
			}
			r.start("w", p.Addr(), 0, false, wspec)
			adv2WaitQueued(t, op, key, 1)
			if tc == "commands dropped" {
				r.start("x", "", 0, false, "ttl=1500ms,wait=8s,deadline=10s,fence=1,count=1")
				adv2WaitQueued(t, op, key, 2)
			}
			time.Sleep(200 * time.Millisecond) // the waiters sleep; inboxes live
			switch tc {
			case "sub dropped":
				p.setDrop(true, true)
			case "sub closed":
				if n := p.closeWhere(func(c *adv12Conn) bool { return c.sub.Load() }); n != 1 {
					t.Fatalf("closed %d subscription connections", n)
				}
			case "commands dropped":
				p.setDrop(false, true)
			}
			released := time.Now()
			close(release)
			if err := <-held; err != nil {
				t.Fatalf("holder: %v", err)
			}
			info, _ := op.Inspect(context.Background(), key)
			enter := nsTime(strings.Fields(r.waitEvent("ENTER w", "", 5*time.Second))[6])
			t.Logf("%s: the release set the key for %v; the waiter entered %v after it", tc, info.TTL.Round(time.Millisecond), enter.Sub(released).Round(time.Millisecond))
			if tc != "commands dropped" {
				if lag := enter.Sub(released); lag > 500*time.Millisecond+400*time.Millisecond {
					t.Errorf("%s: the waiter entered %v after the release, beyond a re-check (500ms) + 400ms", tc, lag.Round(time.Millisecond))
				}
				r.waitEvent("DONE w", "", 5*time.Second)
				v := r.check(func(*adv12Call) time.Duration { return 10 * time.Second }, 300*time.Millisecond, false)
				if v.bad+v.odd+v.late > 0 {
					t.Errorf("%s: %d grants not the key's, %d odd outcomes, %d late", tc, v.bad, v.odd, v.late)
				}
				return
			}
			r.waitEvent("ENTER x", "", 6*time.Second)
			r.waitEvent("DONE x", "", 6*time.Second)
			r.waitEvent("DONE w", "", 6*time.Second)
			v := r.check(func(*adv12Call) time.Duration { return 10 * time.Second }, 300*time.Millisecond, false)
			var w, x *adv12Call
			for _, c := range v.calls {
				switch c.proc {
				case "w":
					w = c
				case "x":
					x = c
				}
			}
			t.Logf("partitioned waiter: %v: %s; next waiter: %v (entered %v after the release)", w, w.msg, x, x.enter.Sub(released).Round(time.Millisecond))
			if !w.lost() {
				t.Errorf("the partitioned waiter's call was not reported lost: %s", w.msg)
			}
			if v.overlaps+v.disorder+v.bad > 0 {
				t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
			}
			if !x.enter.After(w.exit) {
				t.Errorf("the next waiter entered at %v, before the partitioned waiter's fn exited at %v", x.enter, w.exit)
			}
		})
	}
}

// ------------------------------------------------------------ 4. bursts

// One worker process runs 24 waiting goroutines on one key (a WatchLeader
// listener on it too), two others run 3 each; fn bodies take 0–2ms, so
// releases come in quick succession and most grants are handovers whose
// message wakes a waiter (the hub's reader then yields to it: 74b79ac).
// Re-check is 3s in every process: a handover message that is lost or
// not routed to its waiter shows as a gap of seconds. Checked: safety as
// in the soak, no call fails, and no handover takes more than 300ms.
func TestAdversary12_BurstAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	r := newAdv12Run(t, srv, "adv12-burst")
	var many []string
	for i := range 24 {
		many = append(many, fmt.Sprintf("ttl=2s,wait=9s,deadline=10s,hold=%dms,fence=%d", i%3, i%2))
	}
	few := []string{"ttl=2s,wait=9s,deadline=10s,hold=1ms,fence=1", "ttl=1s,wait=9s,deadline=10s,fence=0", "ttl=3s,wait=9s,deadline=10s,hold=2ms,fence=1"}
	r.start("many", "", 3*time.Second, true, many...)
	r.start("fewA", "", 3*time.Second, false, few...)
	r.start("fewB", "", 3*time.Second, true, few...)
	time.Sleep(4 * time.Second)
	r.stopAll()
	v := r.check(func(*adv12Call) time.Duration { return 10 * time.Second }, 300*time.Millisecond, false)
	p50, p99, mx, what := v.gapStats()
	t.Logf("%d entries (%v); outcomes %v; handover gaps p50 %v p99 %v max %v (%s)", len(v.calls), v.enteredByProc, v.classes,
		p50.Round(time.Microsecond), p99.Round(time.Microsecond), mx.Round(time.Millisecond), what)
	// A lost or misrouted handover shows in the gap bound above (3s
	// re-checks); the count only catches a run that barely ran. (On CI's
	// loaded 2 cores, beside the parallel Cluster tests, one run made 296
	// entries with a longest gap of 50ms: a floor of 300 failed it.)
	if len(v.calls) < 150 {
		t.Errorf("only %d entries in 7s", len(v.calls))
	}
	if v.overlaps+v.disorder+v.bad > 0 {
		t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
	}
	if v.late+v.odd+v.lostUnpaused > 0 || v.classes["busy"] > 0 {
		t.Errorf("%d late, %d odd outcomes, %d lost, %d busy: no call should fail without faults", v.late, v.odd, v.lostUnpaused, v.classes["busy"])
	}
	if mx > 300*time.Millisecond {
		t.Errorf("a handover took %v (re-check 3s): a message was missed or not routed (%s)", mx.Round(time.Millisecond), what)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.subFails) > 0 {
		t.Errorf("subscriptions failed without any fault (a probe starved by the burst?): %q", r.subFails)
	}
}

// ------------------------------------------- 5. Keep against other processes

// A worker process calls the key back to back with Spec.Keep (2s, fenced:
// its calls reuse the kept lease and its token), another with Keep and
// HoldMin, while two worker processes wait for the same key without Keep.
// A waiter elsewhere makes the keeping Client release as soon as its call
// returns, so waits must stay short (well under Keep), and safety holds
// as in the soak (equal tokens allowed only for consecutive entries of
// one keeping process).
func TestAdversary12_KeepAgainstWaitingProcesses(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	r := newAdv12Run(t, srv, "adv12-keep")
	r.start("keeper", "", 0, false, "ttl=1s,wait=3s,deadline=4s,hold=3ms,fence=1,keep=2s")
	r.start("keeperHM", "", 0, false, "ttl=1s,wait=3s,deadline=4s,hold=1ms,fence=1,keep=2s,holdmin=20ms")
	r.start("w1", "", 0, false, "ttl=1s,wait=3s,deadline=4s,hold=2ms,fence=1", "ttl=600ms,wait=3s,deadline=4s,hold=1ms,fence=0,minval=100ms")
	r.start("w2", "", 0, true, "ttl=1s,wait=3s,deadline=4s,hold=2ms,fence=1")
	time.Sleep(4 * time.Second)
	r.stopAll()
	v := r.check(func(*adv12Call) time.Duration { return 4 * time.Second }, 300*time.Millisecond, true)
	var waits []time.Duration
	for _, c := range v.calls {
		if strings.HasPrefix(c.proc, "w") {
			waits = append(waits, c.enter.Sub(c.start))
		}
	}
	slices.Sort(waits)
	p50, p99, mx, what := v.gapStats()
	t.Logf("%d entries (%v), kept repeats %d; outcomes %v; waits of non-keeping calls: n %d p50 %v max %v; gaps p50 %v p99 %v max %v (%s)",
		len(v.calls), v.enteredByProc, v.sameProcKeptRepeats, v.classes, len(waits), percentile(waits, 50).Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond),
		p50.Round(time.Microsecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond), what)
	if v.overlaps+v.disorder+v.bad > 0 {
		t.Errorf("safety: %d overlaps, %d tokens out of order, %d grants not the key's", v.overlaps, v.disorder, v.bad)
	}
	if v.late+v.odd+v.lostUnpaused > 0 {
		t.Errorf("%d late, %d odd outcomes, %d lost", v.late, v.odd, v.lostUnpaused)
	}
	if v.enteredByProc["w1"] < 10 || v.enteredByProc["w2"] < 10 {
		t.Errorf("waiting processes starved by the keepers: %v", v.enteredByProc)
	}
	if mx > time.Second {
		t.Errorf("a handover took %v (%s)", mx.Round(time.Millisecond), what)
	}
}
