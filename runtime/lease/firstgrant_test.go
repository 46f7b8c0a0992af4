package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// firstGrantHook watches a waiting call's commands: the acquires' last
// argument (1: the first send of the first acquire) and the member each
// release takes out of the queue. With replay set, the first acquire of
// key is carried out once while another identity holds the key (busy: the
// call joins the queue), the key is then freed, and the same command is
// sent again, as go-redis does after a lost reply.
type firstGrantHook struct {
	admin  *redis.Client
	key    string
	replay bool

	mu       sync.Mutex
	firsts   []string // each acquire send's ARGV[9]
	members  []string // each release's ARGV[6]
	queued   int64    // queue entries after the busy first send
	replayed bool
}

func (h *firstGrantHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *firstGrantHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *firstGrantHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || cmd.Name() != "evalsha" && cmd.Name() != "eval" || fmt.Sprint(args[3]) != lockKey(h.key) {
			return next(ctx, cmd)
		}
		// A send answered NOSCRIPT was not carried out (the script is
		// sent again by EVAL): not recorded.
		noScript := func(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
		switch fmt.Sprint(args[2]) {
		case "4": // the acquire
			err := next(ctx, cmd)
			if noScript(err) {
				return err
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			h.firsts = append(h.firsts, fmt.Sprint(args[len(args)-1]))
			if !h.replay || h.replayed {
				return err
			}
			h.replayed = true
			// Carried out while another identity held the key: busy, and
			// the call joined the queue. The reply is lost; go-redis
			// sends the command again, and the key is free by then.
			h.queued = h.admin.ZCard(ctx, "lease:{"+h.key+"}:q").Val()
			h.admin.Del(ctx, lockKey(h.key))
			err = next(ctx, cmd)
			h.firsts = append(h.firsts, fmt.Sprint(args[len(args)-1]))
			return err
		case "6": // the release
			err := next(ctx, cmd)
			if !noScript(err) {
				h.mu.Lock()
				h.members = append(h.members, fmt.Sprint(args[3+6+5]))
				h.mu.Unlock()
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// A call granted by the one send of its first acquire never queued (only
// a busy answer queues): neither that acquire nor the call's release takes
// an entry out of the queue, and the server runs no ZREM for it
// (TestUncontendedServerCommands counts the commands). When the same
// acquire was carried out before (busy: the call queued) and sent again
// after a lost reply, the second send says so, and both the grant and the
// release take the entry out, as after any busy answer, so that a
// release never hands the key to a call that has finished.
func TestFirstGrantLeavesNoEntry(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	spec := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 5 * time.Second, Fence: true}
	queue := func(key string) (int64, int64) {
		return admin.ZCard(ctx, "lease:{"+key+"}:q").Val(), admin.HLen(ctx, "lease:{"+key+"}:x").Val()
	}
	for _, tc := range []struct {
		name              string
		replay, noScript  bool
		wantFirsts        []string
		wantMemberRemoved bool
	}{
		{name: "first send granted", wantFirsts: []string{"1"}},
		// NOSCRIPT (not carried out), then EVAL: still the first send
		// that was carried out.
		{name: "first send granted after NOSCRIPT", noScript: true, wantFirsts: []string{"1"}},
		{name: "re-sent after a busy answer", replay: true, wantFirsts: []string{"1", "0"}, wantMemberRemoved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			rdb := srv.Client(t)
			h := &firstGrantHook{admin: admin, key: key, replay: tc.replay}
			rdb.AddHook(h)
			c, _ := newClient(t, rdb)
			if tc.replay {
				if err := admin.Set(ctx, lockKey(key), "someone:1", 10*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.noScript {
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var inFn [2]int64
			err := c.Do(ctx, key, spec, func(context.Context) error {
				inFn[0], inFn[1] = queue(key)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if tc.replay && h.queued != 1 {
				t.Fatalf("the busy first send left %d queue entries, want 1: the scenario did not happen", h.queued)
			}
			if fmt.Sprint(h.firsts) != fmt.Sprint(tc.wantFirsts) {
				t.Errorf("the acquire's sends said %v, want %v", h.firsts, tc.wantFirsts)
			}
			if inFn != [2]int64{0, 0} {
				t.Errorf("in fn the queue held %d entries and %d expiries, want none", inFn[0], inFn[1])
			}
			if len(h.members) != 1 {
				t.Fatalf("%d releases, want 1", len(h.members))
			}
			if got := h.members[0] != ""; got != tc.wantMemberRemoved {
				t.Errorf("the release named queue member %q: want one named: %v", h.members[0], tc.wantMemberRemoved)
			}
			if z, x := queue(key); z != 0 || x != 0 {
				t.Errorf("after the call the queue holds %d entries and %d expiries, want none", z, x)
			}
		})
	}
}
