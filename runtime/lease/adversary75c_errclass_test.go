package lease_test

// Adversary round 75c: error classes of the operator calls (Inspect,
// List, ForceRelease) against a paused server, a blackholed reply and an
// ACL that refuses them.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv75cOperatorRules is README's leasectl ACL line.
var adv75cOperatorRules = []string{"~lease:*", "&lease:*", "&lease:{*}:c", "-@all", "+ping", "+scan", "+evalsha", "+eval", "+get", "+set", "+del", "+exists", "+pttl", "+pexpire", "+time", "+type", "+publish", "+zcard", "+zrange", "+zrem", "+hget", "+hdel", "+psubscribe", "+punsubscribe"}

// adv75cEvalHook runs before each EVAL/EVALSHA the client sends.
type adv75cEvalHook struct{ before func() }

func (adv75cEvalHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv75cEvalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.before()
		}
		return next(ctx, cmd)
	}
}
func (adv75cEvalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// adv75cNotTold fails unless h's holder is still in its function with its
// lease: nobody told it of a loss.
func adv75cNotTold(t *testing.T, h *holding, what string) {
	t.Helper()
	select {
	case c := <-h.cause:
		t.Errorf("%s: the holder was told %v although nothing was released", what, c)
	default:
	}
}

// ForceRelease's doc: "The result is nil only for a parsed reply;
// otherwise, as for Do, the error wraps ErrUnknown (sent, no reply: the
// release may have happened) or ErrRefused"; ErrRefused: "the request was
// not carried out ... the server answered with an error: NOPERM". Each
// call is bounded by its context. So: against a paused server (SIGSTOP)
// Inspect, List and ForceRelease fail within their 400ms contexts,
// ForceRelease with ErrRefused (it only read), and the holder keeps its
// lease untold; a release script whose reply is blackholed is ErrUnknown
// within the context, and it did run (the holder then learns ErrLost); an
// operator ACL without a command ForceRelease needs is ErrRefused naming
// NOPERM, the lease untouched: its holder is not told, and its own
// release later is clean (nil), not a loss.
func TestAdversary75c_OperatorErrorClasses(t *testing.T) {
	t.Parallel()
	const ttl = 6 * time.Second
	const budget, slack = 400 * time.Millisecond, 400 * time.Millisecond
	within := func(t *testing.T, what string, start time.Time) {
		t.Helper()
		if d := time.Since(start); d > budget+slack {
			t.Errorf("%s returned %v after it began, its context %v", what, d.Round(time.Millisecond), budget)
		}
	}
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(context.Background(), budget) }

	t.Run("paused", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.StartRedis(t)
		holder, _ := newClient(t, srv.Client(t))
		op, _ := newClient(t, srv.Client(t))
		key := "adv75c:e:paused"
		h := holdUntil(t, holder, key, lease.Spec{TTL: ttl, Deadline: time.Minute})
		id := inspect(t, op, key).Holder
		srv.Pause()
		resumed := false
		defer func() {
			if !resumed {
				srv.Resume()
			}
		}()
		ctx, cancel := call()
		start := time.Now()
		_, err := op.Inspect(ctx, key)
		cancel()
		within(t, "Inspect", start)
		if err == nil {
			t.Errorf("Inspect of a paused server: nil error")
		}
		ctx, cancel = call()
		start = time.Now()
		_, _, err = op.List(ctx, "adv75c:*", "")
		cancel()
		within(t, "List", start)
		if err == nil {
			t.Errorf("List of a paused server: nil error")
		}
		ctx, cancel = call()
		start = time.Now()
		res, err := op.ForceRelease(ctx, key, id)
		cancel()
		within(t, "ForceRelease", start)
		t.Logf("ForceRelease of a paused server: %v %v", res, err)
		if !errors.Is(err, lease.ErrRefused) || errors.Is(err, lease.ErrUnknown) {
			t.Errorf("ForceRelease of a paused server: %v %v, want ErrRefused (only its read was sent)", res, err)
		}
		srv.Resume()
		resumed = true
		if info := inspect(t, op, key); info.Holder != id {
			t.Errorf("after the refused ForceRelease: holder %q, want %q", info.Holder, id)
		}
		adv75cNotTold(t, h, "paused")
	})

	t.Run("blackholed script reply", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.StartRedis(t)
		p := leasetest.StartProxy(t, srv.Addr())
		holder, _ := newClient(t, srv.Client(t))
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		op, _ := newClient(t, rdb)
		key := "adv75c:e:blackhole"
		// The release script in the server's cache, so that the EVALSHA
		// whose reply is blackholed runs (not NOSCRIPT).
		if err := holder.Do(context.Background(), key+":warm", lease.Spec{TTL: ttl, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		h := holdUntil(t, holder, key, lease.Spec{TTL: ttl, Deadline: time.Minute})
		id := inspect(t, op, key).Holder
		rdb.AddHook(adv75cEvalHook{before: func() { p.Set(leasetest.Blackhole) }})
		ctx, cancel := call()
		start := time.Now()
		res, err := op.ForceRelease(ctx, key, id)
		cancel()
		within(t, "ForceRelease", start)
		forced := time.Now()
		p.Set(leasetest.Pass)
		t.Logf("ForceRelease with its script's reply blackholed: %v %v", res, err)
		if !errors.Is(err, lease.ErrUnknown) {
			t.Errorf("ForceRelease whose script was sent and not answered: %v %v, want ErrUnknown", res, err)
		}
		info, ierr := srv.Client(t).Get(context.Background(), lockKey(key)).Result()
		t.Logf("the key after it: %q %v", info, ierr)
		if strings.HasPrefix(info, id) {
			t.Errorf("the release script was sent (cached) but did not run: the key still holds %q", info)
		}
		select {
		case c := <-h.cause:
			t.Logf("holder told %v after: %v", time.Since(forced).Round(time.Millisecond), c)
			if !errors.Is(c, lease.ErrLost) || !strings.Contains(c.Error(), "released from outside") {
				t.Errorf("holder: %v, want ErrLost, released from outside", c)
			}
		case <-time.After(ttl/3 + 1500*time.Millisecond):
			t.Errorf("the release ran but the holder was not told within TTL/3 + 1.5s")
		}
	})

	for _, tc := range []struct {
		name string
		drop []string
	}{
		{"no eval", []string{"+evalsha", "+eval"}},
		{"no get", []string{"+get"}},
		{"no del", []string{"+del"}},
		{"no zrange", []string{"+zrange"}},
	} {
		t.Run("NOPERM "+tc.name, func(t *testing.T) {
			t.Parallel()
			srv := leasetest.StartRedis(t)
			holder, _ := newClient(t, srv.Client(t))
			admin, _ := newClient(t, srv.Client(t))
			op, _ := newClient(t, srv.ACLUser(t, "ops75c", "pw", without(adv75cOperatorRules, tc.drop...)...))
			key := "adv75c:e:noperm"
			h := holdUntil(t, holder, key, lease.Spec{TTL: ttl, Deadline: time.Minute})
			id := inspect(t, admin, key).Holder
			ctx, cancel := call()
			start := time.Now()
			res, err := op.ForceRelease(ctx, key, id)
			cancel()
			within(t, "ForceRelease", start)
			t.Logf("ForceRelease without %v: %v %v", tc.drop, res, err)
			// (A command the script calls is refused as "ERR The user
			// executing the script can't run this command", not NOPERM.)
			if !errors.Is(err, lease.ErrRefused) || errors.Is(err, lease.ErrUnknown) || !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "can't run this command") {
				t.Errorf("ForceRelease without %v: %v %v, want ErrRefused naming the refusal", tc.drop, res, err)
			}
			if info := inspect(t, admin, key); info.Holder != id {
				t.Errorf("after the refused ForceRelease: holder %q, want %q", info.Holder, id)
			}
			// Past a renewal: the holder goes on, untold.
			time.Sleep(ttl/3 + 300*time.Millisecond)
			adv75cNotTold(t, h, tc.name)
			close(h.release)
			select {
			case err := <-h.done:
				if err != nil {
					t.Errorf("the holder's own release after a refused ForceRelease: %v, want nil", err)
				}
			case <-time.After(3 * time.Second):
				t.Errorf("the holder's Do did not return")
			}
		})
	}
}
