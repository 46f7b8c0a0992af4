package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// leasectl check with a service's user: the README's least-privilege
// recipe passes every step (exit 0); the same without +hget fails the
// handover step, naming HGET (exit 1).
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	recipe := "~lease:* &lease:* -@all +evalsha +eval +get +set +pttl +pexpire +del +exists +time +publish +zadd +zrem +zrange +hset +hget +hdel +subscribe +unsubscribe +pubsub|numsub"
	for _, u := range []struct{ name, rules string }{
		{"leases", recipe},
		{"nohget", strings.Replace(recipe, " +hget", "", 1)},
	} {
		args := []any{"ACL", "SETUSER", u.name, "reset", "on", ">pw"}
		for _, r := range strings.Fields(u.rules) {
			args = append(args, r)
		}
		if err := admin.Do(context.Background(), args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	url := strings.Replace(srv.URL(), "redis://", "redis://leases:pw@", 1)
	code, out, errOut := leasectl(t, "", "check", "-url", url)
	t.Logf("leases:\n%s%s", out, errOut)
	if code != 0 || strings.Count(out, "\nok ")+strings.Count(out[:3], "ok ") != 7 || strings.Contains(out, "FAILED") {
		t.Errorf("leasectl check with the recipe's user: exit %d, want 0 and 7 steps ok", code)
	}
	url = strings.Replace(srv.URL(), "redis://", "redis://nohget:pw@", 1)
	code, out, errOut = leasectl(t, "", "check", "-url", url)
	t.Logf("nohget:\n%s%s", out, errOut)
	if code != 1 || !strings.Contains(out, "FAILED") || !strings.Contains(out, "calls HGET") || !strings.Contains(errOut, "a step failed") {
		t.Errorf("leasectl check without +hget: exit %d, want 1, a failed step naming HGET", code)
	}
	if code, _, errOut := leasectl(t, "", "check", "-url", url, "extra"); code != 2 || !strings.Contains(errOut, "no arguments") {
		t.Errorf("leasectl check extra: exit %d, %q; want 2", code, errOut)
	}
}
