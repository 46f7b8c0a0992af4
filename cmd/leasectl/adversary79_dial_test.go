package main

// Adversary round 79 (leasectl): -sentinel's second dial of each Sentinel
// after a PING that found nothing answering (532dfab: connect,
// dialSentinels): bounded, accurate per address, in URL order, no
// password, no goroutine left, and no "refused" for healthy Sentinels.

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const adv79Timeout = time.Second

// adv79Gap measures the longest a 5 ms sleeper in this process was held
// up while f ran: a stall of the whole process (or machine) rather than
// of leasectl.
func adv79Gap(f func()) time.Duration {
	stop := make(chan struct{})
	res := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		last := time.Now()
		for {
			select {
			case <-stop:
				res <- worst
				return
			case <-time.After(5 * time.Millisecond):
			}
			now := time.Now()
			worst = max(worst, now.Sub(last)-5*time.Millisecond)
			last = now
		}
	}()
	f()
	close(stop)
	return <-res
}

// adv79Refused6 is an IPv6 loopback address whose port refuses
// connections until the test ends (refusedAddr).
func adv79Refused6(t *testing.T) string { return refusedAddr(t, true) }

// adv79Slack is how much longer than -timeout a run may take. Its own
// path after the deadline is at most 0.2 s: closeSoon's wait, which a
// failover client with its Sentinels down always uses up (100 ms), and
// the dials (at most 100 ms). The rest is for a loaded machine, with the
// subtests' 12 runs at once: one run took 1.609 s (a name that did not
// resolve; the test process's longest stall 4 ms) beside gen's and
// leasecheck's tests on an empty build cache and runtime/lease's parallel
// tests, and 96 runs instrumented the same way, beside a cold build, took
// 1.11-1.21 s (PING 1.003-1.008 s, close 100-103 ms, dials 0.5-103 ms).
// An unbounded wait (go-redis's 5 s dial timeout, which round 78 found,
// or its 2 s lookup of "FailoverClient" before -timeout's clock started,
// below) still fails it.
const adv79Slack = time.Second

// adv79Late reports a run that took longer than -timeout + adv79Slack,
// unless a stall of the whole test process explains the excess. Round 79
// saw runs exit after 3.0-3.2 s, whatever the command, and only logged
// them for a Sentinel that drops connection attempts, where it first saw
// them; they were go-redis v9.22.0 resolving "FailoverClient" (a failover
// client's address) in DNS for up to 2 s as it made the client, before
// -timeout's clock started, with a resolver that did not answer (with 12
// runs at once at -parallel 8 it was several in every package run). Now
// the making counts against -timeout (newWithin, TestSlowResolverBounded),
// and every run is held to the bound.
func adv79Late(t *testing.T, what string, took, gap time.Duration) {
	t.Helper()
	if took <= adv79Timeout+adv79Slack {
		return
	}
	if took-gap <= adv79Timeout+adv79Slack {
		t.Logf("%s took %v with -timeout %v, but the test process itself stalled for %v meanwhile: not leasectl's", what, took, adv79Timeout, gap)
		return
	}
	t.Errorf("%s took %v with -timeout %v (want within -timeout + %v; the longest stall of the test process meanwhile: %v)", what, took, adv79Timeout, adv79Slack, gap)
}

// adv79Hung is a loopback address whose dials hang: a listening socket
// with a backlog of 0 whose accept queue is full and never drained, so
// the kernel drops every further SYN (a black-holed or firewalled host).
func adv79Hung(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	var fill []net.Conn
	t.Cleanup(func() {
		for _, c := range fill {
			c.Close()
		}
		syscall.Close(fd)
	})
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if ok := asNetErr(err, &ne); ok && ne.Timeout() {
				return addr // the queue is full: dials hang
			}
			t.Fatalf("filling %s: %v", addr, err)
		}
		fill = append(fill, c)
	}
	t.Fatalf("%s still takes connections after %d: no hanging address on this machine", addr, len(fill))
	return ""
}

func asNetErr(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

// adv79Want is what the message must say about one Sentinel address.
type adv79Want struct{ addr, kind string }

func (w adv79Want) text() string {
	switch w.kind {
	case "refused":
		return w.addr + " refused the connection"
	case "took":
		return w.addr + " took the connection"
	case "hung":
		return w.addr + " did not take the connection within " + sentinelDial.String()
	case "lookup":
		// "did not resolve (no such host)", or "'s lookup did not end
		// within 100ms" when the resolver is slow under load: either way
		// the name's doing, not a Sentinel's.
		return w.addr + ": the name"
	case "unreachable":
		return w.addr + ": connect: network is unreachable"
	}
	panic(w.kind)
}

// adv79Section is the "dialled again" part of a leasectl message, or "".
func adv79Section(errOut string) string {
	i := strings.Index(errOut, "(dialled again, the Sentinel")
	if i < 0 {
		return ""
	}
	j := strings.LastIndex(errOut, ") (")
	if j < i {
		return errOut[i:]
	}
	return errOut[i : j+1]
}

// adv79Names counts how often addr is named in s as an address (followed
// by a space, ": " or ")").
func adv79Names(s, addr string) int {
	return strings.Count(s, addr+" ") + strings.Count(s, addr+": ") + strings.Count(s, addr+")")
}

// adv79CheckStates checks that the section says, in order, what each of
// wants says, and names each address as often as the URL does.
func adv79CheckStates(t *testing.T, errOut string, wants []adv79Want) {
	t.Helper()
	sec := adv79Section(errOut)
	if sec == "" {
		t.Errorf("no \"dialled again\" part in %q", errOut)
		return
	}
	what := "the Sentinel: "
	if len(wants) > 1 {
		what = "the Sentinels: "
	}
	if !strings.Contains(sec, what) {
		t.Errorf("the section does not say %q: %q", what, sec)
	}
	pos := 0
	for i, w := range wants {
		k := strings.Index(sec[pos:], w.text())
		if k < 0 {
			t.Errorf("address %d (%s): want %q after offset %d of %q", i, w.kind, w.text(), pos, sec)
			return
		}
		pos += k + len(w.text())
	}
	inURL := map[string]int{}
	for _, w := range wants {
		inURL[w.addr]++
	}
	for a, n := range inURL {
		if got := adv79Names(sec, a); got != n {
			t.Errorf("%s is named %d times in the section, the URL has it %d times: %q", a, got, n, sec)
		}
	}
}

// adv79Timed runs leasectl in this process with stdin and args, and
// returns its exit code, output, how long it took and the longest stall
// of the test process meanwhile (adv79Gap).
func adv79Timed(t *testing.T, stdin string, args ...string) (code int, out, errOut string, took, gap time.Duration) {
	t.Helper()
	gap = adv79Gap(func() {
		start := time.Now()
		code, out, errOut = leasectl(t, stdin, args...)
		took = time.Since(start)
	})
	return code, out, errOut, took, gap
}

// adv79Run runs leasectl with -timeout 1s -sentinel mymaster -url url and
// checks exit 1 within -timeout + adv79Slack, the message naming -timeout, and
// that no secret is printed anywhere.
func adv79Run(t *testing.T, stdin, url string, secrets []string, args ...string) (string, string) {
	t.Helper()
	full := append(args[:1:1], append([]string{"-timeout", adv79Timeout.String(), "-sentinel", "mymaster", "-url", url}, args[1:]...)...)
	code, out, errOut, took, gap := adv79Timed(t, stdin, full...)
	t.Logf("%v: exit %d after %v (process stall %v): stdout %q stderr %q", args, code, took.Round(time.Millisecond), gap.Round(time.Millisecond), out, errOut)
	if code != exitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	adv79Late(t, fmt.Sprint(args), took, gap)
	if !strings.Contains(errOut, "no answer within -timeout "+adv79Timeout.String()) {
		t.Errorf("the message does not say that nothing answered within -timeout: %q", errOut)
	}
	for _, s := range secrets {
		if strings.Contains(out+errOut, s) {
			t.Errorf("%q is printed: %q %q", s, out, errOut)
		}
	}
	return out, errOut
}

// 0. A name that does not resolve, because the resolver's port refuses
// (its error then ends in "connection refused"), does not answer, or
// answers "no such host", is no Sentinel's doing: dialState reads the
// error's type, not its text. (Errors as net.Dial returns them: swapping
// net.DefaultResolver in this process raced with go-redis's dials that
// outlive earlier tests.)
func TestAdversary79_ResolverFailureNotBlamedOnSentinel(t *testing.T) {
	t.Parallel()
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"dns port refuses", dial(&net.DNSError{Err: "read udp 127.0.0.1:1->127.0.0.1:2: read: connection refused", Name: "s.invalid"}), ": the name did not resolve (read udp"},
		{"dns silent", dial(&net.DNSError{Err: "i/o timeout", Name: "s.invalid", IsTimeout: true}), ": the name's lookup did not end within 100ms"},
		{"no such host", dial(&net.DNSError{Err: "no such host", Name: "refused.invalid", IsNotFound: true}), ": the name did not resolve (no such host)"},
		{"port refuses", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), " refused the connection"},
		{"unreachable", dial(os.NewSyscallError("connect", syscall.ENETUNREACH)), ": connect: network is unreachable"},
	} {
		got := dialState(tc.err, sentinelDial)
		if got != tc.want && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if tc.name != "port refuses" && strings.Contains(got, "refused the connection") {
			t.Errorf("%s: %q puts it on the Sentinel's port", tc.name, got)
		}
	}
}

// 1. Each kind of dead Sentinel alone, and all kinds in one URL for every
// command: exit 1 within -timeout + adv79Slack, each address's state right, in
// URL order, each named once.
func TestAdversary79_EveryKindEveryCommand(t *testing.T) {
	t.Parallel()
	refused, silent, hung := adv77Dead(t), silentAddr(t), adv79Hung(t)
	refused6 := adv79Refused6(t)
	nxdomain := "sentinel-b.adv79.invalid:26379"
	mixed := []adv79Want{{silent, "took"}, {refused, "refused"}, {hung, "hung"}, {nxdomain, "lookup"}, {refused6, "refused"}}
	url := func(ws []adv79Want) string {
		u := "redis://" + ws[0].addr
		for i, w := range ws[1:] {
			sep := "&"
			if i == 0 {
				sep = "?"
			}
			u += sep + "addr=" + w.addr
		}
		return u
	}
	type tc struct {
		name, stdin string
		wants       []adv79Want
		args        []string
	}
	var cases []tc
	for _, w := range mixed {
		cases = append(cases, tc{"alone-" + w.kind + "-" + w.addr, "", []adv79Want{w}, []string{"list"}})
	}
	for _, args := range [][]string{{"list"}, {"list", "-json"}, {"show", "k"}, {"release", "k"}, {"release", "-yes", "k"}, {"watch", "-for", "5s"}, {"check"}} {
		cases = append(cases, tc{"mixed-" + strings.Join(args, "_"), "yes\n", mixed, args})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, errOut := adv79Run(t, c.stdin, url(c.wants), nil, c.args...)
			adv79CheckStates(t, errOut, c.wants)
		})
	}
}

// 1b. A Sentinel address that no route reaches (the kernel says "network
// is unreachable" at once): the message names it once, as every other
// state does.
func TestAdversary79_UnreachableNamedOnce(t *testing.T) {
	t.Parallel()
	addr := "255.255.255.255:26379"
	_, errOut := adv79Run(t, "", "redis://"+addr, nil, "list")
	adv79CheckStates(t, errOut, []adv79Want{{addr, "unreachable"}})
}

// 1c. A Sentinel host name that does not resolve, whose spelling has
// "refused" in it: the DNS error is no refused connection.
func TestAdversary79_UnresolvedNameIsNotRefused(t *testing.T) {
	t.Parallel()
	addr := "refused-sentinel.adv79.invalid:26379"
	_, errOut := adv79Run(t, "", "redis://"+addr, nil, "list")
	sec := adv79Section(errOut)
	if strings.Contains(sec, "refused the connection") {
		t.Errorf("the name did not resolve, but the message says the Sentinel refused the connection: %q", sec)
	}
	adv79CheckStates(t, errOut, []adv79Want{{addr, "lookup"}})
}

// 2. Passwords and user names with odd address forms: IPv6 literals,
// duplicated addresses, 20 addresses, the password in the user
// information (plain and percent-encoded) and in the query, before and
// after the addr= parameters. No password anywhere in the output; the
// "dialled again" part holds no user name either (the URL part keeps the
// user names, by design of redactURL).
func TestAdversary79_NoSecretsOddAddrs(t *testing.T) {
	t.Parallel()
	refused, silent, hung := adv77Dead(t), silentAddr(t), adv79Hung(t)
	refused6 := adv79Refused6(t)
	secrets := []string{"hunter2", "hunter%32", "hunter%2"}
	users := []string{"sen-user79", "ops-user79"}
	var twenty []adv79Want
	for i := range 20 {
		twenty = append(twenty, []adv79Want{{silent, "took"}, {refused, "refused"}, {hung, "hung"}, {refused6, "refused"}}[i%4])
	}
	addrs := func(ws []adv79Want) string {
		var b strings.Builder
		for _, w := range ws {
			b.WriteString("&addr=" + w.addr)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name  string
		url   string
		wants []adv79Want
	}{
		{"ipv6-first-userinfo", "redis://sen-user79:hunter2-u@" + refused6 + "?addr=" + silent + "&username=ops-user79&password=hunter2-q",
			[]adv79Want{{refused6, "refused"}, {silent, "took"}}},
		{"duplicates", "redis://sen-user79:hunter2-u@" + silent + "?addr=" + silent + "&addr=" + refused + "&addr=" + silent + "&addr=" + refused + "&password=hunter2-q",
			[]adv79Want{{silent, "took"}, {silent, "took"}, {refused, "refused"}, {silent, "took"}, {refused, "refused"}}},
		{"twenty", "redis://sen-user79:hunter%32-u@" + twenty[0].addr + "?username=ops-user79" + addrs(twenty[1:]) + "&password=hunter2-q",
			twenty},
		{"password-before-addrs", "redis://" + refused + "?password=hunter2-q&username=ops-user79" + addrs([]adv79Want{{silent, "took"}, {hung, "hung"}}),
			[]adv79Want{{refused, "refused"}, {silent, "took"}, {hung, "hung"}}},
		{"percent-encoded-everything", "redis://sen-user79:%68unter2-u@" + silent + "?addr=" + strings.ReplaceAll(refused, ":", "%3A") + "&pass%77ord=hunter%32-q&user%6Eame=ops-user79",
			[]adv79Want{{silent, "took"}, {refused, "refused"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errOut := adv79Run(t, "", tc.url, secrets, "show", "k")
			if strings.Contains(errOut, "hunter") {
				t.Errorf("a password (or its start) is printed: %q", errOut)
			}
			sec := adv79Section(errOut)
			for _, u := range users {
				if strings.Contains(sec, u) {
					t.Errorf("the user name %q is in the dial part: %q", u, sec)
				}
				if strings.Contains(errOut, u) {
					t.Logf("note: the user name %q is printed (in the redacted URL): by design of redactURL", u)
				}
			}
			if tc.wants != nil {
				adv79CheckStates(t, errOut, tc.wants)
			} else if sec == "" {
				t.Errorf("no dial part: %q", errOut)
			}
		})
	}
}

// 2b. A URL missing its "//" (redis:user:password@host:port) is opaque to
// net/url: no user information, so url.Redacted keeps it whole, and every
// "cannot reach Redis at ..." message prints the password (go-redis then
// dials localhost:6379). Not new in 532dfab; redactURL is what every
// message of connect uses.
func TestAdversary79_OpaqueURLRedacted(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"redis:sen:hunter2-u@127.0.0.1:26379",
		"redis:sen:hunter2-u@127.0.0.1:26379?addr=127.0.0.1:26380",
	} {
		if got := redactURL(u); strings.Contains(got, "hunter2") {
			t.Errorf("redactURL(%q) = %q: the password is kept", u, got)
		}
	}
}

// 3. Repeated failing runs, four at a time, with refused, silent, hung,
// unresolvable and IPv6 Sentinels: no goroutine of dialSentinels is left
// once the runs return, and the goroutines come back down within 10 s.
func TestAdversary79_NoGoroutinesLeft(t *testing.T) {
	refused, silent, hung := adv77Dead(t), silentAddr(t), adv79Hung(t)
	url := "redis://" + refused + "?addr=" + silent + "&addr=" + hung + "&addr=sentinel-c.adv79.invalid:26379&addr=[::1]:1&password=hunter2-q"
	count := func() (int, string) {
		buf := make([]byte, 4<<20)
		return runtime.NumGoroutine(), string(buf[:runtime.Stack(buf, true)])
	}
	before := settleGoroutines(2*time.Second, 0)
	const waves, each = 3, 4
	start := time.Now()
	for w := range waves {
		var wg sync.WaitGroup
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, out, errOut, took, gap := adv79Timed(t, "", "list", "-timeout", adv79Timeout.String(), "-sentinel", "mymaster", "-url", url)
				if code != exitFailure || strings.Contains(out+errOut, "hunter2") || adv79Section(errOut) == "" {
					t.Errorf("wave %d run %d: exit %d after %v: %q %q", w, i, code, took, out, errOut)
				}
				adv79Late(t, fmt.Sprintf("wave %d run %d", w, i), took, gap)
			}()
		}
		wg.Wait()
		if _, stacks := count(); strings.Contains(stacks, "dialSentinels") {
			t.Errorf("wave %d: a dialSentinels goroutine is left after the runs returned:\n%s", w, stacks)
		}
	}
	took := time.Since(start)
	peak := runtime.NumGoroutine()
	after := settleGoroutines(10*time.Second, before+5)
	t.Logf("%d runs in %v; goroutines: %d before, %d right after, %d after settling", waves*each, took.Round(time.Millisecond), before, peak, after)
	if after > before {
		_, stacks := count()
		t.Logf("left after settling:\n%s", stacks)
	}
	if after > before+5 {
		_, stacks := count()
		t.Errorf("goroutines: %d before, %d ten seconds after the runs\n%s", before, after, stacks)
	}
}

// 4. Real Sentinels answer, the primary is paused (SIGSTOP, no failover):
// the message must not say that a Sentinel refused the connection; where
// it dials again, each real Sentinel took the connection. Also with a
// refusing address first (only that one refused) and with one real
// Sentinel paused too (its port still takes connections).
func TestAdversary79_PrimaryPausedSentinelsHealthy(t *testing.T) {
	t.Parallel()
	sn, url := adv78PausedPrimary(t)
	addrs := sn.SentinelAddrs()
	refused := adv77Dead(t)
	run := func(t *testing.T, url string, wants []adv79Want, args ...string) {
		t.Helper()
		full := append(args[:1:1], append([]string{"-timeout", adv79Timeout.String(), "-sentinel", sn.Name, "-url", url}, args[1:]...)...)
		code, out, errOut, took, gap := adv79Timed(t, "", full...)
		t.Logf("%v: exit %d after %v: stdout %q stderr %q", args, code, took.Round(time.Millisecond), out, errOut)
		if code != exitFailure {
			t.Errorf("exit %d, want 1", code)
		}
		adv79Late(t, fmt.Sprint(args), took, gap)
		if strings.Contains(out+errOut, "hunter2") {
			t.Errorf("a password is printed: %q", errOut)
		}
		for _, a := range addrs {
			if strings.Contains(errOut, a+" refused") {
				t.Errorf("the Sentinel %s is healthy, but the message says it refused: %q", a, errOut)
			}
		}
		if adv79Section(errOut) != "" {
			adv79CheckStates(t, errOut, wants)
		}
	}
	healthy := []adv79Want{{addrs[0], "took"}, {addrs[1], "took"}, {addrs[2], "took"}}
	// All at once, then the one that pauses a Sentinel the others expect
	// to take connections.
	t.Run("all-healthy", func(t *testing.T) {
		for _, args := range [][]string{{"list"}, {"show", "k"}, {"release", "-yes", "k"}, {"check"}} {
			t.Run("healthy-"+args[0], func(t *testing.T) {
				t.Parallel()
				run(t, url, healthy, args...)
			})
		}
		t.Run("refused-first", func(t *testing.T) {
			t.Parallel()
			run(t, adv78URL(refused, addrs...), append([]adv79Want{{refused, "refused"}}, healthy...), "list")
		})
	})
	t.Run("one-sentinel-paused", func(t *testing.T) {
		sn.Sentinels[1].Pause()
		defer sn.Sentinels[1].Resume()
		run(t, url, healthy, "list")
	})
}
