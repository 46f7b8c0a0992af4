package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/proc"
	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
)

// The election harness: candidates in this process (each with its own
// connection, fault proxy and lease Client) and in subprocesses (a real
// process to pause and kill), recording every term so that the invariants
// can be checked at the end:
//
//   - two terms overlap in time only if one of them was reported lost;
//   - in the order terms started, their tokens strictly increase;
//   - a fenced write refused as stale came from a term reported lost.

// term is one term as its candidate saw it: fn entered at from, returned
// at to (zero while running).
type term struct {
	cand     string
	token    lease.Token
	from, to time.Time
	lost     bool // fn's context ended with ErrLost, or the term's outcome wrapped it
	stale    int  // fenced writes refused as stale
	accepted int  // fenced writes accepted
}

// election records the terms of one key.
type election struct {
	t     *testing.T
	key   string
	spec  lease.LeadSpec
	store *fence.Redis // the fenced record rec:{key}, written by every leader

	mu      sync.Mutex
	terms   []*term
	entered chan *term // every term, as it starts
}

// newElection records the terms of key; leaders write to a fenced record
// through rdb (a connection of its own: the resource is reachable when
// Redis's lease traffic of a candidate is cut off).
func newElection(t *testing.T, key string, spec lease.LeadSpec, rdb *redis.Client) *election {
	return &election{t: t, key: key, spec: spec, store: fence.NewRedis(rdb), entered: make(chan *term, 1024)}
}

// record is the fenced record's key.
func (e *election) record() string { return "rec:{" + e.key + "}" }

func (e *election) add(tm *term) {
	e.mu.Lock()
	e.terms = append(e.terms, tm)
	e.mu.Unlock()
	e.entered <- tm
}

func (e *election) update(f func()) {
	e.mu.Lock()
	f()
	e.mu.Unlock()
}

// next waits for the next term to start.
func (e *election) next(within time.Duration) *term {
	e.t.Helper()
	select {
	case tm := <-e.entered:
		return tm
	case <-time.After(within):
		e.t.Fatalf("no term started within %v", within)
		return nil
	}
}

// running is a Lead call of an in-process candidate.
type running struct {
	cand   *candidate
	cancel context.CancelFunc
	done   chan struct{} // closed when Lead returned
	err    error         // Lead's result
}

// lead starts candidate cd's campaign. Its fn writes to the fenced record
// (with the term's token) every 10ms while it leads, and records its term.
func (e *election) lead(cd *candidate) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cand: cd, cancel: cancel, done: make(chan struct{})}
	spec := e.spec
	spec.Owner = cd.name
	go func() {
		defer close(r.done)
		r.err = cd.c.Lead(ctx, e.key, spec, func(ctx context.Context) error {
			st, err := fence.From(ctx)
			if err != nil {
				return err
			}
			tm := &term{cand: cd.name, token: st.Token, from: time.Now()}
			e.add(tm)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				err := e.store.Set(wctx, st, e.record(), cd.name)
				wcancel()
				e.update(func() {
					if errors.Is(err, fence.ErrStale) {
						tm.stale++
					} else if err == nil {
						tm.accepted++
					}
				})
				select {
				case <-ctx.Done():
					e.update(func() {
						tm.to = time.Now()
						tm.lost = errors.Is(context.Cause(ctx), lease.ErrLost)
					})
					return nil
				case <-tick.C:
				}
			}
		})
	}()
	return r
}

// stop ends r's campaign gracefully (again: no-op) and waits for Lead to
// return nil.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("%s: Lead after a graceful stop = %v, want nil", r.cand.name, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Lead did not return within 5s of its ctx ending", r.cand.name)
	}
}

// markLostFromEvents marks lost the terms whose call ended with an error
// wrapping ErrLost (a loss found after fn returned: an overrun, or a
// release that found the key no longer ours).
func (e *election) markLostFromEvents(cands ...*candidate) {
	for _, cd := range cands {
		for _, ev := range cd.rec.Events() {
			if ev.Kind != lease.EventDone || !errors.Is(ev.Err, lease.ErrLost) {
				continue
			}
			e.update(func() {
				for _, tm := range e.terms {
					if tm.cand == cd.name && tm.token == ev.Token {
						tm.lost = true
					}
				}
			})
		}
	}
}

// check verifies the invariants over every recorded term and returns them
// in the order they started.
func (e *election) check() []*term {
	e.t.Helper()
	e.mu.Lock()
	terms := slices.Clone(e.terms)
	e.mu.Unlock()
	sort.Slice(terms, func(i, j int) bool { return terms[i].from.Before(terms[j].from) })
	now := time.Now()
	end := func(tm *term) time.Time {
		if tm.to.IsZero() {
			return now
		}
		return tm.to
	}
	for i, a := range terms {
		if i > 0 && a.token <= terms[i-1].token {
			e.t.Errorf("term of %s started after %s's with token %d <= %d", a.cand, terms[i-1].cand, a.token, terms[i-1].token)
		}
		if a.stale > 0 && !a.lost {
			e.t.Errorf("term %d of %s had %d writes refused as stale but was not reported lost", a.token, a.cand, a.stale)
		}
		for _, b := range terms[i+1:] {
			if b.from.Before(end(a)) && !a.lost && !b.lost {
				e.t.Errorf("two leaders: %s (term %d, %v–%v) and %s (term %d, from %v), neither reported lost",
					a.cand, a.token, a.from.Format("15:04:05.000"), end(a).Format("15:04:05.000"), b.cand, b.token, b.from.Format("15:04:05.000"))
			}
		}
	}
	return terms
}

// The subprocess candidate (TestMain runs helperCandidate when
// LEASE_HELPER_CANDIDATE is set). It campaigns with Lead and writes to a
// fenced Redis record every 10ms while it leads, and reports on stdout:
//
//	ENTER <token> <unix ns>
//	EXIT <token> <unix ns> <lost 0|1>
//	LOST <token>               (the term's outcome wrapped ErrLost)
//	WRITE <token> ok|stale|err (answers "write" on stdin: one more write under the last term)
//	BYE <Lead's error>
//
// "stop" on stdin (or EOF) cancels the campaign.
func helperCandidate() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("LEASE_HELPER_ADDR"), ContextTimeoutEnabled: true})
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	obs := lease.ObserverFunc(func(ev lease.Event) {
		if ev.Kind == lease.EventDone && errors.Is(ev.Err, lease.ErrLost) {
			say("LOST %d", ev.Token)
		}
	})
	c, err := lease.New(rdb, lease.WithObserver(obs), lease.WithRecheck(100*time.Millisecond))
	if err != nil {
		say("BYE %v", err)
		os.Exit(1)
	}
	ttl, _ := time.ParseDuration(os.Getenv("LEASE_HELPER_TTL"))
	store := fence.NewRedis(rdb)
	record := "rec:{" + os.Getenv("LEASE_HELPER_KEY") + "}"
	ctx, cancel := context.WithCancel(context.Background())
	var last fence.Stamp
	var lastMu sync.Mutex
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "stop":
				cancel()
			case "write":
				lastMu.Lock()
				st := last
				lastMu.Unlock()
				wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
				err := store.Set(wctx, st, record, "late")
				wcancel()
				switch {
				case errors.Is(err, fence.ErrStale):
					say("WRITE %d stale", st.Token)
				case err != nil:
					say("WRITE %d err %v", st.Token, err)
				default:
					say("WRITE %d ok", st.Token)
				}
			}
		}
		cancel()
	}()
	err = c.Lead(ctx, os.Getenv("LEASE_HELPER_KEY"), lease.LeadSpec{TTL: ttl, Owner: os.Getenv("LEASE_HELPER_CANDIDATE")}, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		lastMu.Lock()
		last = st
		lastMu.Unlock()
		say("ENTER %d %d", st.Token, time.Now().UnixNano())
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_ = store.Set(wctx, st, record, "sub")
			wcancel()
			select {
			case <-ctx.Done():
				lost := 0
				if errors.Is(context.Cause(ctx), lease.ErrLost) {
					lost = 1
				}
				say("EXIT %d %d %d", st.Token, time.Now().UnixNano(), lost)
				return nil
			case <-tick.C:
			}
		}
	})
	say("BYE %v", err)
	c.Close()
	rdb.Close()
	os.Exit(0)
}

// subCandidate is a candidate in a subprocess.
type subCandidate struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout lines other than ENTER/EXIT/LOST
	bye   chan struct{}
}

// startSub starts a subprocess candidate on addr; its terms are recorded in e.
func (e *election) startSub(t *testing.T, name, addr string) *subCandidate {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASE_HELPER_CANDIDATE="+name, "LEASE_HELPER_ADDR="+addr,
		"LEASE_HELPER_KEY="+e.key, "LEASE_HELPER_TTL="+e.spec.TTL.String())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &subCandidate{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 64), bye: make(chan struct{})}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		select {
		case <-s.bye:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
		cmd.Wait()
	})
	go func() {
		defer close(s.bye)
		sc := bufio.NewScanner(stdout)
		terms := map[lease.Token]*term{}
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			tok, _ := strconv.ParseUint(f[1], 10, 64)
			switch {
			case f[0] == "ENTER" && len(f) == 3:
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				tm := &term{cand: name, token: lease.Token(tok), from: time.Unix(0, ns)}
				terms[tm.token] = tm
				e.add(tm)
			case f[0] == "EXIT" && len(f) == 4:
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				if tm := terms[lease.Token(tok)]; tm != nil {
					e.update(func() {
						tm.to = time.Unix(0, ns)
						tm.lost = tm.lost || f[3] == "1"
					})
				}
			case f[0] == "LOST":
				if tm := terms[lease.Token(tok)]; tm != nil {
					e.update(func() { tm.lost = true })
				}
			default:
				if f[0] == "WRITE" && len(f) >= 3 && f[2] == "stale" {
					if tm := terms[lease.Token(tok)]; tm != nil {
						e.update(func() { tm.stale++ })
					}
				}
				s.lines <- sc.Text()
			}
		}
	}()
	return s
}

// signal sends sig; SIGSTOP returns once the process has stopped.
func (s *subCandidate) signal(sig syscall.Signal) {
	if sig == syscall.SIGSTOP {
		_ = proc.Stop(s.cmd.Process)
		return
	}
	s.cmd.Process.Signal(sig)
}

func (s *subCandidate) send(line string) { fmt.Fprintln(s.stdin, line) }

// line waits for the next reported line that is not a term event.
func (s *subCandidate) line(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l := <-s.lines:
		return l
	case <-s.bye:
		t.Fatalf("%s exited", s.name)
	case <-time.After(within):
		t.Fatalf("%s: no line within %v", s.name, within)
	}
	return ""
}

// percentile returns the p-th percentile (0–100) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
