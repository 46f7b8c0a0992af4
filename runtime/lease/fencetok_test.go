package lease_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// pre62Shim, put before a script, makes SET ... GET answer as a server
// before Redis 6.2 does (a syntax error, nothing written): the scripts'
// takeTok then reads the counter and writes it in two commands.
const pre62Shim = `local realredis = redis
local redis = setmetatable({pcall = function(...)
  local n = select('#', ...)
  if n > 0 and select(1, ...) == 'SET' and select(n, ...) == 'GET' then
    return {err = 'ERR syntax error'}
  end
  return realredis.pcall(...)
end}, {__index = realredis})
`

// tokScripts returns the acquire and release scripts as scripts.go builds
// them, and the same with pre62Shim before them.
func tokScripts(t *testing.T) (acq, rel [2]*redis.Script) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tok, a, r := read("token.lua"), read("acquire.lua"), read("release.lua")
	acq = [2]*redis.Script{redis.NewScript(tok + a), redis.NewScript(pre62Shim + tok + a)}
	rel = [2]*redis.Script{redis.NewScript(tok + r), redis.NewScript(pre62Shim + tok + r)}
	return acq, rel
}

// counterStates are the fencing counter's values before a fenced grant,
// with the token each must give ("" the time floor: the server's time in
// microseconds, at least the time before the call; "!" none: refused,
// the counter left as it was).
func counterStates(now int64) []struct{ name, counter, want string } {
	ahead := strconv.FormatInt(now+3_600_000_000, 10) // an hour ahead of the clock
	aheadNext := strconv.FormatInt(now+3_600_000_001, 10)
	return []struct{ name, counter, want string }{
		{"none", "", ""},
		{"behind", "5", ""},
		{"just behind", strconv.FormatInt(now-1, 10), ""},
		{"not a number", "x9", ""},
		{"ahead", ahead, aheadNext},
		{"past 2^53", "9007199254740993", "9007199254740994"},
		{"all nines", "999999999999999999", "1000000000000000000"},
		// No greater token the client can read (int64): refused.
		{"at 2^63 - 1", "9223372036854775807", "!"},
	}
}

// TestFencedGrantTokenFromCounter checks the fenced grant's token against
// every state of its counter: the token is max(counter + 1, server time),
// the lock's value and the counter carry it, and both expire, with SET ...
// GET (one command for the counter) and as before Redis 6.2 (GET, then
// SET). The counter ahead of the clock (after a failover to a server whose
// clock is behind) makes the grant write its value again.
func TestFencedGrantTokenFromCounter(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	acq, _ := tokScripts(t)
	const id = "a1b2c3d4a1b2c3d4a1b2c3d4a1b2c3d4"
	for which, s := range acq {
		for _, cs := range counterStates(time.Now().UnixMicro()) {
			name := fmt.Sprintf("%s/pre62=%v", cs.name, which == 1)
			keys := []string{"lease:{t}:l", "lease:{t}:f", "lease:{t}:q", "lease:{t}:x"}
			rdb.Del(ctx, keys...)
			if cs.counter != "" {
				rdb.Set(ctx, keys[1], cs.counter, time.Hour)
			}
			rdb.ConfigResetStat(ctx)
			before := time.Now().UnixMicro()
			res, err := s.Run(ctx, rdb, keys, id, 10000, "1", 600000, 0, "", "lease:{t}:c", 1).Result()
			after := time.Now().UnixMicro()
			if cs.want == "!" {
				if err == nil || !strings.Contains(err.Error(), "2^63") || rdb.Exists(ctx, keys[0]).Val() != 0 || rdb.Get(ctx, keys[1]).Val() != cs.counter {
					t.Errorf("%s: %v %v, lock %q, counter %q; want refused, no lock, the counter as it was", name, res, err, rdb.Get(ctx, keys[0]).Val(), rdb.Get(ctx, keys[1]).Val())
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			// The counter read by SET ... GET, or (pre62) by a GET.
			if gets := serverCalls(t, rdb)["get"]; gets != int64(which) {
				t.Errorf("%s: %d GETs, want %d", name, gets, which)
			}
			tok := fmt.Sprint(res)
			if cs.want != "" {
				if tok != cs.want {
					t.Errorf("%s: token %s, want %s", name, tok, cs.want)
				}
			} else if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n < before-1000 || n > after+1000 {
				t.Errorf("%s: token %s, want the server's time (%d..%d µs)", name, tok, before, after)
			}
			if v := rdb.Get(ctx, keys[0]).Val(); v != id+":"+tok {
				t.Errorf("%s: lock %q, want %q", name, v, id+":"+tok)
			}
			if c := rdb.Get(ctx, keys[1]).Val(); c != tok {
				t.Errorf("%s: counter %q, want %q", name, c, tok)
			}
			if p := rdb.PTTL(ctx, keys[0]).Val(); p <= 9*time.Second || p > 10*time.Second {
				t.Errorf("%s: lock PTTL %v, want 10s", name, p)
			}
			if p := rdb.PTTL(ctx, keys[1]).Val(); p <= 9*time.Minute || p > 10*time.Minute {
				t.Errorf("%s: counter PTTL %v, want 10m", name, p)
			}
		}
		// A counter of another type: no grant, nothing written.
		keys := []string{"lease:{t}:l", "lease:{t}:f", "lease:{t}:q", "lease:{t}:x"}
		rdb.Del(ctx, keys...)
		rdb.HSet(ctx, keys[1], "x", "1")
		_, err := s.Run(ctx, rdb, keys, id, 10000, "1", 600000, 0, "", "lease:{t}:c", 1).Result()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("pre62=%v: a hash at the counter: %v, want WRONGTYPE", which == 1, err)
		}
		if n := rdb.Exists(ctx, keys[0]).Val(); n != 0 || rdb.Type(ctx, keys[1]).Val() != "hash" {
			t.Errorf("pre62=%v: a refused grant left the lock (%d) or changed the counter (%s)", which == 1, n, rdb.Type(ctx, keys[1]).Val())
		}
	}
}

// TestFencedHandoverTokenFromCounter: the release's handover to a fenced
// waiter mints its token the same way (a waiter it cannot give one is
// passed over), from every counter state, with and
// without SET ... GET; the waiter's lock value, the counter and the
// message on the key's channel carry the same token.
func TestFencedHandoverTokenFromCounter(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	_, rel := tokScripts(t)
	const me, w = "a1b2c3d4a1b2c3d4a1b2c3d4a1b2c3d4", "e5f6a7b8e5f6a7b8e5f6a7b8e5f6a7b8"
	member := w + "|30000|1|2000|inbox:t"
	keys := []string{"lease:{t}:l", "lease:{t}:c", "lease:{t}:r:" + me, "lease:{t}:f", "lease:{t}:q", "lease:{t}:x"}
	ps := srv.Client(t).Subscribe(ctx, keys[1])
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	for which, s := range rel {
		for _, cs := range counterStates(time.Now().UnixMicro()) {
			name := fmt.Sprintf("%s/pre62=%v", cs.name, which == 1)
			rdb.Del(ctx, keys...)
			rdb.Set(ctx, keys[0], me+":5", 10*time.Second)
			if cs.counter != "" {
				rdb.Set(ctx, keys[3], cs.counter, time.Hour)
			}
			rdb.ZAdd(ctx, keys[4], redis.Z{Score: 1, Member: member})
			rdb.HSet(ctx, keys[5], member, fmt.Sprintf("%d:3", time.Now().UnixMilli()+60000))
			rdb.ConfigResetStat(ctx)
			before := time.Now().UnixMicro()
			res, err := s.Run(ctx, rdb, keys, me, 0, "PUBLISH", 60000, 600000, "", "1").Result()
			after := time.Now().UnixMicro()
			if cs.want == "!" {
				// No token to give: the fenced waiter is passed over (and
				// its own acquire is refused with the reason); nobody else
				// queued, the key is deleted.
				if err != nil || fmt.Sprint(res) != "1" || rdb.Exists(ctx, keys[0]).Val() != 0 || rdb.Get(ctx, keys[3]).Val() != cs.counter {
					t.Errorf("%s: %v %v, lock %q, counter %q; want released, no lock, the counter as it was", name, res, err, rdb.Get(ctx, keys[0]).Val(), rdb.Get(ctx, keys[3]).Val())
				}
				continue
			}
			if err != nil || fmt.Sprint(res) != "1" {
				t.Errorf("%s: %v %v, want handed over (1)", name, res, err)
				continue
			}
			// The holder's GET, and the counter's (pre62) unless SET ... GET.
			if gets := serverCalls(t, rdb)["get"]; gets != int64(1+which) {
				t.Errorf("%s: %d GETs, want %d", name, gets, 1+which)
			}
			v := rdb.Get(ctx, keys[0]).Val()
			tok, ok := strings.CutPrefix(v, w+":")
			if !ok {
				t.Errorf("%s: lock %q, want the waiter's", name, v)
				continue
			}
			if cs.want != "" {
				if tok != cs.want {
					t.Errorf("%s: token %s, want %s", name, tok, cs.want)
				}
			} else if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n < before-1000 || n > after+1000 {
				t.Errorf("%s: token %s, want the server's time (%d..%d µs)", name, tok, before, after)
			}
			if c := rdb.Get(ctx, keys[3]).Val(); c != tok {
				t.Errorf("%s: counter %q, want %q", name, c, tok)
			}
			if p := rdb.PTTL(ctx, keys[3]).Val(); p <= 9*time.Minute || p > 10*time.Minute {
				t.Errorf("%s: counter PTTL %v, want 10m", name, p)
			}
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := w + "|3|" + tok + "|"; !strings.HasPrefix(m.Payload, want) {
				t.Errorf("%s: message %q, want it to start %q", name, m.Payload, want)
			}
		}
		// A counter of another type: no token to give, the fenced waiter
		// is passed over (its own acquire is refused with WRONGTYPE); the
		// release goes through.
		rdb.Del(ctx, keys...)
		rdb.Set(ctx, keys[0], me+":5", 10*time.Second)
		rdb.HSet(ctx, keys[3], "x", "1")
		rdb.ZAdd(ctx, keys[4], redis.Z{Score: 1, Member: member})
		rdb.HSet(ctx, keys[5], member, fmt.Sprintf("%d:3", time.Now().UnixMilli()+60000))
		res, err := s.Run(ctx, rdb, keys, me, 0, "PUBLISH", 60000, 600000, "", "1").Result()
		if err != nil || fmt.Sprint(res) != "1" {
			t.Errorf("pre62=%v: a hash at the counter: %v %v, want released (1)", which == 1, res, err)
		}
		if n := rdb.Exists(ctx, keys[0]).Val(); n != 0 || rdb.Type(ctx, keys[3]).Val() != "hash" {
			t.Errorf("pre62=%v: the lock left (%d), or the counter changed (%s)", which == 1, n, rdb.Type(ctx, keys[3]).Val())
		}
	}
}
