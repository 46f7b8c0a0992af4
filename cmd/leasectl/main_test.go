package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The scripts in testdata/script run the leasectl binary (this test
// binary, re-executed by testscript) against real redis-servers: one per
// script ($REDIS_URL), a 3-master Cluster shared by the scripts
// ($CLUSTER_URL), and a TLS server for the scripts that start one. Leases
// are held by the test process itself through commands the scripts call
// (grab, drop, lost, entered: see scriptCmds).
func TestMain(m *testing.M) {
	testscript.Main(parallelM{m}, map[string]func(){"leasectl": main})
}

// hermeticDNS points this process's resolver, before any test runs, at a
// DNS server of its own that says at once that no name exists (names in
// /etc/hosts, such as localhost, still resolve). go-redis v9.22.0 looks
// up the name "FailoverClient" as it makes a failover client, and
// leasectl counts that against -timeout (newWithin): with the machine's
// resolver about one lookup in 27 took 2 s here, and tests that expect a
// Sentinel command to succeed at -timeout 1s or 2s failed with it
// (TestAdversary78_WatchStallThroughSentinels in CI). What a resolver
// that does not answer does to leasectl is tested in processes of their
// own (TestSlowResolverBounded, round 81), which set theirs.
func hermeticDNS() error {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("the tests' DNS server: %v", err)
	}
	leasetest.UseDNS(serveDNS(pc, nil).addr)
	return nil
}

// parallelM runs the tests with -parallel 8 unless the command line sets
// it (the default is GOMAXPROCS, two here). Almost every test here is
// marked parallel: each has servers (or refusing, silent and hung
// addresses) of its own, and most of its time is waiting for -timeout,
// a failover or a paused server, not CPU. The two that count the
// process's goroutines are not, and run first, alone. The package took
// about 190 s two at a time, with 83 s of it in tests run one by one
// (2026-12-06). Flags are parsed here, not in TestMain, because this
// binary also runs as the leasectl command in the scripts (testscript),
// where the arguments are leasectl's.
type parallelM struct{ m *testing.M }

func (p parallelM) Run() int {
	if err := hermeticDNS(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	leasetest.DefaultParallel(8)
	return p.m.Run()
}

func TestScripts(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	addrs := cl.Addrs()
	clusterURL := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			s, err := leasetest.Start()
			if err != nil {
				return err
			}
			env.Defer(s.Stop)
			h := &holders{targets: map[string]redis.UniversalClient{}, held: map[string]*held{}}
			env.Defer(h.close)
			h.targets[""] = redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
			h.targets["cluster"] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			env.Values[holdersKey{}] = h
			env.Setenv("REDIS_URL", s.URL())
			env.Setenv("REDIS_ADDR", s.Addr())
			env.Setenv("CLUSTER_URL", clusterURL)
			return nil
		},
		Cmds: scriptCmds,
	})
}

type holdersKey struct{}

// holders are the leases a script holds through the test process, by
// name, on its targets: "" its own server, "cluster", "tls".
type holders struct {
	mu      sync.Mutex
	targets map[string]redis.UniversalClient
	clients map[string]*lease.Client
	held    map[string]*held
}

type held struct {
	release chan struct{}
	entered chan lease.Token // the token, once fn runs
	cause   chan error       // fn's context.Cause, if it ended before the release
	done    chan error       // Do's result
}

func (h *holders) client(target, prefix string) (*lease.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clients == nil {
		h.clients = map[string]*lease.Client{}
	}
	id := target + "|" + prefix
	if c := h.clients[id]; c != nil {
		return c, nil
	}
	rdb := h.targets[target]
	if rdb == nil {
		return nil, fmt.Errorf("no target %q (start it first)", target)
	}
	c, err := lease.New(rdb, lease.WithPrefix(prefix))
	if err != nil {
		return nil, err
	}
	h.clients[id] = c
	return c, nil
}

func (h *holders) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.held {
		select {
		case <-x.release:
		default:
			close(x.release)
		}
	}
	for _, x := range h.held {
		select {
		case err := <-x.done:
			x.done <- err
		case <-time.After(10 * time.Second):
		}
	}
	for _, c := range h.clients {
		c.Close()
	}
	for _, rdb := range h.targets {
		rdb.Close()
	}
}

func getHolders(ts *testscript.TestScript) *holders { return ts.Value(holdersKey{}).(*holders) }

var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	// grab [-on cluster|tls] [-prefix P] [-ttl D] [-fence] [-holdmin D] [-wait D] [-queue] NAME KEY
	// holds KEY until 'drop NAME', and sets $NAME to the holder's identity
	// once its function runs. With -queue it returns as soon as the call
	// waits in KEY's queue, with $NAME its identity as a waiter.
	"grab": func(ts *testscript.TestScript, neg bool, args []string) {
		fs := flag.NewFlagSet("grab", flag.ContinueOnError)
		on := fs.String("on", "", "target")
		prefix := fs.String("prefix", "lease:", "prefix")
		ttl := fs.Duration("ttl", 10*time.Second, "TTL")
		fence := fs.Bool("fence", false, "fence")
		holdMin := fs.Duration("holdmin", 0, "hold-min")
		wait := fs.Duration("wait", 0, "wait")
		queue := fs.Bool("queue", false, "return once queued")
		ts.Check(fs.Parse(args))
		if fs.NArg() != 2 {
			ts.Fatalf("usage: grab [flags] NAME KEY")
		}
		name, key := fs.Arg(0), fs.Arg(1)
		hs := getHolders(ts)
		c, err := hs.client(*on, *prefix)
		ts.Check(err)
		if *queue && *wait == 0 {
			*wait = 30 * time.Second
		}
		before := 0
		if *queue {
			info, err := c.Inspect(context.Background(), key)
			ts.Check(err)
			before = len(info.Waiters)
		}
		x := &held{release: make(chan struct{}), entered: make(chan lease.Token, 1), cause: make(chan error, 1), done: make(chan error, 1)}
		hs.mu.Lock()
		hs.held[name] = x
		hs.mu.Unlock()
		spec := lease.Spec{TTL: *ttl, Deadline: 2 * time.Minute, Wait: *wait, Fence: *fence, HoldMin: *holdMin, MinValidity: *ttl / 3}
		go func() {
			x.done <- c.Do(context.Background(), key, spec, func(ctx context.Context) error {
				tok, _ := lease.TokenFrom(ctx)
				x.entered <- tok
				select {
				case <-x.release:
				case <-ctx.Done():
					x.cause <- context.Cause(ctx)
				}
				return nil
			})
		}()
		deadline := time.Now().Add(10 * time.Second)
		if *queue {
			for {
				info, err := c.Inspect(context.Background(), key)
				ts.Check(err)
				if len(info.Waiters) > before {
					ts.Setenv(name, info.Waiters[len(info.Waiters)-1].Identity)
					return
				}
				if time.Now().After(deadline) {
					ts.Fatalf("grab -queue %s: not queued in 10s", key)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		select {
		case tok := <-x.entered:
			x.entered <- tok
			info, err := c.Inspect(context.Background(), key)
			ts.Check(err)
			ts.Setenv(name, info.Holder)
		case err := <-x.done:
			ts.Fatalf("grab %s: %v", key, err)
		case <-time.After(time.Until(deadline)):
			ts.Fatalf("grab %s: not held in 10s", key)
		}
	},
	// entered NAME waits until NAME's function runs (a waiter got the
	// lease) and prints its token.
	"entered": func(ts *testscript.TestScript, neg bool, args []string) {
		x := named(ts, args)
		select {
		case tok := <-x.entered:
			x.entered <- tok
			fmt.Fprintf(ts.Stdout(), "entered, token %d\n", tok)
		case <-time.After(10 * time.Second):
			ts.Fatalf("%s did not enter in 10s", args[0])
		}
	},
	// lost NAME waits until NAME's function is told its lease is lost and
	// prints the cause.
	"lost": func(ts *testscript.TestScript, neg bool, args []string) {
		x := named(ts, args)
		select {
		case cause := <-x.cause:
			if !errors.Is(cause, lease.ErrLost) {
				ts.Fatalf("%s: cause %v, not ErrLost", args[0], cause)
			}
			fmt.Fprintf(ts.Stdout(), "cause: %v\n", cause)
		case <-time.After(10 * time.Second):
			ts.Fatalf("%s was not told of a loss in 10s", args[0])
		}
	},
	// drop NAME lets NAME's function return and prints what Do returned.
	"drop": func(ts *testscript.TestScript, neg bool, args []string) {
		x := named(ts, args)
		select {
		case <-x.release:
		default:
			close(x.release)
		}
		select {
		case err := <-x.done:
			x.done <- err
			if err == nil {
				fmt.Fprintln(ts.Stdout(), "Do: ok")
			} else {
				fmt.Fprintf(ts.Stdout(), "Do: %v\n", err)
			}
		case <-time.After(10 * time.Second):
			ts.Fatalf("%s: Do did not return in 10s", args[0])
		}
	},
	// redis-tls starts a TLS-only redis-server: $TLS_URL (rediss://), $TLS_CA
	// (the CA's PEM file), and grab -on tls.
	"redis-tls": func(ts *testscript.TestScript, neg bool, args []string) {
		s, err := leasetest.NewTLS()
		ts.Check(err)
		ts.Defer(s.Stop)
		hs := getHolders(ts)
		hs.mu.Lock()
		hs.targets["tls"] = redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), ContextTimeoutEnabled: true})
		hs.mu.Unlock()
		ts.Setenv("TLS_URL", s.URL())
		ts.Setenv("TLS_CA", s.CAFile())
	},
	// acl-user NAME PASSWORD RULE... adds an ACL user on the script's server.
	"acl-user": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 2 {
			ts.Fatalf("usage: acl-user NAME PASSWORD RULE...")
		}
		cmd := []any{"ACL", "SETUSER", args[0], "on", ">" + args[1]}
		for _, r := range args[2:] {
			cmd = append(cmd, r)
		}
		ts.Check(getHolders(ts).targets[""].Do(context.Background(), cmd...).Err())
	},
	// acl-readme NAME PASSWORD adds the README's ACL user for operators
	// (the line "ACL SETUSER leasectl on >secret RULES") as NAME.
	"acl-readme": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: acl-readme NAME PASSWORD")
		}
		b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
		ts.Check(err)
		const prefix = "ACL SETUSER leasectl on >secret "
		for _, line := range strings.Split(string(b), "\n") {
			if rules, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				cmd := []any{"ACL", "SETUSER", args[0], "on", ">" + args[1]}
				for _, r := range strings.Fields(rules) {
					cmd = append(cmd, r)
				}
				ts.Check(getHolders(ts).targets[""].Do(context.Background(), cmd...).Err())
				return
			}
		}
		ts.Fatalf("README.md has no line starting %q", prefix)
	},
	// numpat N waits until the script's server has N pattern subscriptions
	// (a watch is listening).
	"numpat": func(ts *testscript.TestScript, neg bool, args []string) {
		want, err := strconv.Atoi(args[0])
		ts.Check(err)
		rdb := getHolders(ts).targets[""]
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			n, err := rdb.PubSubNumPat(context.Background()).Result()
			ts.Check(err)
			if n >= int64(want) {
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("%d pattern subscriptions after 10s, want %d", n, want)
			}
		}
	},
	// free KEY waits until nobody holds KEY on the script's server.
	"free": func(ts *testscript.TestScript, neg bool, args []string) {
		c, err := getHolders(ts).client("", "lease:")
		ts.Check(err)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			info, err := c.Inspect(context.Background(), args[0])
			ts.Check(err)
			if info.Free() {
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("%s still held after 10s", args[0])
			}
		}
	},
	// sleep D pauses the script.
	"sleep": func(ts *testscript.TestScript, neg bool, args []string) {
		d, err := time.ParseDuration(args[0])
		ts.Check(err)
		time.Sleep(d)
	},
}

func named(ts *testscript.TestScript, args []string) *held {
	if len(args) != 1 {
		ts.Fatalf("want one NAME")
	}
	hs := getHolders(ts)
	hs.mu.Lock()
	defer hs.mu.Unlock()
	x := hs.held[args[0]]
	if x == nil {
		ts.Fatalf("no lease named %q (grab it first)", args[0])
	}
	return x
}

// leasectl runs the command in-process.
func leasectl(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb, func(string) string { return "" })
	return code, out.String(), errb.String()
}

// Exit status: 0 done (-h included), 1 failure, 2 usage.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	url := srv.URL()
	if err := srv.Client(t).Set(context.Background(), "lease:{foreign}:l", "by-hand", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"-h"}, 0, ""},
		{[]string{"help", "list"}, 0, "usage: leasectl list"},
		{[]string{"list", "-h"}, 0, "usage: leasectl list"},
		{[]string{"release", "-h"}, 0, "compare-and-delete"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"list", "-nope"}, 2, "flag provided but not defined"},
		{[]string{"list", "-url", url, "a", "b"}, 2, "at most one pattern"},
		{[]string{"show", "-url", url}, 2, "one KEY"},
		{[]string{"release", "-url", url, "a", "b"}, 2, "one KEY"},
		{[]string{"watch", "-url", url, "-interval", "0s"}, 2, "positive"},
		{[]string{"list", "-url", "http://x"}, 2, "-url"},
		{[]string{"list", "-url", url, "-cacert", "ca.pem"}, 2, "-cacert needs a rediss:// URL"},
		{[]string{"list", "-url", "redis://127.0.0.1:1", "-timeout", "300ms"}, 1, "cannot reach Redis"},
		{[]string{"list", "-url", "redis://u:secret@127.0.0.1:1", "-timeout", "300ms"}, 1, "redis://u:xxxxx@127.0.0.1:1"},
		{[]string{"show", "-url", url, "free"}, 0, ""},
		{[]string{"release", "-url", url, "-yes", "free"}, 1, "not held"},
		{[]string{"list", "-url", url, "-prefix", "empty:"}, 0, `no held lease matches "*" (prefix "empty:")`},
		{[]string{"list", "-url", url}, 0, "foreign  by-hand  0      none  -     0"},
		{[]string{"release", "-url", url, "-yes", "foreign"}, 1, `holds "by-hand", which the runtime did not write: nothing released`},
	} {
		code, out, errOut := leasectl(t, "", tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.err) || strings.Contains(errOut, "secret") {
			t.Errorf("leasectl %q = %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, errOut, tc.code, tc.err)
		}
	}
}

// The lease changes holder while release waits for the operator's
// confirmation: the holder shown is gone, the new one is left alone, and
// release says so with exit status 1.
func TestReleaseChangedHolderWhileConfirming(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := "orders:42"
	holdOn := func() (chan struct{}, chan error) {
		release, entered, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- c.Do(context.Background(), key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true}, func(ctx context.Context) error {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				return nil
			})
		}()
		<-entered
		return release, done
	}
	relA, doneA := holdOn()
	shown, _ := c.Inspect(context.Background(), key)

	stdinR, stdinW, _ := os.Pipe()
	defer stdinR.Close()
	outR, outW, _ := os.Pipe()
	var errb strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"release", "-url", srv.URL(), key}, stdinR, outW, &errb, func(string) string { return "" })
		outW.Close()
	}()
	// The lease as shown to the operator.
	var out strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "hold-min") {
		n, err := outR.Read(buf)
		if err != nil {
			t.Fatalf("reading release's output: %v (so far %q)", err, out.String())
		}
		out.Write(buf[:n])
	}
	if !strings.Contains(out.String(), shown.Holder) {
		t.Fatalf("release showed %q, want holder %s", out.String(), shown.Holder)
	}
	// Meanwhile A releases and B takes the lease; then the operator says yes.
	close(relA)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	relB, doneB := holdOn()
	b, _ := c.Inspect(context.Background(), key)
	fmt.Fprintln(stdinW, "yes")
	stdinW.Close()
	if got := <-code; got != 1 {
		t.Fatalf("release exit status %d, want 1; stderr %q", got, errb.String())
	}
	rest, _ := readAll(outR)
	out.WriteString(rest)
	msg := errb.String()
	if !strings.Contains(msg, "changed holder since it was shown: nothing released") || !strings.Contains(msg, "now held by "+b.Holder) {
		t.Fatalf("stderr %q, want it to say the key changed holder and name %s", msg, b.Holder)
	}
	if now, _ := c.Inspect(context.Background(), key); now.Holder != b.Holder || now.Token != b.Token {
		t.Fatalf("B's lease was touched: %+v, was %+v", now, b)
	}
	close(relB)
	if err := <-doneB; err != nil {
		t.Fatalf("B: %v", err)
	}
}

func readAll(f *os.File) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}
