package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 81's child processes. TestMain's commands cannot be added to
// without editing main_test.go, so a child of this test binary is told
// what to be by $ADV81_MODE, read in an init function, before TestMain
// and before any test or client exists (net.DefaultResolver is swapped
// there and only there: see leasetest.UseDNS). $ADV81_DNS chooses the
// resolver: "silent" (leasetest.SilentDNS: no query is ever answered) or the
// UDP address of a resolver the parent runs (adv81DNS), which answers some
// names, refuses others at once, and leaves some unanswered.
//
// Modes:
//   - main: leasectl itself (main), exit status and streams as leasectl's.
//   - loop: ADV81_RUNS runs of leasectl in this process with the
//     arguments, then one JSON line (adv81Loop) with each run's time and
//     the process's goroutines before, right after and after settling.
//   - interrupt: one run whose context is cancelled after
//     ADV81_CANCEL_MS (as Ctrl-C cancels main's), then one JSON line.
//   - dnsprobe: how long a lookup of "FailoverClient" took (dnsProbe).
const (
	adv81ModeEnv   = "ADV81_MODE"
	adv81DNSEnv    = "ADV81_DNS"
	adv81RunsEnv   = "ADV81_RUNS"
	adv81CancelEnv = "ADV81_CANCEL_MS"
)

func init() {
	mode := os.Getenv(adv81ModeEnv)
	if mode == "" {
		return
	}
	switch dns := os.Getenv(adv81DNSEnv); dns {
	case "":
	case "silent":
		if err := leasetest.SilentDNS(); err != nil {
			fmt.Fprintln(os.Stderr, "adv81:", err)
			os.Exit(3)
		}
	default:
		leasetest.UseDNS(dns)
	}
	switch mode {
	case "main":
		main()
	case "loop":
		os.Exit(adv81ChildLoop())
	case "interrupt":
		os.Exit(adv81ChildInterrupt())
	case "dnsprobe":
		dnsProbe() // TestSlowResolverBounded's control
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "adv81: unknown mode", mode)
	os.Exit(3)
}

// adv81Loop is what a loop child reports.
type adv81Loop struct {
	Codes                  []int
	TookMS                 []int64
	Stderr                 []string
	Before, After, Settled int
	SettledAfterMS         int64
}

func adv81ChildLoop() int {
	redis.SetLogger(quiet{})
	n, _ := strconv.Atoi(os.Getenv(adv81RunsEnv))
	var r adv81Loop
	r.Before = runtime.NumGoroutine()
	for range n {
		var out, errb strings.Builder
		start := time.Now()
		code := run(context.Background(), os.Args[1:], strings.NewReader(""), &out, &errb, func(string) string { return "" })
		r.TookMS = append(r.TookMS, time.Since(start).Milliseconds())
		r.Codes = append(r.Codes, code)
		r.Stderr = append(r.Stderr, errb.String())
	}
	r.After = runtime.NumGoroutine()
	start := time.Now()
	// go-redis's lookup ends after its 2 s; a client made then is closed.
	r.Settled = settleGoroutines(adv81SettleMax(), r.Before)
	r.SettledAfterMS = time.Since(start).Milliseconds()
	if r.Settled > r.Before+2 {
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 1) // for the parent's log
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

// adv81Interrupt is what an interrupt child reports.
type adv81Interrupt struct {
	Code           int
	TookMS         int64
	Stdout, Stderr string
}

func adv81ChildInterrupt() int {
	redis.SetLogger(quiet{})
	ms, _ := strconv.Atoi(os.Getenv(adv81CancelEnv))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Duration(ms)*time.Millisecond, cancel)
	var out, errb strings.Builder
	start := time.Now()
	code := run(ctx, os.Args[1:], strings.NewReader(""), &out, &errb, func(string) string { return "" })
	b, _ := json.Marshal(adv81Interrupt{Code: code, TookMS: time.Since(start).Milliseconds(), Stdout: out.String(), Stderr: errb.String()})
	fmt.Println(string(b))
	return 0
}

// adv81Child runs this test binary as a child in mode with resolver dns
// ("silent" or an adv81DNS address) and args, and returns its exit code,
// streams and time.
func adv81Child(t *testing.T, mode, dns string, env []string, args ...string) (int, string, string, time.Duration) {
	t.Helper()
	return runAs(t, "adv81", append([]string{adv81ModeEnv + "=" + mode, adv81DNSEnv + "=" + dns}, env...), args...)
}

// adv81DNS is a DNS server on a loopback UDP port for the children: a
// name in answer gets that IPv4 address (and no IPv6 one), a name in hang
// gets no reply at all, every other name NXDOMAIN at once. It counts the
// questions per name.
type adv81DNS struct {
	addr   string
	answer map[string]net.IP
	hang   map[string]bool
	mu     sync.Mutex
	asked  map[string]int
}

func adv81StartDNS(t *testing.T, answer map[string]string, hang ...string) *adv81DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return serveDNS(pc, answer, hang...)
}

// serveDNS answers the DNS questions that come to pc, as adv81DNS says,
// until pc is closed.
func serveDNS(pc net.PacketConn, answer map[string]string, hang ...string) *adv81DNS {
	d := &adv81DNS{addr: pc.LocalAddr().String(), answer: map[string]net.IP{}, hang: map[string]bool{}, asked: map[string]int{}}
	for name, ip := range answer {
		d.answer[strings.ToLower(name)] = net.ParseIP(ip).To4()
	}
	for _, name := range hang {
		d.hang[strings.ToLower(name)] = true
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := d.reply(buf[:n]); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}()
	return d
}

// reply is the answer to query q, or nil for none.
func (d *adv81DNS) reply(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l&0xc0 != 0 || i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qEnd := i + 5
	qtype := binary.BigEndian.Uint16(q[i+1:])
	name := strings.ToLower(strings.Join(labels, "."))
	d.mu.Lock()
	d.asked[name]++
	d.mu.Unlock()
	if d.hang[name] {
		return nil
	}
	ip, known := d.answer[name]
	resp := append([]byte(nil), q[:qEnd]...)
	resp[2] = 0x80 | (q[2] & 0x79) // QR, the query's opcode and RD
	resp[3] = 0x80                 // RA, NOERROR
	binary.BigEndian.PutUint16(resp[4:], 1)
	binary.BigEndian.PutUint16(resp[6:], 0)
	binary.BigEndian.PutUint16(resp[8:], 0)
	binary.BigEndian.PutUint16(resp[10:], 0)
	switch {
	case !known:
		resp[3] |= 3 // NXDOMAIN
	case qtype == 1: // A
		binary.BigEndian.PutUint16(resp[6:], 1)
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4)
		resp = append(resp, ip...)
	}
	return resp
}

// questions returns how often name was asked about.
func (d *adv81DNS) questions(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[strings.ToLower(name)]
}

// adv81SettleMax is how long a loop child waits for its goroutines to
// settle: $ADV81_SETTLE, else 20 s (the resolver's shared lookups of
// "FailoverClient" outlive their callers: about 7.6 s here).
func adv81SettleMax() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("ADV81_SETTLE")); err == nil {
		return d
	}
	return 20 * time.Second
}
