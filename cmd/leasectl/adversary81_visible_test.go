package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Plain and Cluster clients are made with maintenance notifications off
// and an endpoint type given (noMaintNotifications, 7722eea), so go-redis
// does not look their host up as it makes them. Nothing else a user sees
// may change with it: a rediss:// URL's host name is still the name the
// certificate is checked against (a name the certificate does not hold
// fails, saying so; one it holds works), a Cluster reached through one
// seed named localhost still follows MOVED to the masters of keys it does
// not own, and the README's operator ACL user (no +hello, no +client)
// still runs the commands. (What does change, with the redis-server here,
// 7.0.15: a connection no longer sends CLIENT MAINT_NOTIFICATIONS, which
// that server rejects as an unknown subcommand, one error reply fewer in
// its INFO errorstats per connection; go-redis's auto mode ignored the
// error.)
func TestAdversary81_NotificationsOffNoVisibleChange(t *testing.T) {
	t.Parallel()
	t.Run("tls-names", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.StartTLS(t)
		port := adv81Port(srv.Addr())
		for _, host := range []string{"localhost", "127.0.0.1"} {
			code, out, errOut := leasectl(t, "", "list", "-timeout", "2s", "-cacert", srv.CAFile(), "-url", "rediss://"+host+":"+port)
			if code != exitOK {
				t.Errorf("rediss://%s (in the certificate): exit %d: %q %q", host, code, out, errOut)
			}
		}
		// A name for 127.0.0.1 that the certificate does not hold, from a
		// resolver of the test's own (in a child process).
		const name = "adv81-notincert.test"
		dns := adv81StartDNS(t, map[string]string{name: "127.0.0.1"})
		code, out, errOut, took := adv81Child(t, "main", dns.addr, nil, "list", "-timeout", "2s", "-cacert", srv.CAFile(), "-url", "rediss://"+name+":"+port)
		t.Logf("rediss://%s: exit %d after %v: %q %q", name, code, took.Round(time.Millisecond), out, errOut)
		if dns.questions(name) == 0 {
			t.Errorf("the resolver was not asked for %s: the test cannot tell", name)
		}
		if code != exitFailure || !strings.Contains(errOut, "x509") || !strings.Contains(errOut, "not "+name) {
			t.Errorf("rediss://%s, a name the certificate does not hold: exit %d, want 1 with the certificate's error naming it", name, code)
		}
	})
	t.Run("cluster-moved", func(t *testing.T) {
		t.Parallel()
		cl, _, c := clusterWithClient(t)
		seed := "redis://localhost:" + adv81Port(cl.Addrs()[0])
		var keys []string
		for i := range 6 {
			k := fmt.Sprintf("adv81:moved:%d", i)
			a17Hold(t, c, k, lease.Spec{TTL: 30 * time.Second, Deadline: 2 * time.Minute})
			keys = append(keys, k)
		}
		for _, k := range keys {
			code, out, errOut := leasectl(t, "", "show", "-timeout", "2s", "-cluster", "-url", seed, k)
			if code != exitOK || strings.Contains(out, "(free)") {
				t.Errorf("show %s through one seed: exit %d: %q %q", k, code, out, errOut)
			}
		}
		code, out, errOut := leasectl(t, "", "list", "-timeout", "2s", "-cluster", "-url", seed, "adv81:moved:*")
		if code != exitOK || strings.Count(out, "adv81:moved:") != len(keys) {
			t.Errorf("list through one seed: exit %d, want every master's %d leases: %q %q", code, len(keys), out, errOut)
		}
		code, out, errOut = leasectl(t, "", "release", "-timeout", "2s", "-yes", "-cluster", "-url", seed, keys[len(keys)-1])
		if code != exitOK || !strings.Contains(out+errOut, "released") {
			t.Errorf("release through one seed: exit %d: %q %q", code, out, errOut)
		}
	})
	t.Run("readme-acl-user", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.StartRedis(t)
		b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		const prefix = "ACL SETUSER leasectl on >secret "
		var rules []string
		for _, line := range strings.Split(string(b), "\n") {
			if r, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				rules = strings.Fields(r)
			}
		}
		if rules == nil {
			t.Fatalf("README.md has no line starting %q", prefix)
		}
		srv.ACLUser(t, "adv81op", "s3cret-adv81", rules...)
		url := "redis://adv81op:s3cret-adv81@localhost:" + adv81Port(srv.Addr())
		for _, cmd := range [][]string{{"list"}, {"show", "adv81:acl"}} {
			code, out, errOut := leasectl(t, "", adv81Args(cmd, "-timeout", "2s", "-url", url)...)
			if code != exitOK || strings.Contains(out+errOut, "s3cret-adv81") {
				t.Errorf("%s as the README's operator user: exit %d: %q %q", cmd[0], code, out, errOut)
			}
		}
	})
}
