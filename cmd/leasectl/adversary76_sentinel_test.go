package main

// Adversary round 76 (leasectl): -sentinel MASTER (e08ce4a).

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

const adv76Rules = "~lease:* &lease:* &lease:{*}:c -@all +ping +scan +evalsha +eval +get +set +del +exists +pttl +pexpire +time +type +publish +zcard +zrange +zrem +hget +hdel +psubscribe +punsubscribe"

// Through the Sentinels, with the data nodes' ACL user (README's leasectl
// line) in the failover URL's query: list, show, watch, check and release
// before and after a failover; the commands reach the current primary.
func TestAdversary76_LeasectlSentinelCommands(t *testing.T) {
	t.Parallel()
	const ttl = 6 * time.Second
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	sn.ACLUser(t, "ops76", "s3cr3t-76", strings.Fields(adv76Rules)...)
	svc := sn.FailoverClient(t, func(o *redis.FailoverOptions) { o.DialTimeout = 300 * time.Millisecond })
	c, err := lease.New(svc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs := sn.SentinelAddrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=") + "&username=ops76&password=s3cr3t-76"
	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, out, errOut := leasectl(t, "", append(args[:1:1], append([]string{"-sentinel", sn.Name, "-url", url}, args[1:]...)...)...)
		if strings.Contains(out+errOut, "s3cr3t-76") {
			t.Errorf("leasectl %v printed the data nodes' password: %s%s", args, out, errOut)
		}
		return code, out, errOut
	}
	h1 := a17Hold(t, c, "adv76:a", lease.Spec{TTL: ttl, Deadline: time.Minute})
	a17Hold(t, c, "adv76:b", lease.Spec{TTL: ttl, Deadline: time.Minute, Fence: true})

	check := func(when string) {
		t.Helper()
		if code, out, errOut := run("list", "adv76:*"); code != 0 || !strings.Contains(out, "adv76:a") || !strings.Contains(out, "adv76:b") {
			t.Errorf("%s: list: exit %d %q %q", when, code, out, errOut)
		}
		if code, out, errOut := run("show", "adv76:b"); code != 0 || !strings.Contains(out, "adv76:b") {
			t.Errorf("%s: show: exit %d %q %q", when, code, out, errOut)
		}
		if code, out, errOut := run("watch", "-for", "1500ms", "-interval", "300ms", "adv76:*"); code != 0 || !strings.Contains(out, "adv76:a") {
			t.Errorf("%s: watch: exit %d %q %q", when, code, out, errOut)
		}
	}
	check("before the failover")
	// check through the Sentinels, with the default user: it passes.
	if code, out, errOut := leasectl(t, "", "check", "-sentinel", sn.Name, "-url", "redis://"+addrs[0]); code != 0 {
		t.Errorf("check -sentinel (default user): exit %d %q %q", code, out, errOut)
	}

	_, np := a75cFailover(t, sn)
	time.Sleep(ttl / 3)
	check("after the failover")
	code, out, errOut := run("release", "-yes", "adv76:a")
	if code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("release after the failover: exit %d %q %q", code, out, errOut)
	}
	if v := np.Client(t).Get(ctx, "lease:{adv76:a}:l").Val(); v != "" {
		t.Errorf("released through -sentinel, but the new primary %s still holds %q", np.Addr(), v)
	}
	select {
	case cause := <-h1.cause:
		t.Logf("holder told: %v", cause)
	case <-time.After(ttl/3 + 2*time.Second):
		t.Errorf("the holder was not told of the release")
	}
}

// Wrong master name, Sentinels down, -cluster with -sentinel: exit codes,
// and no password (the Sentinel's in the user info, the data nodes' in
// ?password=) in any message.
func TestAdversary76_LeasectlSentinelErrors(t *testing.T) {
	t.Parallel()
	sn := leasetest.StartSentinel(t)
	addrs := sn.SentinelAddrs()
	dead := refusedAddr(t, false)
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"wrong master", []string{"list", "-timeout", "2s", "-sentinel", "nosuchmaster", "-url", "redis://" + addrs[0] + "?username=ops&password=hunter2-q"}, 1},
		{"sentinels down", []string{"list", "-timeout", "2s", "-sentinel", sn.Name, "-url", "redis://" + dead + "?username=ops&password=hunter2-q"}, 1},
		{"sentinels down, userinfo", []string{"show", "-timeout", "2s", "-sentinel", sn.Name, "-url", "redis://sen:hunter2-u@" + dead + "?password=hunter2-q", "k"}, 1},
		{"data nodes' password wrong", []string{"list", "-timeout", "2s", "-sentinel", sn.Name, "-url", "redis://" + addrs[0] + "?username=nobody&password=hunter2-q"}, 1},
		{"bad option", []string{"list", "-sentinel", sn.Name, "-url", "redis://" + addrs[0] + "?password=hunter2-q&bogus=1"}, 2},
		{"cluster and sentinel", []string{"list", "-cluster", "-sentinel", sn.Name, "-url", "redis://" + addrs[0] + "?password=hunter2-q"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, out, errOut := leasectl(t, "", tc.args...)
			t.Logf("exit %d after %v: %q %q", code, time.Since(start).Round(time.Millisecond), out, errOut)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if strings.Contains(out+errOut, "hunter2") {
				t.Errorf("the message prints a password: %s", errOut)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("took %v with -timeout 2s", time.Since(start))
			}
		})
	}
}
