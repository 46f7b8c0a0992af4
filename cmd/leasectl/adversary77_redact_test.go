package main

// Adversary round 77: leasectl's messages hide the password of the URL,
// the user information's and the failover URL's ?password= (ef2a6eb), on
// every command and error path.

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv77Dead is a loopback address whose port refuses connections until
// the test ends (refusedAddr).
func adv77Dead(t *testing.T) string { return refusedAddr(t, false) }

// adv77Secret is in every password below; no output may contain it (nor
// its percent-encoded spelling, "s3cr%45t").
const adv77Secret = "s3crEt"

func adv77Leaks(out string) bool {
	return strings.Contains(out, adv77Secret) || strings.Contains(out, "s3cr%45t") || strings.Contains(out, "cr%45t")
}

// Every command, against a dead address and a live Sentinel with a master
// name it does not monitor, with the password given each way go-redis
// reads one: the user information (plain, percent-encoded, with '@' and
// ':' encoded) and the failover URL's ?password= (plain, percent-encoded,
// and with the parameter's name percent-encoded, which net/url decodes:
// go-redis reads "pass%77ord=" as password=). Plain text and -json alike:
// no message may print it.
func TestAdversary77_LeasectlRedactsEveryPath(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	live := sn.SentinelAddrs()[0]
	dead := adv77Dead(t)
	type form struct {
		name, url string
		sentinel  bool
	}
	forms := func(addr string) []form {
		return []form{
			{"userinfo", "redis://ops:" + adv77Secret + "@" + addr, false},
			{"userinfo encoded", "redis://ops:s3cr%45t%40x%3Ay@" + addr + "/0", false},
			{"userinfo, sentinel", "redis://sen:" + adv77Secret + "@" + addr + "?username=ops", true},
			{"query", "redis://" + addr + "?username=ops&password=" + adv77Secret, true},
			{"query encoded", "redis://" + addr + "?password=s3cr%45t&username=ops", true},
			{"query first then dial_timeout", "redis://" + addr + "?password=" + adv77Secret + "&dial_timeout=1s", true},
			{"query name encoded", "redis://" + addr + "?username=ops&pass%77ord=" + adv77Secret, true},
			{"query name encoded (p)", "redis://" + addr + "?%70assword=" + adv77Secret, true},
		}
	}
	// Every command against the live Sentinel (an unknown master name);
	// list, show and check against the dead address.
	// go-redis reads each of the query forms as the data nodes' password
	// (so it is one, and messages must hide it).
	for _, f := range forms(dead) {
		if !f.sentinel || !strings.Contains(f.url, "?") || strings.Contains(f.url, "@") {
			continue
		}
		o, err := redis.ParseFailoverURL(f.url)
		if err != nil || !strings.HasPrefix(o.Password, "s3cr") {
			t.Fatalf("%s: go-redis read password %q (%v) from %s", f.name, o.Password, err, f.url)
		}
	}
	cmds := [][]string{
		{"list"},
		{"list", "-json"},
		{"show", "k"},
		{"show", "-json", "k"},
		{"release", "-yes", "k"},
		{"release", "-id", "0123456789abcdef0123456789abcdef", "k"},
		{"watch", "-for", "1s"},
		{"watch", "-json", "-for", "1s"},
		{"check"},
	}
	for _, where := range []struct{ name, addr, master string }{{"dead", dead, sn.Name}, {"unknown master", live, "nosuchmaster"}} {
		for _, f := range forms(where.addr) {
			if where.name == "unknown master" && !f.sentinel {
				continue
			}
			for _, cmd := range cmds {
				if where.name == "dead" && cmd[0] != "list" && cmd[0] != "check" && cmd[0] != "show" {
					continue // every command is tried against the live Sentinel; a dead address costs a dial timeout each
				}
				args := append([]string{cmd[0], "-timeout", "1s", "-url", f.url}, cmd[1:]...)
				if f.sentinel {
					args = append([]string{cmd[0], "-timeout", "1s", "-sentinel", where.master, "-url", f.url}, cmd[1:]...)
				}
				name := where.name + "/" + f.name + "/" + strings.Join(cmd, " ")
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					start := time.Now()
					code, out, errOut := leasectl(t, "", args...)
					if code == 0 {
						t.Errorf("exit 0 against %s", where.name)
					}
					if adv77Leaks(out + errOut) {
						t.Errorf("the password is printed (exit %d):\nstdout: %s\nstderr: %s", code, out, errOut)
					}
					if time.Since(start) > 15*time.Second {
						t.Errorf("took %v with -timeout 1s", time.Since(start))
					}
				})
			}
		}
	}
}

// Passwords typed into the URL without percent-encoding a '&' or '#': the
// URL then means something else (go-redis reads the password up to the
// '&' or '#'), and leasectl refuses it or fails to connect; its message
// must still not print the rest of the password that was typed.
func TestAdversary77_LeasectlRedactsUnencodedDelimiters(t *testing.T) {
	t.Parallel()
	dead := adv77Dead(t)
	for _, tc := range []struct {
		name, url string
		sentinel  bool
	}{
		{"query &", "redis://" + dead + "?password=ab&" + adv77Secret, true},
		{"query #", "redis://" + dead + "?password=ab#" + adv77Secret, true},
		{"userinfo #", "redis://ops:ab#" + adv77Secret + "@" + dead, false},
		{"userinfo ?", "redis://ops:ab?" + adv77Secret + "@" + dead, false},
		{"userinfo /", "redis://ops:ab/" + adv77Secret + "@" + dead, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"list", "-timeout", "1s", "-url", tc.url}
			if tc.sentinel {
				args = []string{"list", "-timeout", "1s", "-sentinel", "m", "-url", tc.url}
			}
			code, out, errOut := leasectl(t, "", args...)
			t.Logf("exit %d: %q", code, strings.TrimSpace(errOut))
			if code == 0 {
				t.Errorf("exit 0")
			}
			if adv77Leaks(out + errOut) {
				t.Errorf("part of the password typed is printed: %q", strings.TrimSpace(errOut))
			}
		})
	}
}
