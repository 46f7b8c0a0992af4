package lease_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// serverCalls is the server's count of commands by name (INFO
// commandstats): the commands clients sent and those scripts ran.
func serverCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls
}

// An uncontended call's cost on the server is the commands it runs there,
// scripts' included: every one is work on the single-threaded server, on
// the path of every call. The counts are exact (one server of this test's
// own, statistics reset before each shape), so that a script that grows a
// command on the uncontended path fails here rather than as noise in a
// benchmark. A free key is taken with SET NX, in the acquire script too
// (not a read, then a write), and a call that never queued has no queue
// entry to take out.
func TestUncontendedServerCommands(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, _ := newClient(t, rdb)
	ctx := context.Background()
	nop := func(context.Context) error { return nil }
	// The release, every shape: GET (the holder), SET (its tombstone),
	// ZRANGE (the queue's head: none), DEL. A call that may have queued
	// takes its entry out only when the head it read says someone is
	// queued (its grant normally did already, but not after Redis lost
	// writes: TestAdversary23_StaleRestartLeavesGrantedEntry); an empty
	// queue holds no entry of its.
	release := map[string]int64{"evalsha": 1, "get": 1, "set": 1, "zrange": 1, "del": 1}
	for _, tc := range []struct {
		name string
		spec lease.Spec
		want map[string]int64 // the acquire's
	}{
		// A native SET NX PX, as a plain lock.
		{"plain", lease.Spec{}, map[string]int64{"set": 1}},
		// TIME for the token, SET NX, and the counter written with its old
		// value read in one command (SET GET): the time token stands.
		{"fenced", lease.Spec{Fence: true}, map[string]int64{"evalsha": 1, "time": 1, "set": 2}},
		// SET NX, and ZREM (no entry: nothing more).
		{"waiting", lease.Spec{Wait: time.Second}, map[string]int64{"evalsha": 1, "set": 1, "zrem": 1}},
		{"fenced, waiting", lease.Spec{Fence: true, Wait: time.Second}, map[string]int64{"evalsha": 1, "time": 1, "set": 2, "zrem": 1}},
	} {
		s := tc.spec
		s.TTL, s.Deadline = 10*time.Second, time.Minute
		key := uniqueKey(t) + strings.ReplaceAll(tc.name, ", ", "-")
		// Once first: the scripts are loaded (NOSCRIPT, EVAL) and the
		// connection is made.
		if err := c.Do(ctx, key, s, nop); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		const n = 10
		for range n {
			if err := c.Do(ctx, key, s, nop); err != nil {
				t.Fatal(err)
			}
		}
		got := serverCalls(t, rdb)
		delete(got, "config|resetstat")
		want := map[string]int64{}
		for _, m := range []map[string]int64{tc.want, release} {
			for k, v := range m {
				want[k] += v * n
			}
		}
		var total, wantTotal int64
		for _, v := range got {
			total += v
		}
		for _, v := range want {
			wantTotal += v
		}
		t.Logf("%s: %d server commands per call: %v", tc.name, total/n, got)
		if total != wantTotal {
			t.Errorf("%s: %d server commands per call, want %d: got %v, want %v", tc.name, total/n, wantTotal/n, got, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s ran %d times in %d calls, want %d (all: %v)", tc.name, k, got[k], n, v, got)
			}
		}
	}
}
