package lease_test

// The bounds on time below are generous (1 s where the helper that wrote
// these saw a handover take about 1 ms): each is still far below what
// it tells apart (a 5 s re-check, an 8 s or 10 s TTL), and the suite
// runs them beside runtime/lease's other parallel tests on 2 cores.

// Round 80: targeted cross-process attacks on waiting by notification,
// kept leases given up on request, and processes killed or stopped while
// holding, keeping or waiting. Each process (a re-exec of the test binary)
// has its own go-redis client and lease.Client and is driven over stdin:
//
//	do TAG KEY TTLms DEADLINEms WAITms KEEPms HOLDMINms FENCE SKIP MINVALms HOLDms
//	rel TAG
//
// (HOLDms -1: hold until "rel TAG" or the ctx ends) and prints
//
//	in TAG TOKEN UNIXNANO
//	out TAG UNIXNANO CTXCLASS      (fn returned; CTXCLASS: ok, or the ctx cause's class)
//	done TAG CLASS UNIXNANO MSG    (Do returned)

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func init() {
	addr := os.Getenv("A80N_ADDR")
	if addr == "" {
		return
	}
	recheck, _ := strconv.Atoi(os.Getenv("A80N_RECHECK_MS"))
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c, err := lease.New(rdb, lease.WithRecheck(time.Duration(recheck)*time.Millisecond))
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(1)
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...)
		outMu.Unlock()
	}
	var relMu sync.Mutex
	rels := map[string]chan struct{}{}
	relOf := func(tag string) chan struct{} {
		relMu.Lock()
		defer relMu.Unlock()
		ch, ok := rels[tag]
		if !ok {
			ch = make(chan struct{})
			rels[tag] = ch
		}
		return ch
	}
	ms := func(s string) time.Duration { n, _ := strconv.Atoi(s); return time.Duration(n) * time.Millisecond }
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "rel":
			close(relOf(f[1]))
		case len(f) == 12 && f[0] == "do":
			tag, key := f[1], f[2]
			s := lease.Spec{TTL: ms(f[3]), Deadline: ms(f[4]), Wait: ms(f[5]), Keep: ms(f[6]), HoldMin: ms(f[7]),
				Fence: f[8] == "1", MinValidity: ms(f[10])}
			if f[9] == "1" {
				s.Busy = lease.BusySkip
			}
			holdMS, _ := strconv.Atoi(f[11])
			rel := relOf(tag)
			go func() {
				err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
					tok, _ := lease.TokenFrom(ctx)
					say("in %s %d %d", tag, tok, time.Now().UnixNano())
					var tm <-chan time.Time
					if holdMS >= 0 {
						tm = time.After(time.Duration(holdMS) * time.Millisecond)
					}
					select {
					case <-tm:
					case <-rel:
					case <-ctx.Done():
					}
					cls := "ok"
					if ctx.Err() != nil {
						cls = a80xClass(context.Cause(ctx))
					}
					say("out %s %d %s", tag, time.Now().UnixNano(), cls)
					return nil
				})
				msg := ""
				if err != nil {
					msg = strings.ReplaceAll(err.Error(), "\n", " ")
				}
				say("done %s %s %d %s", tag, a80xClass(err), time.Now().UnixNano(), msg)
			}()
		}
	}
	c.Close()
	os.Exit(0)
}

type a80nProc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	evs   map[string][]string // "kind TAG" -> fields
	chs   map[string]chan struct{}
	log   []string
}

func a80nStart(t *testing.T, name, addr string, recheck time.Duration) *a80nProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "A80N_ADDR="+addr, "A80N_RECHECK_MS="+strconv.Itoa(int(recheck/time.Millisecond)))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &a80nProc{t: t, name: name, cmd: cmd, stdin: stdin, evs: map[string][]string{}, chs: map[string]chan struct{}{}}
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := sc.Text()
			f := strings.Fields(l)
			p.mu.Lock()
			p.log = append(p.log, l)
			if len(f) >= 2 {
				k := f[0] + " " + f[1]
				p.evs[k] = f
				if ch, ok := p.chs[k]; ok {
					close(ch)
					delete(p.chs, k)
				}
			}
			p.mu.Unlock()
		}
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
		_ = cmd.Wait()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s's output:\n  %s", name, strings.Join(p.log, "\n  "))
			p.mu.Unlock()
		}
	})
	return p
}

func (p *a80nProc) do(tag, key string, s lease.Spec, hold time.Duration) {
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	h := int(hold / time.Millisecond)
	if hold < 0 {
		h = -1
	}
	fmt.Fprintf(p.stdin, "do %s %s %d %d %d %d %d %d %d %d %d\n", tag, key, s.TTL.Milliseconds(), s.Deadline.Milliseconds(),
		s.Wait.Milliseconds(), s.Keep.Milliseconds(), s.HoldMin.Milliseconds(), b2i(s.Fence), b2i(s.Busy == lease.BusySkip),
		s.MinValidity.Milliseconds(), h)
}

func (p *a80nProc) rel(tag string) { fmt.Fprintf(p.stdin, "rel %s\n", tag) }

// wait returns the fields of event "kind tag", waiting up to within; nil
// when it did not come.
func (p *a80nProc) wait(kind, tag string, within time.Duration) []string {
	k := kind + " " + tag
	p.mu.Lock()
	if f, ok := p.evs[k]; ok {
		p.mu.Unlock()
		return f
	}
	ch, ok := p.chs[k]
	if !ok {
		ch = make(chan struct{})
		p.chs[k] = ch
	}
	p.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(within):
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evs[k]
}

func (p *a80nProc) has(kind, tag string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evs[kind+" "+tag]
}

func a80nTime(f []string, i int) time.Time {
	n, _ := strconv.ParseInt(f[i], 10, 64)
	return time.Unix(0, n)
}

func a80nTok(f []string) lease.Token {
	n, _ := strconv.ParseUint(f[2], 10, 64)
	return lease.Token(n)
}

// A waiter in another process enters within a notification round trip of
// the holder's release, with a re-check interval and a PTTL (10s) that
// would both be far too slow: only the notification can explain a fast
// entry. Also with Keep on the holder (the holder gives up the kept lease
// after its call).
func TestAdversary80_NotifyHandoverLatency(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 5*time.Second)
	b := a80nStart(t, "B", srv.Addr(), 5*time.Second)
	procs := []*a80nProc{a, b}
	const rounds = 12
	var lat []time.Duration
	var lastTok lease.Token
	for i := range rounds {
		key := fmt.Sprintf("a80n-handover-%d", i%3)
		h, w := procs[i%2], procs[(i+1)%2]
		s := lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, Wait: 8 * time.Second, Fence: true}
		if i%4 >= 2 {
			s.Keep = 10 * time.Second
		}
		ht, wt := fmt.Sprintf("h%d", i), fmt.Sprintf("w%d", i)
		h.do(ht, key, s, -1)
		if h.wait("in", ht, 5*time.Second) == nil {
			t.Fatalf("round %d: holder %s never entered: %v", i, h.name, h.has("done", ht))
		}
		w.do(wt, key, s, 50*time.Millisecond)
		time.Sleep(300 * time.Millisecond) // the waiter's busy acquire and queueing
		if f := w.has("in", wt); f != nil {
			t.Fatalf("round %d: waiter entered while the holder held: %v", i, f)
		}
		h.rel(ht)
		out := h.wait("out", ht, 3*time.Second)
		in := w.wait("in", wt, 6*time.Second)
		if out == nil || in == nil {
			t.Fatalf("round %d: holder out %v, waiter in %v (waiter done %v)", i, out, in, w.has("done", wt))
		}
		d := a80nTime(in, 3).Sub(a80nTime(out, 2))
		lat = append(lat, d)
		tok := a80nTok(in)
		if tok <= a80nTok(h.has("in", ht)) || tok <= lastTok {
			t.Errorf("round %d: waiter's token %d not above holder's %d / last %d", i, tok, a80nTok(h.has("in", ht)), lastTok)
		}
		lastTok = tok
		if d > time.Second {
			t.Errorf("round %d (keep %v): waiter entered %v after the holder's fn returned (re-check 5s, TTL 10s): not by notification", i, s.Keep, d)
		}
		if f := w.wait("done", wt, 5*time.Second); f == nil || f[2] != "ok" {
			t.Errorf("round %d: waiter's Do: %v", i, f)
		}
		if f := h.wait("done", ht, 5*time.Second); f == nil || f[2] != "ok" {
			t.Errorf("round %d: holder's Do: %v", i, f)
		}
		if s.Keep > 0 {
			// The waiter now keeps the key; the next round's holder is it
			// (i+1)%2 ... only when the key is the same, which it is not.
			// Make it give the kept lease up: a call in the other process.
			gt := fmt.Sprintf("g%d", i)
			start := time.Now()
			h.do(gt, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, Wait: 8 * time.Second, Fence: true}, 0)
			f := h.wait("in", gt, 6*time.Second)
			if f == nil {
				t.Fatalf("round %d: a call asking for the kept key never entered: %v", i, h.has("done", gt))
			}
			if d := a80nTime(f, 3).Sub(start); d > time.Second {
				t.Errorf("round %d: the idle keeper gave the key up %v after another process asked (re-check 5s, TTL 10s)", i, d)
			}
			if a80nTok(f) <= tok {
				t.Errorf("round %d: token after the keeper gave up %d, not above %d", i, a80nTok(f), tok)
			}
			lastTok = a80nTok(f)
			h.wait("done", gt, 5*time.Second)
		}
	}
	t.Logf("handover latencies (holder's fn return -> waiter's fn entry): median %v, all %v", median(lat), lat)
}

// A waiter whose Wait ends gets ErrBusy at about Wait, not a hang; with
// BusySkip it returns nil without entering.
func TestAdversary80_WaitEndsBusy(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 200*time.Millisecond)
	b := a80nStart(t, "B", srv.Addr(), 200*time.Millisecond)
	key := "a80n-busy"
	a.do("h", key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true}, -1)
	if a.wait("in", "h", 5*time.Second) == nil {
		t.Fatal("holder never entered")
	}
	for i, skip := range []bool{false, true, false, true} {
		tag := fmt.Sprintf("w%d", i)
		s := lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 700 * time.Millisecond}
		if skip {
			s.Busy = lease.BusySkip
		}
		start := time.Now()
		b.do(tag, key, s, 0)
		f := b.wait("done", tag, 4*time.Second)
		if f == nil {
			t.Fatalf("waiter %d did not return in 4s (Wait 700ms)", i)
		}
		took := a80nTime(f, 3).Sub(start)
		want := "busy"
		if skip {
			want = "ok"
		}
		if f[2] != want || b.has("in", tag) != nil {
			t.Errorf("waiter %d (skip %v): class %s entered %v, want %s without entering: %v", i, skip, f[2], b.has("in", tag) != nil, want, f)
		}
		if took < 600*time.Millisecond || took > 3*time.Second {
			t.Errorf("waiter %d returned after %v, want about Wait (700ms)", i, took)
		}
	}
	a.rel("h")
	if f := a.wait("done", "h", 3*time.Second); f == nil || f[2] != "ok" {
		t.Errorf("holder: %v", f)
	}
}

// A holder process SIGKILLed: another process waiting gets the key within
// the TTL (plus drift and slack) of the kill.
func TestAdversary80_KilledHolder(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	for i, keep := range []time.Duration{0, 30 * time.Second} {
		a := a80nStart(t, fmt.Sprintf("A%d", i), srv.Addr(), 5*time.Second)
		b := a80nStart(t, fmt.Sprintf("B%d", i), srv.Addr(), 5*time.Second)
		key := fmt.Sprintf("a80n-killed-%d", i)
		s := lease.Spec{TTL: time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second, Fence: true, Keep: keep}
		hold := time.Duration(-1)
		if keep > 0 {
			hold = 0 // killed while keeping, between calls
		}
		a.do("h", key, s, hold)
		fa := a.wait("in", "h", 5*time.Second)
		if fa == nil {
			t.Fatal("holder never entered")
		}
		if keep > 0 {
			if f := a.wait("done", "h", 3*time.Second); f == nil || f[2] != "ok" {
				t.Fatalf("keeper's call: %v", f)
			}
		}
		time.Sleep(700 * time.Millisecond) // a renewal or two
		var killed time.Time
		if keep > 0 {
			// An idle keeper gives the key up at once when asked: kill it
			// before the ask, to test the TTL path.
			killed = time.Now()
			_ = a.cmd.Process.Kill()
			b.do("w", key, s, 0)
		} else {
			b.do("w", key, s, 0)
			time.Sleep(200 * time.Millisecond)
			killed = time.Now()
			_ = a.cmd.Process.Kill()
		}
		fb := b.wait("in", "w", 5*time.Second)
		if fb == nil {
			t.Fatalf("keep %v: waiter never entered after the holder was killed: %v", keep, b.has("done", "w"))
		}
		d := a80nTime(fb, 3).Sub(killed)
		t.Logf("keep %v: waiter entered %v after the kill (TTL 1s)", keep, d)
		if d > time.Second+600*time.Millisecond {
			t.Errorf("keep %v: waiter entered %v after the kill, want ≤ TTL+slack", keep, d)
		}
		if a80nTok(fb) <= a80nTok(fa) {
			t.Errorf("keep %v: token %d not above the killed holder's %d", keep, a80nTok(fb), a80nTok(fa))
		}
	}
}

// A holder process SIGSTOPped inside fn: a waiter gets the key within the
// TTL; when the holder resumes while the other holds, its fn's ctx ends at
// once with a loss and its Do reports ErrLost.
func TestAdversary80_StoppedHolderResumes(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 200*time.Millisecond)
	b := a80nStart(t, "B", srv.Addr(), 200*time.Millisecond)
	for i := range 4 {
		key := fmt.Sprintf("a80n-stopped-%d", i)
		s := lease.Spec{TTL: time.Second, Deadline: 15 * time.Second, Wait: 8 * time.Second, Fence: true}
		if i%2 == 1 {
			s.Keep = 30 * time.Second
			s.HoldMin = 100 * time.Millisecond
		}
		ht, wt := fmt.Sprintf("h%d", i), fmt.Sprintf("w%d", i)
		a.do(ht, key, s, -1)
		fa := a.wait("in", ht, 5*time.Second)
		if fa == nil {
			t.Fatal("holder never entered")
		}
		time.Sleep(400 * time.Millisecond)
		b.do(wt, key, s, 2000*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		stopped := time.Now()
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		fb := b.wait("in", wt, 5*time.Second)
		if fb == nil {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("waiter never entered after the holder stopped: %v", b.has("done", wt))
		}
		d := a80nTime(fb, 3).Sub(stopped)
		if d > time.Second+1500*time.Millisecond {
			t.Errorf("round %d: waiter entered %v after the stop, want ≤ TTL+slack", i, d)
		}
		time.Sleep(300 * time.Millisecond)
		resumed := time.Now()
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		out := a.wait("out", ht, 3*time.Second)
		done := a.wait("done", ht, 3*time.Second)
		if out == nil || done == nil {
			t.Fatalf("round %d: the resumed holder's fn/Do did not return: out %v done %v", i, out, done)
		}
		t.Logf("round %d: waiter entered %v after the stop; resumed holder's fn told %v after SIGCONT (%s), Do: %s",
			i, d.Round(time.Millisecond), a80nTime(out, 2).Sub(resumed).Round(time.Millisecond), out[3], done[2])
		if out[3] != "lost" {
			t.Errorf("round %d: resumed holder's fn ctx: %s, want lost", i, out[3])
		}
		if done[2] != "lost" {
			t.Errorf("round %d: resumed holder's Do: %v, want ErrLost", i, done)
		}
		if d := a80nTime(out, 2).Sub(resumed); d > time.Second {
			t.Errorf("round %d: resumed holder's fn was told %v after SIGCONT", i, d)
		}
		if a80nTok(fb) <= a80nTok(fa) {
			t.Errorf("round %d: waiter's token %d not above stopped holder's %d", i, a80nTok(fb), a80nTok(fa))
		}
		if f := b.wait("done", wt, 5*time.Second); f == nil || f[2] != "ok" {
			t.Errorf("round %d: waiter's Do: %v", i, f)
		}
	}
}

// A keeper process is stopped past its kept lease's validity; another
// process takes the key and holds it; a call is written to the keeper's
// stdin before SIGCONT so that it runs the moment the process resumes,
// before any timer of its own. It must not reuse the expired kept lease.
func TestAdversary80_StoppedKeeperCallAtResume(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 200*time.Millisecond)
	b := a80nStart(t, "B", srv.Addr(), 200*time.Millisecond)
	for i := range 4 {
		key := fmt.Sprintf("a80n-keeper-%d", i)
		s := lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second, Keep: 30 * time.Second, Fence: true, MinValidity: 50 * time.Millisecond}
		if i%2 == 1 {
			s.Fence = false
		}
		k1 := fmt.Sprintf("k%d", i)
		a.do(k1, key, s, 0)
		fk := a.wait("in", k1, 5*time.Second)
		if fk == nil || a.wait("done", k1, 3*time.Second) == nil {
			t.Fatal("keeper's first call")
		}
		time.Sleep(250 * time.Millisecond)
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(s.TTL + 300*time.Millisecond) // the kept lease's TTL passes
		bt := fmt.Sprintf("b%d", i)
		b.do(bt, key, lease.Spec{TTL: 3 * time.Second, Deadline: 6 * time.Second, Wait: 2 * time.Second, Fence: true}, -1)
		fb := b.wait("in", bt, 3*time.Second)
		if fb == nil {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("round %d: B never entered: %v", i, b.has("done", bt))
		}
		k2 := fmt.Sprintf("r%d", i)
		a.do(k2, key, s, 20*time.Millisecond) // queued in the pipe
		time.Sleep(50 * time.Millisecond)
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		done := a.wait("done", k2, 4*time.Second)
		in := a.has("in", k2)
		t.Logf("round %d (fence %v): resumed keeper's call: in %v, done %v", i, s.Fence, in, done)
		if in != nil {
			t.Errorf("round %d: the resumed keeper entered fn (token %d, kept %d) while B holds the key (token %d)", i, a80nTok(in), a80nTok(fk), a80nTok(fb))
		}
		if done == nil {
			t.Errorf("round %d: the resumed keeper's call did not return", i)
		} else if done[2] == "ok" && in == nil {
			t.Errorf("round %d: nil without entering", i)
		}
		b.rel(bt)
		b.wait("done", bt, 3*time.Second)
	}
}

// A waiter process is stopped while queued; the holder releases, which
// hands the key to the stopped waiter (its subscription connection is
// still open). A third process gets the key within the stopped waiter's
// TTL (plus re-check and slack); the stopped waiter, resumed while the
// third holds, must not enter then.
func TestAdversary80_StoppedWaiterAtHandover(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 300*time.Millisecond)
	w := a80nStart(t, "W", srv.Addr(), 300*time.Millisecond)
	c := a80nStart(t, "C", srv.Addr(), 300*time.Millisecond)
	for i := range 3 {
		key := fmt.Sprintf("a80n-stopwaiter-%d", i)
		ht, wt, ct := fmt.Sprintf("h%d", i), fmt.Sprintf("w%d", i), fmt.Sprintf("c%d", i)
		a.do(ht, key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}, -1)
		fa := a.wait("in", ht, 5*time.Second)
		if fa == nil {
			t.Fatal("holder never entered")
		}
		ws := lease.Spec{TTL: time.Second, Deadline: 15 * time.Second, Wait: 12 * time.Second, Fence: true}
		if i == 2 {
			ws.Keep = 10 * time.Second
		}
		w.do(wt, key, ws, 100*time.Millisecond)
		time.Sleep(300 * time.Millisecond)
		c.do(ct, key, lease.Spec{TTL: 2 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second, Fence: true}, -1)
		time.Sleep(300 * time.Millisecond)
		_ = w.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		a.rel(ht)
		fc := c.wait("in", ct, 6*time.Second)
		if fc == nil {
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("round %d: C never entered: %v", i, c.has("done", ct))
		}
		d := a80nTime(fc, 3).Sub(released)
		t.Logf("round %d: C entered %v after the release with W stopped", i, d.Round(time.Millisecond))
		if d > ws.TTL+300*time.Millisecond+1700*time.Millisecond {
			t.Errorf("round %d: C entered %v after the release, want ≤ W's TTL + re-check + slack", i, d)
		}
		time.Sleep(200 * time.Millisecond)
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(500 * time.Millisecond)
		if f := w.has("in", wt); f != nil {
			if a80nTime(f, 3).Before(time.Now()) && c.has("out", ct) == nil {
				t.Errorf("round %d: resumed waiter W entered (token %d) while C holds (token %d)", i, a80nTok(f), a80nTok(fc))
			}
		}
		c.rel(ct)
		outC := c.wait("out", ct, 3*time.Second)
		if f := c.wait("done", ct, 3*time.Second); f == nil || f[2] != "ok" {
			t.Errorf("round %d: C's Do: %v", i, f)
		}
		fw := w.wait("in", wt, 5*time.Second)
		if fw == nil {
			// W re-checks every 300ms: the stop may land on an acquire on
			// the wire, whose reply W reads only after its limit (TTL less
			// the drift from its send) passed. That acquire's outcome is
			// unknown, and the call ends ErrUnknown without entering, as
			// documented (README, Three outcomes of a failed acquire):
			// seen once in CI, "no reply in time to enter a grant".
			if d := w.has("done", wt); d != nil && d[2] == "unknown" && strings.Contains(strings.Join(d, " "), "no reply in time to enter a grant") {
				t.Logf("round %d: W's stop landed on an acquire on the wire: %v", i, d)
			} else {
				t.Errorf("round %d: W never entered after C released: %v", i, d)
			}
		} else {
			if outC != nil && a80nTime(fw, 3).Before(a80nTime(outC, 2)) {
				t.Errorf("round %d: W entered before C's fn returned", i)
			}
			if a80nTok(fw) <= a80nTok(fc) {
				t.Errorf("round %d: W's token %d not above C's %d", i, a80nTok(fw), a80nTok(fc))
			}
			if d := a80nTime(fw, 3).Sub(a80nTime(outC, 2)); d > 250*time.Millisecond {
				t.Logf("round %d: W entered %v after C's release", i, d)
			}
		}
		w.wait("done", wt, 5*time.Second)
		if ws.Keep > 0 {
			// Let the kept lease go before the next round: a call from A asks.
			a.do("x"+ht, key, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second}, 0)
			a.wait("done", "x"+ht, 5*time.Second)
		}
	}
}

// A waiter process stopped past its whole budget. The holder releases
// while it is stopped (handing the key to it: its subscription is still
// connected) or keeps holding. Resumed, the waiter must return promptly
// without entering, and a key handed to it must reach a third process
// soon after the resume, not at the end of the stopped waiter's TTL.
func TestAdversary80_StoppedWaiterPastDeadline(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 300*time.Millisecond)
	w := a80nStart(t, "W", srv.Addr(), 300*time.Millisecond)
	c := a80nStart(t, "C", srv.Addr(), 300*time.Millisecond)
	for i, releaseDuringStop := range []bool{true, false, true} {
		key := fmt.Sprintf("a80n-stoppast-%d", i)
		ht, wt, ct := fmt.Sprintf("h%d", i), fmt.Sprintf("w%d", i), fmt.Sprintf("c%d", i)
		a.do(ht, key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second, Fence: true}, -1)
		if a.wait("in", ht, 5*time.Second) == nil {
			t.Fatal("holder never entered")
		}
		ws := lease.Spec{TTL: 8 * time.Second, Deadline: 2 * time.Second, Wait: 1500 * time.Millisecond, Fence: true, MinValidity: 100 * time.Millisecond}
		if i == 2 {
			ws.Keep = 10 * time.Second
		}
		w.do(wt, key, ws, 0)
		time.Sleep(300 * time.Millisecond)
		_ = w.cmd.Process.Signal(syscall.SIGSTOP)
		if releaseDuringStop {
			time.Sleep(100 * time.Millisecond)
			a.rel(ht)
			a.wait("done", ht, 3*time.Second)
			time.Sleep(100 * time.Millisecond)
			c.do(ct, key, lease.Spec{TTL: 2 * time.Second, Deadline: 15 * time.Second, Wait: 12 * time.Second, Fence: true}, 0)
		}
		time.Sleep(2500 * time.Millisecond) // past W's budget
		if releaseDuringStop && c.has("in", ct) != nil {
			t.Logf("round %d: C entered while W was stopped", i)
		}
		resumed := time.Now()
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		fd := w.wait("done", wt, 3*time.Second)
		if fd == nil {
			t.Fatalf("round %d: resumed waiter did not return within 3s", i)
		}
		t.Logf("round %d (released during stop %v): resumed W returned %v after SIGCONT: %s %s", i, releaseDuringStop,
			a80nTime(fd, 3).Sub(resumed).Round(time.Millisecond), fd[2], strings.Join(fd[4:], " "))
		if f := w.has("in", wt); f != nil {
			t.Errorf("round %d: W entered after its budget passed while stopped: %v", i, f)
		}
		if d := a80nTime(fd, 3).Sub(resumed); d > 1500*time.Millisecond {
			t.Errorf("round %d: resumed W returned %v after SIGCONT", i, d)
		}
		if releaseDuringStop {
			fc := c.wait("in", ct, 12*time.Second)
			if fc == nil {
				t.Fatalf("round %d: C never entered: %v", i, c.has("done", ct))
			}
			d := a80nTime(fc, 3).Sub(resumed)
			t.Logf("round %d: C entered %v after W's resume (W's TTL 8s)", i, d.Round(time.Millisecond))
			if d > 3*time.Second {
				t.Errorf("round %d: C entered %v after W resumed and gave up: a key handed to a waiter that gave up sat until its TTL", i, d.Round(time.Millisecond))
			}
			c.wait("done", ct, 3*time.Second)
		} else {
			a.rel(ht)
			a.wait("done", ht, 3*time.Second)
		}
	}
}

// An idle keeper process is stopped just after another process asks for
// its key, and resumed (after stops shorter and longer than the TTL) with a
// call of its own already in its pipe. Whatever the order, the two calls'
// functions never overlap unless the keeper's Do reports the loss, and the
// asker enters soon after the keeper's call ends (or its lease expires).
func TestAdversary80_KeeperStoppedWhileAsked(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	a := a80nStart(t, "A", srv.Addr(), 5*time.Second)
	b := a80nStart(t, "B", srv.Addr(), 5*time.Second)
	for i, stop := range []time.Duration{0, 150 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1200 * time.Millisecond, 2 * time.Second} {
		key := fmt.Sprintf("a80n-asked-%d", i)
		ks := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Keep: 30 * time.Second, Fence: true, MinValidity: 100 * time.Millisecond, Wait: 3 * time.Second}
		k1, k2, bt := fmt.Sprintf("k%d", i), fmt.Sprintf("r%d", i), fmt.Sprintf("b%d", i)
		a.do(k1, key, ks, 0)
		fk := a.wait("in", k1, 5*time.Second)
		if fk == nil || a.wait("done", k1, 3*time.Second) == nil {
			t.Fatal("keeper's first call")
		}
		time.Sleep(100 * time.Millisecond)
		if stop > 0 {
			_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		}
		asked := time.Now()
		b.do(bt, key, lease.Spec{TTL: time.Second, Deadline: 6 * time.Second, Wait: 5 * time.Second, Fence: true}, 100*time.Millisecond)
		a.do(k2, key, ks, 100*time.Millisecond)
		time.Sleep(stop)
		if stop > 0 {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
		fb := b.wait("in", bt, 6*time.Second)
		da := a.wait("done", k2, 6*time.Second)
		db := b.wait("done", bt, 6*time.Second)
		if fb == nil || da == nil || db == nil {
			t.Fatalf("stop %v: B in %v, A's second call %v, B done %v", stop, fb, da, db)
		}
		ia, oa, ob := a.has("in", k2), a.has("out", k2), b.has("out", bt)
		t.Logf("stop %v: B entered %v after asking (token %d); A's second call %v %s",
			stop, a80nTime(fb, 3).Sub(asked).Round(time.Millisecond), a80nTok(fb), ia, da[2])
		if ia != nil && oa != nil && ob != nil {
			inA, outA, inB, outB := a80nTime(ia, 3), a80nTime(oa, 2), a80nTime(fb, 3), a80nTime(ob, 2)
			if inA.Before(outB) && inB.Before(outA) && da[2] == "ok" && db[2] == "ok" {
				t.Errorf("stop %v: overlap: A [%d %v..%v] and B [%d %v..%v], both nil", stop, a80nTok(ia), inA, outA, a80nTok(fb), inB, outB)
			}
			if inA.After(inB) && a80nTok(ia) <= a80nTok(fb) {
				t.Errorf("stop %v: A entered after B with token %d ≤ B's %d (Do: %s)", stop, a80nTok(ia), a80nTok(fb), da[2])
			}
		}
		// How long B waited past the end of the keeper's use of the key.
		end := asked.Add(stop)
		if oa != nil && a80nTime(oa, 2).After(end) && a80nTime(oa, 2).Before(a80nTime(fb, 3)) {
			end = a80nTime(oa, 2)
		}
		if d := a80nTime(fb, 3).Sub(end); d > ks.TTL+1500*time.Millisecond {
			t.Errorf("stop %v: B entered %v after the keeper resumed or ended its call", stop, d)
		}
	}
}
