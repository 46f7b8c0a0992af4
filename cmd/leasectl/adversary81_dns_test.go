package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 81: leasectl in a process whose resolver never answers (or answers
// some names and not others), every command, every kind of deployment,
// URLs with host names. go-redis v9.22.0 looks a client's address up in
// DNS while it makes the client, for 2 s on context.Background.

const (
	// adv81Unresolved is a name in no hosts file: with the silent
	// resolver its lookup lasts until its deadline.
	adv81Unresolved = "adv81-nosuch.example"
	// adv81Timeout is the -timeout of the runs that must fail, and
	// adv81Slack what they may take beyond it: the child's start and exit
	// under -race on a loaded machine, closeSoon's 100 ms and
	// dialSentinels' 100 ms. go-redis's stall is 2 s: a run held by it
	// takes 2 s or more.
	adv81Timeout = time.Second
	adv81Slack   = 700 * time.Millisecond
	// adv81Secret is in every URL's password; no output may hold it.
	adv81Secret = "hunter2"
)

// adv81HostsName is a name other than localhost that /etc/hosts maps to
// 127.0.0.1, or "".
func adv81HostsName() string {
	f, err := os.Open("/etc/hosts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.SplitN(sc.Text(), "#", 2)[0])
		if len(fields) < 2 || fields[0] != "127.0.0.1" {
			continue
		}
		for _, name := range fields[1:] {
			if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
				return name
			}
		}
	}
	return ""
}

func adv81Port(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// adv81Commands are the commands run against each deployment: each one
// on key (held by the test where the deployment allows it).
func adv81Commands(key string) [][]string {
	return [][]string{
		{"list"},
		{"show", key},
		{"release", "-yes", key},
		{"watch", "-for", "300ms", "-interval", "100ms"},
		{"check"},
	}
}

// adv81Args puts the connection flags after the command's name.
func adv81Args(cmd []string, conn ...string) []string {
	return append(append(cmd[:1:1], conn...), cmd[1:]...)
}

// Every command, every kind of deployment, with the silent resolver and
// -timeout 1s: a URL whose host is an address, localhost or another name
// of /etc/hosts reaches Redis (plain, TLS with the name checked against
// the certificate, Cluster); a URL whose name does not resolve fails
// within -timeout, saying where, without its password; a Sentinel
// deployment fails within -timeout, saying that go-redis was still
// making its failover client (its lookup of "FailoverClient" never ends
// here). Before 7722eea the plain and TLS runs with an unresolved name
// took 3.0 s and the Sentinel runs 2.0-3.2 s (the client's lookup, 2 s,
// came before -timeout's clock: 20 of these subtests failed). A Cluster
// named by an unresolved seed is TestAdversary81_ClusterSeedNameUnresolved.
func TestAdversary81_SilentResolverEveryCommand(t *testing.T) {
	t.Parallel()
	plain := leasetest.StartRedis(t, "--requirepass", adv81Secret)
	tlsSrv := leasetest.StartTLS(t, "--requirepass", adv81Secret)
	cl := leasetest.StartCluster(t, 3)
	sn, _ := adv78Deployment(t)
	ca, sa := cl.Addrs(), sn.SentinelAddrs()
	pp, tp := adv81Port(plain.Addr()), adv81Port(tlsSrv.Addr())
	type kind struct {
		name string
		conn []string
		ok   bool // reaches Redis
		want []string
	}
	kinds := []kind{
		{"plain-ip", []string{"-url", "redis://:" + adv81Secret + "@" + plain.Addr()}, true, nil},
		{"plain-localhost", []string{"-url", "redis://:" + adv81Secret + "@localhost:" + pp}, true, nil},
		{"plain-unresolved", []string{"-url", "redis://:" + adv81Secret + "@" + adv81Unresolved + ":" + pp}, false,
			[]string{"cannot reach Redis at redis://:xxxxx@" + adv81Unresolved + ":" + pp}},
		{"tls-localhost", []string{"-url", "rediss://:" + adv81Secret + "@localhost:" + tp, "-cacert", tlsSrv.CAFile()}, true, nil},
		{"tls-unresolved", []string{"-url", "rediss://:" + adv81Secret + "@" + adv81Unresolved + ":" + tp, "-cacert", tlsSrv.CAFile()}, false,
			[]string{"cannot reach Redis at rediss://:xxxxx@" + adv81Unresolved + ":" + tp}},
		{"cluster-localhost", []string{"-cluster", "-url", "redis://localhost:" + adv81Port(ca[0]) + "?addr=localhost:" + adv81Port(ca[1])}, true, nil},
		{"sentinel-localhost", []string{"-sentinel", sn.Name, "-url", adv78URL("localhost:"+adv81Port(sa[0]), "localhost:"+adv81Port(sa[1]))}, false,
			[]string{"no answer within -timeout 1s", `"FailoverClient"`, "is the resolver answering?", "localhost:" + adv81Port(sa[0]) + " took the connection"}},
		{"sentinel-unresolved", []string{"-sentinel", sn.Name, "-url", adv78URL(adv81Unresolved+":"+adv81Port(sa[0]), sa[1])}, false,
			[]string{"no answer within -timeout 1s", `"FailoverClient"`, adv81Unresolved + ":" + adv81Port(sa[0]) + ": the name's lookup did not end within 100ms"}},
	}
	if name := adv81HostsName(); name != "" {
		kinds = append(kinds, kind{"plain-hostsfile", []string{"-url", "redis://:" + adv81Secret + "@" + name + ":" + pp}, true, nil})
	}
	for _, k := range kinds {
		for _, cmd := range adv81Commands("adv81:free") {
			t.Run(k.name+"/"+cmd[0], func(t *testing.T) {
				t.Parallel()
				args := adv81Args(cmd, append([]string{"-timeout", adv81Timeout.String()}, k.conn...)...)
				code, out, errOut, took := adv81Child(t, "main", "silent", nil, args...)
				t.Logf("exit %d after %v: stdout %.300q stderr %.600q", code, took.Round(time.Millisecond), out, errOut)
				if strings.Contains(out+errOut, adv81Secret) {
					t.Errorf("a password is printed")
				}
				if !k.ok {
					if code != exitFailure {
						t.Errorf("exit %d, want 1", code)
					}
					if took > adv81Timeout+adv81Slack {
						t.Errorf("took %v with -timeout %v", took, adv81Timeout)
					}
					for _, w := range k.want {
						if !strings.Contains(errOut, w) {
							t.Errorf("the message does not say %q", w)
						}
					}
					return
				}
				// Reached Redis: release of a free key says so (exit
				// 1), the rest succeed. check runs steps of its own,
				// each bounded by -timeout.
				switch {
				case cmd[0] == "release":
					if code != exitFailure || !strings.Contains(errOut, "is not held") {
						t.Errorf("exit %d, want 1 saying the key is not held", code)
					}
				case code != exitOK:
					t.Errorf("exit %d, want 0", code)
				}
				if cmd[0] != "check" && took > adv81Timeout+adv81Slack {
					t.Errorf("took %v with -timeout %v: a lookup of the host's name before the command?", took, adv81Timeout)
				}
			})
		}
	}
}

// The Sentinel deployment works through the silent resolver when
// -timeout leaves room for go-redis's 2 s lookup of "FailoverClient",
// also with the Sentinels named localhost: every command, a held lease
// shown and released.
func TestAdversary81_SilentResolverSentinelLongTimeout(t *testing.T) {
	t.Parallel()
	sn, c := adv78Deployment(t)
	sa := sn.SentinelAddrs()
	url := adv78URL("localhost:"+adv81Port(sa[0]), "localhost:"+adv81Port(sa[1]), sa[2])
	h := a17Hold(t, c, "adv81:held", lease.Spec{TTL: 30 * time.Second, Deadline: 2 * time.Minute})
	defer h.stop()
	for _, cmd := range adv81Commands("adv81:held") {
		args := adv81Args(cmd, "-timeout", "4s", "-sentinel", sn.Name, "-url", url)
		code, out, errOut, took := adv81Child(t, "main", "silent", nil, args...)
		t.Logf("%s: exit %d after %v: stdout %.300q stderr %.300q", cmd[0], code, took.Round(time.Millisecond), out, errOut)
		if code != exitOK {
			t.Errorf("%s: exit %d, want 0", cmd[0], code)
		}
		if strings.Contains(out+errOut, "hunter2") {
			t.Errorf("%s: a password is printed", cmd[0])
		}
		// go-redis's lookup (2 s), then the command; check's steps take
		// about 2 s more.
		limit := 3500 * time.Millisecond
		if cmd[0] == "check" {
			limit = 6 * time.Second
		}
		if took > limit {
			t.Errorf("%s took %v", cmd[0], took)
		}
		switch cmd[0] {
		case "show":
			if !strings.Contains(out, "adv81:held") || strings.Contains(out, "(free)") {
				t.Errorf("show does not show the held lease: %q", out)
			}
		case "release":
			if !strings.Contains(out+errOut, "released") {
				t.Errorf("release does not say released: %q %q", out, errOut)
			}
		}
	}
}

// A Cluster named by a seed whose name does not resolve, with the silent
// resolver: -timeout 1s took 2.0 s. ping asks every seed through a redis.NewClient of its own
// made without noMaintNotifications, so go-redis looks the seed's name up
// for 2 s as it makes it, on context.Background, and ping waits for
// every seed's answer. Interrupting it (Ctrl-C) waits as long.
func TestAdversary81_ClusterSeedNameUnresolved(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ca := cl.Addrs()
	url := "redis://leasectl:" + adv81Secret + "@" + adv81Unresolved + ":" + adv81Port(ca[0])
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		code, out, errOut, took := adv81Child(t, "main", "silent", nil, "list", "-timeout", adv81Timeout.String(), "-cluster", "-url", url)
		t.Logf("exit %d after %v: stdout %q stderr %q", code, took.Round(time.Millisecond), out, errOut)
		if code != exitFailure {
			t.Errorf("exit %d, want 1", code)
		}
		if strings.Contains(out+errOut, adv81Secret) {
			t.Errorf("a password is printed")
		}
		if !strings.Contains(errOut, "cannot reach Redis at redis://leasectl:xxxxx@"+adv81Unresolved) {
			t.Errorf("the message does not say where")
		}
		if took > adv81Timeout+adv81Slack {
			t.Errorf("took %v with -timeout %v", took, adv81Timeout)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		t.Parallel()
		r := adv81RunInterrupt(t, "silent", 300*time.Millisecond, "list", "-timeout", "10s", "-cluster", "-url", url)
		if r.Code != exitFailure {
			t.Errorf("exit %d, want 1", r.Code)
		}
		if took := time.Duration(r.TookMS) * time.Millisecond; took > 300*time.Millisecond+adv81Slack {
			t.Errorf("took %v after an interruption at 300ms", took)
		}
	})
}

// One Sentinel named by a name whose lookup never ends, the others
// healthy, with a resolver that answers every other name at once (so
// "FailoverClient" costs nothing): go-redis's failover client asks every
// Sentinel at once and goes on when all have answered or failed, and it
// makes a client for each as it asks, which looks the name up for 2 s on
// context.Background. A Sentinel that refuses connections or never
// answers does not stop the others (round 78: its share of -timeout); this
// one does: every command fails at -timeout 1s, and at -timeout 4s takes
// 2 s. leasectl cannot tell go-redis not to look (FailoverOptions has no
// MaintNotificationsConfig for its Sentinel clients). What is asserted
// always: the failure ends within -timeout, names the lookup that did not
// end, prints no password, and -timeout 4s succeeds.
func TestAdversary81_SentinelNameUnansweredOthersHealthy(t *testing.T) {
	t.Parallel()
	const hung = "adv81-hung.test"
	dns := adv81StartDNS(t, nil, hung)
	sn, c := adv78Deployment(t)
	sa := sn.SentinelAddrs()
	h := a17Hold(t, c, "adv81:sn", lease.Spec{TTL: 30 * time.Second, Deadline: 2 * time.Minute})
	t.Cleanup(h.stop) // after the parallel subtests
	t.Cleanup(func() {
		if dns.questions("FailoverClient") == 0 || dns.questions(hung) == 0 {
			t.Errorf("the resolver was not asked (FailoverClient %d, %s %d): the test cannot tell", dns.questions("FailoverClient"), hung, dns.questions(hung))
		}
	})
	for _, tc := range []struct{ name, url string }{
		{"hung-first", adv78URL(hung+":"+adv81Port(sa[0]), sa[1:]...)},
		{"hung-last", adv78URL(sa[0], sa[1], hung+":"+adv81Port(sa[2]))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t.Run("timeout-4s", func(t *testing.T) {
				code, out, errOut, took := adv81Child(t, "main", dns.addr, nil, "show", "-timeout", "4s", "-sentinel", sn.Name, "-url", tc.url, "adv81:sn")
				t.Logf("exit %d after %v: stdout %q stderr %.600q", code, took.Round(time.Millisecond), out, errOut)
				if code != exitOK || !strings.Contains(out, "adv81:sn") || strings.Contains(out, "(free)") {
					t.Errorf("exit %d, want 0 with the held lease shown", code)
				}
				if took > 3500*time.Millisecond {
					t.Errorf("took %v", took)
				}
			})
			t.Run("timeout-1s", func(t *testing.T) {
				code, out, errOut, took := adv81Child(t, "main", dns.addr, nil, "show", "-timeout", adv81Timeout.String(), "-sentinel", sn.Name, "-url", tc.url, "adv81:sn")
				t.Logf("exit %d after %v: stdout %q stderr %.600q", code, took.Round(time.Millisecond), out, errOut)
				if strings.Contains(out+errOut, "hunter2") {
					t.Errorf("a password is printed")
				}
				if took > adv81Timeout+adv81Slack {
					t.Errorf("took %v with -timeout %v", took, adv81Timeout)
				}
				if code != exitOK && !strings.Contains(errOut, hung+":"+adv81Port(sa[0])+": the name's lookup did not end") &&
					!strings.Contains(errOut, hung+":"+adv81Port(sa[2])+": the name's lookup did not end") {
					t.Errorf("a failure that does not name the lookup that did not end")
				}
				if code != exitOK {
					// go-redis's limit, not leasectl's (see above):
					// bounded and named, which is what is asserted.
					t.Logf("exit %d though two Sentinels answered: go-redis waits for its 2 s lookup of the hung name (a known limit of v9.22.0)", code)
				}
			})
		})
	}
}

// adv81RunInterrupt runs leasectl in an interrupt child whose run's
// context is cancelled after after.
func adv81RunInterrupt(t *testing.T, dns string, after time.Duration, args ...string) adv81Interrupt {
	t.Helper()
	code, out, errOut, took := adv81Child(t, "interrupt", dns, []string{adv81CancelEnv + "=" + strconv.FormatInt(after.Milliseconds(), 10)}, args...)
	var r adv81Interrupt
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("interrupt child: exit %d after %v, %q %q (%v)", code, took, out, errOut, err)
	}
	t.Logf("exit %d after %d ms: stdout %q stderr %q", r.Code, r.TookMS, r.Stdout, r.Stderr)
	if strings.Contains(r.Stdout+r.Stderr, adv81Secret) {
		t.Errorf("a password is printed")
	}
	return r
}

// Interrupted (Ctrl-C cancels run's context) while go-redis is still
// making the client, with a -timeout far off: leasectl ends at once and
// says it was interrupted, not that -timeout passed. A plain client named
// by an unresolved name is interrupted in its dial.
func TestAdversary81_InterruptWhileMakingClient(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	sa := sn.SentinelAddrs()
	const after = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		conn []string
	}{
		{"sentinel", []string{"-sentinel", sn.Name, "-url", adv78URL(sa[0], sa[1:]...)}},
		{"plain-unresolved", []string{"-url", "redis://:" + adv81Secret + "@" + adv81Unresolved + ":6399"}},
	} {
		for _, cmd := range adv81Commands("adv81:i") {
			t.Run(tc.name+"/"+cmd[0], func(t *testing.T) {
				t.Parallel()
				r := adv81RunInterrupt(t, "silent", after, adv81Args(cmd, append([]string{"-timeout", "10s"}, tc.conn...)...)...)
				if r.Code != exitFailure {
					t.Errorf("exit %d, want 1", r.Code)
				}
				if took := time.Duration(r.TookMS) * time.Millisecond; took > after+adv81Slack {
					t.Errorf("took %v after an interruption at %v", took, after)
				}
				if strings.Contains(r.Stderr, "within -timeout 10s") {
					t.Errorf("the message says -timeout 10s passed: it did not")
				}
				if tc.name == "sentinel" && !strings.Contains(r.Stderr, "interrupted") {
					t.Errorf("the message does not say it was interrupted")
				}
			})
		}
	}
}
