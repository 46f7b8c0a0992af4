package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Round 37: df067c4 moved the release with nobody queued (hold-min 0) ahead
// of the script's helper functions, claiming every answer, write and
// message is what e198a20's script did. These tests run the old script
// (below, verbatim from e198a20) and the current release.lua side by side
// on identical states of a real redis-server and compare answers, the
// commands the script ran (MONITOR), the messages it published (PSUBSCRIBE
// *) and the keys it left (values and PTTLs). The old script is the
// reference: a change to release.lua meant to change what it does must
// change this reference with it.

// oldRelease37 is `git show e198a20:runtime/lease/release.lua`.
const oldRelease37 = `-- release: end the lease if ARGV[1] holds it. The first live waiter in the
-- key's queue gets it at once (for its TTL, or a short claim, see below)
-- and is told by a message naming it; with no waiter the key is deleted. With ARGV[2] > 0 (hold-min) the remaining hold becomes the TTL
-- instead, the value is marked "~" (no renewal of this identity matches it
-- any more, not even a late replay), and waiters are told the lease ends
-- sooner. Either way a short-lived tombstone for this identity lets a
-- replay of the release (go-redis re-sends after a lost reply) answer as
-- the first run did, whatever happened to the key since. The caller also
-- leaves the queue (a waiter that gives up releases with its member: a
-- claim handed to it passes on).
-- KEYS[1] lock, KEYS[2] channel, KEYS[3] this identity's tombstone,
-- KEYS[4] fence counter, KEYS[5] queue, KEYS[6] queue expiries (same hash
-- tag)
-- ARGV[1] identity, ARGV[2] hold ms, ARGV[3] publish command,
-- ARGV[4] tombstone ttl ms, ARGV[5] counter ttl ms, ARGV[6] the caller's
-- queue member ("" if it never queued), ARGV[7] the tombstone's value: "1"
-- for the holder's own release, "l" for a leader term's own release (as
-- "1", and a release with nobody waiting says "r" on the key's channel, so
-- that a WatchLeader hears a leader step down at once), "x" for a release
-- forced from outside (Client.ForceRelease: the holder then learns it lost
-- the lease)
-- Returns 1 released (or handed over, or a replay of either), 2 hold set
-- (forced: a hold-min of this identity runs) (each + 10 when a message was
-- refused, see below),
-- 0 not held (expired or deleted from outside), -1 held by another, -3
-- released from outside (ForceRelease) before this call.
-- Messages are published with pcall, after the writes they announce: a
-- publish that an ACL refuses (a user without the key's channel) must not
-- turn a release that happened into an error (scripts do not roll back).
-- A refused publish adds 10 to the result (11: released or handed over,
-- 12: hold set), so that the caller reports that waiters were not told.
-- Waiters listen on their Client's own channel (the inbox, last in their
-- queue entry), not on the key's: what every waiter of the key must hear
-- goes to each inbox in the queue, once per Client, as the channel's
-- length, ":", the channel, and the message.
local refused = false -- a publish was refused: the result says so (+10)
local function tell(cmd, inbox, channel, msg)
  local r = redis.pcall(cmd, inbox, #channel .. ':' .. channel .. msg)
  if type(r) ~= 'number' then refused = true end
  return r
end
local function announce(cmd, channel, msg)
  if type(redis.pcall(cmd, channel, msg)) ~= 'number' then refused = true end
end
local function result(n)
  if refused then return n + 10 end
  return n
end
local function tellWaiters(queue, channel, msg, cmd)
  local told = {}
  for _, m in ipairs(redis.call('ZRANGE', queue, 0, 31)) do
    local inbox = string.match(m, '^[^|]+|%d+|%d|%d+|(.+)$')
    if inbox and not told[inbox] then
      told[inbox] = true
      tell(cmd, inbox, channel, msg)
    end
  end
end
-- The entry's expiry is written and removed with it: only when there was
-- an entry (a grant normally took it out already).
if ARGV[6] ~= '' and redis.call('ZREM', KEYS[5], ARGV[6]) == 1 then
  redis.call('HDEL', KEYS[6], ARGV[6])
end
-- The key first: while it holds this identity, this is a release of it,
-- whatever tombstones an earlier grant to the same identity left (a claim
-- released from outside, then granted to it again). Otherwise the
-- tombstone tells a replay from a loss.
local v = redis.call('GET', KEYS[1])
local sep = v and string.find(v, ':', 1, true)
if not sep or string.sub(v, 1, sep - 1) ~= ARGV[1] then
  local done = redis.call('GET', KEYS[3])
  if ARGV[7] == 'x' then
    -- Forced: a replay of this forced release answers as it did; a lease
    -- its holder released itself (or that ended) was not released here.
    if done == 'x' then return 1 end
    -- Its holder started a hold-min since the caller read the key: the
    -- hold is this identity's (the caller ends it).
    if sep and string.sub(v, 1, sep - 1) == '~' .. ARGV[1] then return 2 end
    if v then return -1 end
    return 0
  end
  if done == 'x' then return -3 end
  if done == 'h' then return 2 end
  if done then return 1 end
  if v then return -1 end
  return 0
end
local hold = tonumber(ARGV[2])
if hold > 0 then
  redis.call('SET', KEYS[1], '~' .. v, 'PX', hold)
  redis.call('SET', KEYS[3], 'h', 'PX', ARGV[4])
  announce(ARGV[3], KEYS[2], 'h')
  tellWaiters(KEYS[5], KEYS[2], 'h', ARGV[3])
  return result(2)
end
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[4])
-- Dead entries at the head (a waiter whose process died, or whose giving
-- up did not reach Redis) are taken out on the way, one at a time as they
-- come; after 32 in a row (a process with many waiters died at once) the
-- dead ones ahead of the first live entry go in batches (prune), so that
-- a release behind many of them still hands the key to that entry
-- instead of deleting it and telling nobody.
local function prune(now)
  for _ = 1, 64 do
    local ms = redis.call('ZRANGE', KEYS[5], 0, 127)
    if #ms == 0 then return false end
    -- HGET, not HMGET: the least-privilege ACL (README) has no +hmget.
    local n = 0
    while n < #ms and (tonumber(string.match(redis.call('HGET', KEYS[6], ms[n + 1]) or '', '^(%d+)')) or 0) <= now do n = n + 1 end
    if n > 0 then
      redis.call('ZREM', KEYS[5], unpack(ms, 1, n))
      redis.call('HDEL', KEYS[6], unpack(ms, 1, n))
    end
    if n < #ms then return true end
  end
  return false
end
-- The queue's head is read at once, without asking first whether the
-- queue exists: a handover calls one command less, and a release with
-- no queue costs the same (an empty range of a missing key).
local head = redis.call('ZRANGE', KEYS[5], 0, 0)
if #head > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for i = 1, 128 do
    if i > 1 then
      if i % 32 == 1 and not prune(now) then break end
      head = redis.call('ZRANGE', KEYS[5], 0, 0)
    end
    if #head == 0 then break end
    local m = head[1]
    -- entry: expiry ms ":" sequence number of the acquire that last
    -- refreshed it
    local e = redis.call('HGET', KEYS[6], m) or ''
    local exp, seq = string.match(e, '^(%d+):?(%d*)$')
    exp = tonumber(exp) or 0
    redis.call('ZREM', KEYS[5], m)
    redis.call('HDEL', KEYS[6], m)
    if exp > now then
      -- member: identity|ttl|fence|claim|inbox (the waiter's Client's
      -- probe channel; absent in entries of older Clients)
      local id, ttl, fence, claim, inbox = string.match(m, '^([^|]+)|(%d+)|(%d)|(%d+)|?(.*)$')
      if id then
        local tok = '0'
        if fence == '1' then
          tok = nextTok(redis.call('GET', KEYS[4]), tonumber(t[1]) * 1000000 + tonumber(t[2]))
          redis.call('SET', KEYS[4], tok, 'PX', ARGV[5])
        end
        -- The waiter gets its full TTL when its Client's subscription is
        -- connected to this server (its own channel, the probe, has a
        -- subscriber here): it enters on this message, without another
        -- round trip. Otherwise (its process is gone, its subscription is
        -- down or on another node) only the claim: a dead waiter holds the
        -- key up for no longer than that, and a live one confirms the
        -- grant by its next acquire, which makes it a full TTL.
        local px = math.min(tonumber(claim), tonumber(ttl))
        local full = false
        if inbox ~= '' and seq ~= '' then
          local n = redis.pcall('PUBSUB', 'NUMSUB', inbox)
          full = type(n) == 'table' and (tonumber(n[2]) or 0) > 0
        end
        -- "identity|seq|token|px": the waiter may enter on this message
        -- when it has sent no acquire since the one numbered seq: the
        -- grant came after that acquire found the key busy, so after it
        -- was sent, and lasts px from then at least.
        local function note(p)
          if seq == '' then return id end
          return id .. '|' .. seq .. '|' .. tok .. '|' .. p
        end
        if full then
          -- Only if the waiter is told: a publish this user may not make
          -- (an ACL without the inbox's channel) leaves it the claim.
          full = type(tell(ARGV[3], inbox, KEYS[2], note(ttl))) == 'number'
        elseif inbox ~= '' then
          tell(ARGV[3], inbox, KEYS[2], note(px))
        end
        if full then px = tonumber(ttl) end
        redis.call('SET', KEYS[1], id .. ':' .. tok, 'PX', px)
        announce(ARGV[3], KEYS[2], note(px))
        return result(1)
      end
    end
  end
end
redis.call('DEL', KEYS[1])
if ARGV[7] == 'l' then announce(ARGV[3], KEYS[2], 'r') end
return result(1)
`

const (
	me37     = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/web-1"
	other37  = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	inboxL37 = "inbox37:live" // has a subscriber (PUBSUB NUMSUB 1)
	inboxD37 = "inbox37:dead" // none
	mine37   = me37 + "|30000|1|2000|inbox37:me"
	fence37  = "9000000000000000" // above the clock's microseconds: tokens are deterministic
)

var keys37 = []string{"lease:{k37}:l", "lease:{k37}:c", "lease:{k37}:r:" + me37, "lease:{k37}:f", "lease:{k37}:q", "lease:{k37}:x"}

// releaseScripts37 returns e198a20's release script and the current one,
// each with its token.lua before it (as scripts.go builds them).
func releaseScripts37(t *testing.T) (old, cur *redis.Script) {
	t.Helper()
	tok, err := os.ReadFile("token.lua")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := os.ReadFile("release.lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(oldToken37 + oldRelease37), redis.NewScript(string(tok) + string(rel))
}

// oldToken37 is `git show e198a20:runtime/lease/token.lua`, which the old
// release script calls (nextTok).
const oldToken37 = `-- Shared by acquire.lua and release.lua (scripts.go puts it before each).
-- nextTok is the next fencing token, max(counter + 1, us), as a decimal
-- string: exact for a counter past 2^53 too (one set from outside), where
-- doubles skip integers (c + 1 == c), by incrementing its digits.
local function nextTok(cs, us)
  local c = tonumber(cs or '0') or 0
  if c < 9007199254740991 or not string.find(cs, '^[1-9]%d*$') then
    local n = c + 1
    if us > n then n = us end
    return string.format('%d', n)
  end
  local i = #cs
  while i > 0 and string.byte(cs, i) == 57 do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #cs) end
  return string.sub(cs, 1, i - 1) .. string.char(string.byte(cs, i) + 1) .. string.rep('0', #cs - i)
end
`

type env37 struct {
	t       *testing.T
	srv     *leasetest.Server
	admin   *redis.Client
	mon     *bufio.Reader
	ps      *redis.PubSub
	users   map[string]*redis.Client
	seq     int
	scripts [2]*redis.Script
}

func newEnv37(t *testing.T) *env37 {
	t.Helper()
	ctx := context.Background()
	srv := leasetest.StartRedis(t)
	e := &env37{t: t, srv: srv, admin: srv.Client(t), users: map[string]*redis.Client{}}
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	e.mon = bufio.NewReader(conn)
	if l, err := e.mon.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	e.ps = srv.Client(t).PSubscribe(ctx, "*")
	if _, err := e.ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ps.Close() })
	live := srv.Client(t).Subscribe(ctx, inboxL37)
	if _, err := live.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	e.users["default"] = srv.Client(t)
	// May not publish at all: every message refused.
	e.users["nopub"] = srv.ACLUser(t, "nopub37", "pw", "~*", "&*", "+@all", "-publish")
	// The key's channel only: the inboxes refused.
	e.users["keychan"] = srv.ACLUser(t, "keychan37", "pw", "~*", "&lease:*", "+@all")
	// The inboxes only: the key's channel refused.
	e.users["inboxchan"] = srv.ACLUser(t, "inboxchan37", "pw", "~*", "&inbox37:*", "+@all")
	// May not ask PUBSUB NUMSUB: a waiter gets only its claim.
	e.users["nonumsub"] = srv.ACLUser(t, "nonumsub37", "pw", "~*", "&*", "+@all", "-pubsub")
	old, cur := releaseScripts37(t)
	e.scripts = [2]*redis.Script{old, cur}
	for _, s := range e.scripts {
		if err := s.Load(ctx, e.admin).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// entry37 is a queue member and its expiry hash value ("" none).
type entry37 struct{ m, exp string }

// state37 is what a release starts from.
type state37 struct {
	lock, lockTTL string // "" missing; lockTTL "" no expiry
	tomb          string // "" none
	queue         []entry37
	scores        []float64 // the queue's scores (nil: 1, 2, …)
	wrongType     int       // 0: none; 5 or 6: KEYS[5]/KEYS[6] is a string (WRONGTYPE)
}

type out37 struct {
	wrongTypeQ bool // the state's queue (or its expiries) was a string
	answer     string
	cmds       []string
	msgs       []string
	keys       []string
	pttl       map[string]int64
	// took is the time from setting the state up to reading the PTTLs
	// back: what a key's PTTL lost in the run (a loaded machine can
	// stall a run for hundreds of milliseconds).
	took int64
}

// slack37 is how far two runs' PTTLs of a key may differ by time alone:
// the longer run's time, and 300 ms.
func slack37(a, b out37) int64 { return 300 + max(a.took, b.took) }

var errNorm37 = regexp.MustCompile(`[0-9a-f]{40}|user_script:\d+|@user_script:\d+`)

func (e *env37) run(which int, st state37, user string, argv []any) out37 {
	t := e.t
	t.Helper()
	ctx := context.Background()
	began := time.Now()
	// The state, and the MONITOR mark before the script, in one round trip.
	p := e.admin.Pipeline()
	p.FlushAll(ctx)
	if st.lock != "" {
		if st.lockTTL == "" {
			p.Set(ctx, keys37[0], st.lock, 0)
		} else {
			p.Do(ctx, "SET", keys37[0], st.lock, "PX", st.lockTTL)
		}
	}
	if st.tomb != "" {
		p.Do(ctx, "SET", keys37[2], st.tomb, "PX", "60000")
	}
	p.Do(ctx, "SET", keys37[3], fence37, "PX", "600000")
	for i, en := range st.queue {
		score := float64(i + 1)
		if st.scores != nil {
			score = st.scores[i]
		}
		p.ZAdd(ctx, keys37[4], redis.Z{Score: score, Member: en.m})
		if en.exp != "" {
			p.HSet(ctx, keys37[5], en.m, en.exp)
		}
	}
	if st.wrongType != 0 {
		p.Set(ctx, keys37[st.wrongType-1], "str", 0)
	}
	e.seq++
	start, end := fmt.Sprintf("start37-%d", e.seq), fmt.Sprintf("end37-%d", e.seq)
	p.Echo(ctx, start)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	var o out37
	o.wrongTypeQ = st.wrongType != 0
	res, err := e.scripts[which].EvalSha(ctx, e.users[user], keys37, argv...).Result()
	if err != nil {
		o.answer = "error: " + errNorm37.ReplaceAllString(err.Error(), "#")
	} else {
		o.answer = fmt.Sprint(res)
	}
	p = e.admin.Pipeline()
	p.Publish(ctx, "sync37", end)
	p.Echo(ctx, end)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// The commands the script ran, as MONITOR shows them ("[db lua]").
	in := false
	for {
		l, err := e.mon.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		l = strings.TrimRight(l, "\r\n")
		if strings.HasSuffix(l, `"`+start+`"`) {
			in = true
			continue
		}
		if strings.HasSuffix(l, `"`+end+`"`) && strings.Contains(l, `"echo"`) || strings.Contains(l, `"ECHO" "`+end+`"`) {
			break
		}
		if i := strings.Index(l, " lua] "); in && i >= 0 {
			o.cmds = append(o.cmds, l[i+6:])
		}
	}
	for {
		m, err := e.ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel == "sync37" && m.Payload == end {
			break
		}
		o.msgs = append(o.msgs, m.Channel+" <- "+m.Payload)
	}
	ks, err := e.admin.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ks)
	o.pttl = map[string]int64{}
	// Every key's type, each read of it (all but the one of its type
	// answer WRONGTYPE) and its PTTL, in one round trip.
	type dump struct {
		typ  *redis.StatusCmd
		str  *redis.StringCmd
		zset *redis.ZSliceCmd
		hash *redis.MapStringStringCmd
		pttl *redis.DurationCmd
	}
	dumps := make([]dump, len(ks))
	p = e.admin.Pipeline()
	for i, k := range ks {
		dumps[i] = dump{p.Type(ctx, k), p.Get(ctx, k), p.ZRangeWithScores(ctx, k, 0, -1), p.HGetAll(ctx, k), p.PTTL(ctx, k)}
	}
	_, _ = p.Exec(ctx) // the WRONGTYPE answers are expected
	o.took = time.Since(began).Milliseconds()
	for i, k := range ks {
		d := dumps[i]
		typ := d.typ.Val()
		var v any
		switch typ {
		case "string":
			v = d.str.Val()
		case "zset":
			v = d.zset.Val()
		case "hash":
			h := d.hash.Val()
			var fs []string
			for f, x := range h {
				fs = append(fs, f+"="+x)
			}
			sort.Strings(fs)
			v = fs
		}
		o.keys = append(o.keys, fmt.Sprintf("%s %s %v", k, typ, v))
		o.pttl[k] = d.pttl.Val().Milliseconds()
	}
	if which == 1 {
		handedOver37(&o)
	}
	return o
}

// handedOver37 takes out of the current script's outcome what a handover
// does since the old one: it marks the releasing identity's tombstone
// "handed over" ("1>", "l>"; TestWatchTellsHandoverWithoutItsMessage),
// with a SET of its own after the lock's (or, after an OOM, in the place
// of the late one).
func handedOver37(o *out37) {
	set := fmt.Sprintf("%q %q ", "SET", keys37[2])
	for i := len(o.cmds) - 1; i >= 0; i-- {
		c := o.cmds[i]
		if !strings.HasPrefix(c, set) || !strings.HasPrefix(c[len(set):], `"1>"`) && !strings.HasPrefix(c[len(set):], `"l>"`) {
			continue
		}
		c = set + c[len(set):len(set)+2] + c[len(set)+3:] // the value without ">"
		if slices.Contains(o.cmds[:i], c) {
			o.cmds = slices.Delete(slices.Clone(o.cmds), i, i+1) // the mark alone
		} else {
			o.cmds = slices.Clone(o.cmds)
			o.cmds[i] = c // the late write of the tombstone
		}
		break
	}
	for i, k := range o.keys {
		if strings.HasPrefix(k, keys37[2]+" string ") && strings.HasSuffix(k, ">") {
			o.keys[i] = strings.TrimSuffix(k, ">")
		}
	}
}

// forcedTomb37 takes out of n what a forced release does since 5411edd:
// it reads the lock's remaining TTL (PTTL) and keeps its tombstone that
// much longer than the old script did (TestAdversary62_ForceReleaseRenewedAfterTheRead).
func forcedTomb37(st state37, o out37, n *out37) {
	i := slices.Index(n.cmds, fmt.Sprintf("%q %q", "PTTL", keys37[0]))
	if i < 0 {
		return
	}
	n.cmds = slices.Delete(slices.Clone(n.cmds), i, i+1)
	ttl, err := strconv.ParseInt(st.lockTTL, 10, 64)
	if err != nil {
		return // no expiry: the tombstone's TTL is the old one
	}
	slack := slack37(o, *n)
	near := func(x, y int64) bool { return y-x > ttl-slack && y-x < ttl+slack }
	if x, y := o.pttl[keys37[2]], n.pttl[keys37[2]]; near(x, y) {
		n.pttl[keys37[2]] = y - ttl
	}
	// The tombstone's SET names the longer PX: the old one's, if so.
	set := fmt.Sprintf("%q %q ", "SET", keys37[2])
	px := func(cmd string) (int64, bool) {
		f := strings.Fields(cmd)
		v, err := strconv.ParseInt(strings.Trim(f[len(f)-1], `"`), 10, 64)
		return v, err == nil && strings.HasPrefix(cmd, set)
	}
	for _, oc := range o.cmds {
		x, ok := px(oc)
		if !ok {
			continue
		}
		for j, nc := range n.cmds {
			if y, ok := px(nc); ok && near(x, y) {
				n.cmds[j] = oc
			}
		}
	}
}

// diff37 compares the outcomes of the old and the current script ("" the
// same). PTTLs may differ by the time between the two runs.
func diff37(a, b out37) string {
	var d []string
	if a.answer != b.answer {
		d = append(d, fmt.Sprintf("answer: old %s, new %s", a.answer, b.answer))
	}
	// (An error part way through, below, stops the two at different
	// commands.)
	wtq := a.wrongTypeQ && strings.HasPrefix(a.answer, "error") && a.answer == b.answer
	if !wtq && (!slices.Equal(leaveNorm37(a.cmds), leaveNorm37(b.cmds)) || len(b.cmds) > len(a.cmds)+2) {
		d = append(d, fmt.Sprintf("commands:\n  old %q\n  new %q", a.cmds, b.cmds))
	}
	if !slices.Equal(a.msgs, b.msgs) {
		d = append(d, fmt.Sprintf("messages:\n  old %q\n  new %q", a.msgs, b.msgs))
	}
	if wtq {
		// The queue is not a zset (or its expiries not a hash): both
		// scripts fail part way through, the old one at its first commands
		// when the call names its member (its own entry's ZREM and HDEL),
		// else after the tombstone's SET; the new one where it reads the
		// queue, before it writes the tombstone. Either way a replay runs
		// again and fails the same way: whether the tombstone is left
		// does not matter.
		a.keys = slices.DeleteFunc(slices.Clone(a.keys), func(k string) bool { return strings.HasPrefix(k, keys37[2]+" ") })
		b.keys = slices.DeleteFunc(slices.Clone(b.keys), func(k string) bool { return strings.HasPrefix(k, keys37[2]+" ") })
	}
	if !slices.Equal(a.keys, b.keys) {
		d = append(d, fmt.Sprintf("keys:\n  old %q\n  new %q", a.keys, b.keys))
	} else {
		for k, x := range a.pttl {
			if wtq && k == keys37[2] {
				continue
			}
			y := b.pttl[k]
			if (x < 0 || y < 0) && x != y || x-y > slack37(a, b) || y-x > slack37(a, b) {
				d = append(d, fmt.Sprintf("pttl of %s: old %d, new %d", k, x, y))
			}
		}
	}
	return strings.Join(d, "\n")
}

// leaveNorm37 is a script's commands without the removal of the caller's
// own queue entry (ZREM and HDEL of mine37), and with a re-read of the
// queue's head right after a read of it counted once. Since e198a20 the
// release takes its own entry out only where it reads the queue and finds
// someone (the old script did at its start, whatever the queue held), and
// reads the head again when its own entry was there: the same removal and
// reads, moved, and skipped where the queue was empty (diff37 also allows
// the new script one command more than the old, for that re-read).
//
// The fencing counter's read and write (GET, then SET with the new token)
// became one SET ... GET of the time token, followed by the SET of the
// counter's next when the counter was at or past the time (always, here:
// fence37 is above the clock): both are counted as the last SET of the
// counter, without GET.
//
// The tombstone's SET is written again after the release's first write
// that frees memory when maxmemory refused it: it is compared as written
// or not, with its value, not by its place. A hold-min's SET
// of the lock got a PEXPIRE before it, for the same reason (diff37 allows
// the new script one command more; a forced release one more again, its
// look for the forced identity's entries).
func leaveNorm37(cmds []string) []string {
	const ctr = `"lease:{k37}:f"`
	var out, tombs []string
	for i, c := range cmds {
		if strings.HasPrefix(c, `"SET" "`+keys37[2]+`" `) {
			tombs = append(tombs, c)
			continue
		}
		if c == `"ZRANGE" "lease:{k37}:q" "0" "1023"` {
			continue // a forced release's look for the forced identity's entries
		}
		if strings.HasPrefix(c, `"PEXPIRE" "lease:{k37}:l" `) {
			continue // the hold-min's first write (see release.lua)
		}
		if c == `"GET" `+ctr {
			continue
		}
		if strings.HasPrefix(c, `"SET" `+ctr+` `) {
			if i+1 < len(cmds) && strings.HasPrefix(cmds[i+1], `"SET" `+ctr+` `) {
				continue
			}
			c = strings.TrimSuffix(c, ` "GET"`)
		}
		if (strings.HasPrefix(c, `"ZREM" "lease:{k37}:q" `) || strings.HasPrefix(c, `"HDEL" "lease:{k37}:x" `)) && strings.HasSuffix(c, ` "`+mine37+`"`) {
			continue
		}
		if c == `"ZRANGE" "lease:{k37}:q" "0" "0"` && len(out) > 0 && out[len(out)-1] == c {
			continue
		}
		out = append(out, c)
	}
	return append(out, tombs...)
}

func relArgv37(hold, member, tomb string) []any {
	return []any{me37, hold, "PUBLISH", "60000", "600000", member, tomb}
}

// queues37 are the queue states of the matrix, with expiries from now (ms).
func queues37(now int64) map[string][]entry37 {
	live := fmt.Sprintf("%d:7", now+60000)
	liveNoSeq := fmt.Sprint(now + 60000)
	dead := "1:3"
	w1 := "cccccccccccccccccccccccccccccccc|30000|1|2000|" + inboxL37
	w2 := "dddddddddddddddddddddddddddddddd|30000|0|2000|" + inboxD37
	w3 := "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee|30000|1|2000"
	w4 := "ffffffffffffffffffffffffffffffff|40000|1|1500|" + inboxL37
	deadN := func(n int) []entry37 {
		var es []entry37
		for i := range n {
			es = append(es, entry37{fmt.Sprintf("%032x|30000|1|2000|%s", i+1, inboxD37), dead})
		}
		return es
	}
	return map[string][]entry37{
		"none":              nil,
		"mineOnly":          {{mine37, live}},
		"dead1":             {{w1, dead}},
		"dead40":            deadN(40),
		"dead200":           deadN(200),
		"liveSubFenced":     {{w1, live}, {w4, live}},
		"liveUnsubUnfenced": {{w2, live}},
		"liveOldFormat":     {{w3, liveNoSeq}},
		"liveNoSeq":         {{w1, liveNoSeq}},
		"dead35ThenLive":    append(deadN(35), entry37{w2, live}, entry37{w1, live}),
		"garbageThenLive":   {{"garbage", live}, {w1, live}},
		"noExpThenLive":     {{w3, ""}, {w2, live}},
		"mineThenLive":      {{mine37, live}, {w1, live}},
	}
}

// TestAdversary37_ReleaseScriptMatrix runs both scripts over the matrix:
// the caller's lease held (with and without expiry, a tombstone from an
// earlier forced release or none) against every queue state, hold-min
// 0/-1/>0, tombstone value 1/l/x, the caller's member or none, and five
// users (all allowed; no PUBLISH; key channel only; inboxes only; no
// PUBSUB); and the states where the caller does not hold it ('~' marked,
// another's, missing, malformed) against every tombstone.
func TestAdversary37_ReleaseScriptMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv37(t)
	type tc struct {
		name string
		st   state37
		user string
		argv []any
	}
	var cases []tc
	now := time.Now().UnixMilli()
	qs := queues37(now)
	qnames := slices.Sorted(maps.Keys(qs))
	users := []string{"default", "nopub", "keychan", "inboxchan", "nonumsub"}
	for _, lock := range []struct{ v, ttl string }{{me37 + ":5", "10000"}, {me37 + ":5", ""}} {
		for _, tomb := range []string{"", "x"} {
			for _, q := range qnames {
				for _, hold := range []string{"0", "-1", "3000"} {
					for _, a7 := range []string{"1", "l", "x"} {
						for _, mem := range []string{"", mine37} {
							for _, u := range users {
								cases = append(cases, tc{
									name: fmt.Sprintf("held(ttl=%q)/tomb=%q/q=%s/hold=%s/a7=%s/member=%v/user=%s", lock.ttl, tomb, q, hold, a7, mem != "", u),
									st:   state37{lock: lock.v, lockTTL: lock.ttl, tomb: tomb, queue: qs[q]},
									user: u, argv: relArgv37(hold, mem, a7),
								})
							}
						}
					}
				}
			}
		}
	}
	for _, lock := range []string{"", other37 + ":5", "~" + me37 + ":5", me37, "~" + other37 + ":5", me37 + "x:5"} {
		for _, tomb := range []string{"", "1", "l", "x", "h"} {
			for _, q := range []string{"none", "liveSubFenced", "mineOnly"} {
				for _, hold := range []string{"0", "3000"} {
					for _, a7 := range []string{"1", "l", "x"} {
						for _, mem := range []string{"", mine37} {
							for _, u := range []string{"default", "nopub"} {
								cases = append(cases, tc{
									name: fmt.Sprintf("lock=%q/tomb=%q/q=%s/hold=%s/a7=%s/member=%v/user=%s", lock, tomb, q, hold, a7, mem != "", u),
									st:   state37{lock: lock, lockTTL: "10000", tomb: tomb, queue: qs[q]},
									user: u, argv: relArgv37(hold, mem, a7),
								})
							}
						}
					}
				}
			}
		}
	}
	// Other publish commands (the runtime always sends PUBLISH: a refusal
	// by an unknown command counts as refused) and a queue or expiry hash
	// of the wrong type (errors part way through).
	for _, q := range []string{"none", "liveSubFenced", "dead40", "mineOnly"} {
		for _, hold := range []string{"0", "3000"} {
			for _, a7 := range []string{"1", "l"} {
				for _, mem := range []string{"", mine37} {
					for _, pub := range []string{"SPUBLISH", "NOSUCHCMD"} {
						argv := relArgv37(hold, mem, a7)
						argv[2] = pub
						cases = append(cases, tc{
							name: fmt.Sprintf("held/q=%s/hold=%s/a7=%s/member=%v/pub=%s", q, hold, a7, mem != "", pub),
							st:   state37{lock: me37 + ":5", lockTTL: "10000", queue: qs[q]},
							user: "default", argv: argv,
						})
					}
					for _, wt := range []int{5, 6} {
						st := state37{lock: me37 + ":5", lockTTL: "10000", wrongType: wt}
						if wt == 6 {
							st.queue = qs[q]
						}
						cases = append(cases, tc{
							name: fmt.Sprintf("held/wrongtype=KEYS[%d]/q=%s/hold=%s/a7=%s/member=%v", wt, q, hold, a7, mem != ""),
							st:   st, user: "default", argv: relArgv37(hold, mem, a7),
						})
					}
				}
			}
		}
	}
	bad, fewer := 0, 0
	answers := map[string]int{}
	for _, c := range cases {
		ost, own := c.st, false
		// A forced release ("x") takes out every entry of the forced
		// identity, hold-min or not (TestAdversary41_ForcedHolderGetsKeyBackBeforeItLooks).
		forced := c.argv[6] == "x"
		if c.st.lock == me37+":5" && c.st.wrongType == 0 && (c.argv[5] == "" && c.argv[1] != "3000" || forced) { // held, no hold-min: a handover
			// The caller's own entry in the queue, not named by the call
			// (a ForceRelease, or an entry Redis brought back): the old
			// script handed the key back to the caller's identity
			// (TestAdversary40_ForceReleaseHandsBackToHolder); the new one
			// passes over it. The reference is the old script on the
			// queue without that entry (the commands differ: the new one
			// reads and removes it).
			ost.queue, ost.scores = nil, nil
			for i, en := range c.st.queue {
				if en.m == mine37 {
					own = true
					continue
				}
				ost.queue = append(ost.queue, en)
				ost.scores = append(ost.scores, float64(i+1)) // the scores the new script sees
			}
		}
		o := e.run(0, ost, c.user, c.argv)
		n := e.run(1, c.st, c.user, c.argv)
		if forced {
			forcedTomb37(c.st, o, &n)
		}
		if own {
			o.cmds, n.cmds = nil, nil
		}
		a := o.answer
		if len(a) > 40 {
			a = a[:40]
		}
		answers[a]++
		if len(n.cmds) < len(o.cmds) {
			fewer++
		}
		if d := diff37(o, n); d != "" {
			bad++
			if bad <= 10 {
				t.Errorf("%s:\n%s", c.name, d)
			}
		}
	}
	t.Logf("%d cases, %d differ, %d ran fewer commands; old answers seen: %v", len(cases), bad, fewer, answers)
}

// TestAdversary37_MatrixSeesCommands checks the harness itself: MONITOR
// shows the script's commands, PSUBSCRIBE its messages (a leader term's
// release with nobody queued, and one whose 'r' is refused).
func TestAdversary37_MatrixSeesCommands(t *testing.T) {
	e := newEnv37(t)
	st := state37{lock: me37 + ":5", lockTTL: "10000"}
	for which := range 2 {
		o := e.run(which, st, "default", relArgv37("0", "", "l"))
		want := []string{
			`"GET" "lease:{k37}:l"`,
			`"SET" "lease:{k37}:r:` + me37 + `" "l" "PX" "60000"`,
			`"ZRANGE" "lease:{k37}:q" "0" "0"`,
			`"DEL" "lease:{k37}:l"`,
			`"PUBLISH" "lease:{k37}:c" "r"`,
		}
		if o.answer != "1" || !slices.Equal(o.cmds, want) || !slices.Equal(o.msgs, []string{"lease:{k37}:c <- r"}) {
			t.Errorf("script %d: answer %s, commands %q, messages %q", which, o.answer, o.cmds, o.msgs)
		}
		o = e.run(which, st, "nopub", relArgv37("0", "", "l"))
		if o.answer != "11" || len(o.msgs) != 0 || len(o.keys) != 2 {
			t.Errorf("script %d refused: answer %s, messages %q, keys %q", which, o.answer, o.msgs, o.keys)
		}
	}
}

// TestAdversary37_HoldArgumentNotAnInteger gives ARGV[2] values that are
// not plain integers (the runtime always sends an integer: these reach
// the script only from another caller of it). Lua 5.1's tonumber takes
// "nan" (strtod): the old script's "hold > 0" was false for NaN and it
// released; the new one's "hold <= 0" is false too, so it skips the
// release with nobody queued, skips the hold-min (NaN > 0 false), and
// reaches "#head" with head nil: an error after no write, where the old
// script released (or handed over) and told the waiters. Failed for
// "nan", "-nan" and "NaN" until the fast path's test became
// "not (hold > 0)".
func TestAdversary37_HoldArgumentNotAnInteger(t *testing.T) {
	e := newEnv37(t)
	now := time.Now().UnixMilli()
	qs := queues37(now)
	// Lua reads "1e4", "0x2710" and " 5000 " as numbers (a hold of 10s
	// and 5s): holds short enough to expire between the script and the
	// read of the keys ("0x10" was 16ms) made the two runs' keys differ
	// under load.
	for _, hold := range []string{"nan", "-nan", "NaN", "inf", "-inf", "1e4", "0x2710", " 5000 ", "0.5", "-0", "abc", ""} {
		for _, q := range []string{"none", "liveSubFenced"} {
			st := state37{lock: me37 + ":5", lockTTL: "10000", queue: qs[q]}
			o := e.run(0, st, "default", relArgv37(hold, "", "l"))
			n := e.run(1, st, "default", relArgv37(hold, "", "l"))
			if strings.HasPrefix(o.answer, "error") && strings.HasPrefix(n.answer, "error") {
				// Both refuse the argument (after the same effects, compared
				// below); only Lua's wording differs ("compare number with
				// nil" for "hold > 0", "nil with number" for "hold <= 0").
				if o.answer != n.answer {
					t.Logf("hold %q: old %s; new %s", hold, o.answer, n.answer)
				}
				o.answer, n.answer = "error", "error"
				// The argument is refused by the hold-min's first write:
				// the old script's SET, the new one's PEXPIRE (see
				// release.lua). The keys left are compared below.
				o.cmds, n.cmds = nil, nil
			}
			if d := diff37(o, n); d != "" {
				t.Errorf("hold %q, queue %s:\n%s", hold, q, d)
			}
		}
	}
}

// TestAdversary37_LeaderStepDownNobodyQueued: a leader term's release with
// nobody queued (the new early return) still says "r" on the key's
// channel: a WatchLeader whose re-check is 30s hears the step-down at
// once. Under a user without the channel the release is still reported
// released, with one subscription_failed (ErrRefused): the answer 11.
func TestAdversary37_LeaderStepDownNobodyQueued(t *testing.T) {
	srv := leasetest.StartRedis(t)
	direct := srv.Client(t)
	ctx := context.Background()
	for _, acl := range []bool{false, true} {
		key := fmt.Sprintf("adv37-lead-%v", acl)
		rdb := srv.Client(t)
		if acl {
			rdb = srv.ACLUser(t, "nochan37", "pw", "~*", "+@all")
		}
		c, rec := newClient(t, rdb)
		obs, _ := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
		term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L37"})
		l := term.waitEntered(t)
		// Watched from the term on (a grant is not announced: a watch
		// begun before it would see it only at its 30s re-check).
		wctx, cancel := context.WithCancel(ctx)
		ch := obs.WatchLeader(wctx, key)
		for got := false; !got; {
			select {
			case w := <-ch:
				got = w.Err == nil && w.Holder != ""
			case <-time.After(5 * time.Second):
				t.Fatalf("acl=%v: the watch never saw the leader", acl)
			}
		}
		time.Sleep(50 * time.Millisecond) // the watch waits on its channel
		stopped := time.Now()
		term.stop(t)
		if !acl {
			for heard := false; !heard; {
				select {
				case w := <-ch:
					heard = w.Err == nil && w.Holder == ""
				case <-time.After(3 * time.Second):
					t.Fatalf("the watch (re-check 30s) did not hear the step-down within 3s")
				}
			}
			t.Logf("step-down heard %v after the stop", time.Since(stopped).Round(time.Millisecond))
		}
		cancel()
		tomb, _ := direct.Get(ctx, "lease:{"+key+"}:r:"+l.Owner()).Result()
		n, _ := direct.Exists(ctx, lockKey(key)).Result()
		rel, unc, sf := rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed), rec.Count(lease.EventSubscriptionFailed)
		wantSF := 0
		if acl {
			wantSF = 1
		}
		if tomb != "l" || n != 0 || rel != 1 || unc != 0 || sf != wantSF {
			t.Errorf("acl=%v: tombstone %q, key exists %d, released %d, unconfirmed %d, subscription_failed %d (want l, 0, 1, 0, %d)", acl, tomb, n, rel, unc, sf, wantSF)
		}
		if acl {
			for _, e := range rec.Events() {
				if e.Kind == lease.EventSubscriptionFailed && !errors.Is(e.Err, lease.ErrRefused) {
					t.Errorf("subscription_failed %v: want ErrRefused", e.Err)
				}
			}
		}
	}
}

// TestAdversary37_CutReplyReplays: the reply of a release with nobody
// queued is cut after it ran; go-redis re-sends it and the replay answers
// from the tombstone as the first run did: a plain Do (1), a hold-min Do
// (2) and a leader term (1). No false loss, no unconfirmed release.
func TestAdversary37_CutReplyReplays(t *testing.T) {
	srv := leasetest.StartRedis(t)
	p := leasetest.StartProxy(t, srv.Addr())
	r := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { r.Close() })
	c, rec := newClient(t, r)
	direct := srv.Client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "adv37-warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i, hold := range []time.Duration{0, 300 * time.Millisecond} {
		key := fmt.Sprintf("adv37-cut-%d", i)
		var owner string
		s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, HoldMin: hold}
		err := c.Do(ctx, key, s, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			owner = l.Owner()
			p.Set(leasetest.CutNextReply)
			return nil
		})
		if err != nil {
			t.Errorf("hold %v: Do = %v after a cut release reply", hold, err)
		}
		tomb, _ := direct.Get(ctx, "lease:{"+key+"}:r:"+owner).Result()
		v, _ := direct.Get(ctx, lockKey(key)).Result()
		want, wantV := "1", ""
		if hold > 0 {
			want, wantV = "h", "~"+owner+":"
		}
		if tomb != want || !strings.HasPrefix(v, wantV) || (wantV == "" && v != "") {
			t.Errorf("hold %v: tombstone %q, key %q; want %q, %q…", hold, tomb, v, want, wantV)
		}
	}
	key := "adv37-cut-lead"
	term := adv26Lead(c, key, lease.LeadSpec{TTL: 30 * time.Second, Owner: "L37"})
	l := term.waitEntered(t)
	p.Set(leasetest.CutNextReply)
	term.stop(t)
	if tomb, _ := direct.Get(ctx, "lease:{"+key+"}:r:"+l.Owner()).Result(); tomb != "l" {
		t.Errorf("leader term: tombstone %q, want l", tomb)
	}
	if p.Cut() != 3 {
		t.Errorf("%d replies cut, want 3", p.Cut())
	}
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		for _, e := range rec.Events() {
			if e.Kind == lease.EventReleaseUnconfirmed {
				t.Logf("unconfirmed: %v", e.Err)
			}
		}
		t.Errorf("%d unconfirmed releases, want 0", n)
	}
}

// TestAdversary37_ForceReleaseNobodyQueued: ForceRelease (tombstone "x")
// of a lease with nobody queued takes the early return: the key goes, the
// tombstone says "x", a second ForceRelease answers not held, the holder
// learns it lost the lease to a forced release, and its own release
// answers -3 (unconfirmed, "released from outside"), not 1.
func TestAdversary37_ForceReleaseNobodyQueued(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, rec := newClient(t, srv.Client(t), lease.WithRecheck(100*time.Millisecond))
	admin, _ := newClient(t, srv.Client(t))
	direct := srv.Client(t)
	ctx := context.Background()
	key := "adv37-force"
	entered := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, key, lease.Spec{TTL: 600 * time.Millisecond, Deadline: 5 * time.Second}, func(fctx context.Context) error {
			l, _ := lease.FromContext(fctx)
			entered <- l.Owner()
			<-fctx.Done()
			return context.Cause(fctx)
		})
	}()
	var owner string
	select {
	case owner = <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no grant")
	}
	res, err := admin.ForceRelease(ctx, key, owner)
	if err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v; want ForceReleased", res, err)
	}
	if tomb, _ := direct.Get(ctx, "lease:{"+key+"}:r:"+owner).Result(); tomb != "x" {
		t.Errorf("tombstone %q, want x", tomb)
	}
	if n, _ := direct.Exists(ctx, lockKey(key)).Result(); n != 0 {
		t.Errorf("key still exists after ForceRelease")
	}
	if res, err := admin.ForceRelease(ctx, key, owner); err != nil || res != lease.ForceNotHeld {
		t.Errorf("second ForceRelease = %v, %v; want ForceNotHeld", res, err)
	}
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not learn of the forced release within 5s")
	}
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("holder's Do = %v, want ErrLost", err)
	}
	t.Logf("holder: %v; released %d, unconfirmed %d", err, rec.Count(lease.EventReleased), rec.Count(lease.EventReleaseUnconfirmed))
	if rec.Count(lease.EventReleased) != 0 {
		t.Errorf("holder reported its lease released by itself after a forced release")
	}
}

// TestAdversary37_HandoverAndHoldMinBetweenClients: the paths after the
// helpers: A's release hands the key to B's waiting call at once (B's
// Client re-checks every 30s, so only the message can explain it); B's
// hold-min release keeps the key marked "~" (tombstone "h") and C, queued,
// gets it when the hold ends, not before; C's release with nobody queued
// deletes the key.
func TestAdversary37_HandoverAndHoldMinBetweenClients(t *testing.T) {
	srv := leasetest.StartRedis(t)
	a, _ := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	b, brec := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	cc, crec := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	direct := srv.Client(t)
	ctx := context.Background()
	key := "adv37-hand"
	waitS := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}
	var aOut, bIn, bOut, cIn atomic.Int64
	bDone, cDone := make(chan error, 1), make(chan error, 1)
	err := a.Do(ctx, key, spec(5*time.Second, 10*time.Second), func(context.Context) error {
		go func() {
			s := waitS
			s.HoldMin = 400 * time.Millisecond
			bDone <- b.Do(ctx, key, s, func(fctx context.Context) error {
				bIn.Store(time.Now().UnixNano())
				go func() {
					cDone <- cc.Do(ctx, key, waitS, func(context.Context) error {
						cIn.Store(time.Now().UnixNano())
						return nil
					})
				}()
				if !waitFor(3*time.Second, func() bool { return crec.Count(lease.EventWaiting) > 0 }) {
					t.Error("C never waited")
				}
				time.Sleep(50 * time.Millisecond)
				bOut.Store(time.Now().UnixNano())
				return nil
			})
		}()
		if !waitFor(3*time.Second, func() bool { return brec.Count(lease.EventWaiting) > 0 }) {
			t.Error("B never waited")
		}
		time.Sleep(50 * time.Millisecond)
		aOut.Store(time.Now().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	for name, ch := range map[string]chan error{"B": bDone, "C": cDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not finish", name)
		}
	}
	handover := time.Duration(bIn.Load() - aOut.Load())
	afterHold := time.Duration(cIn.Load() - bIn.Load())
	afterB := time.Duration(cIn.Load() - bOut.Load())
	t.Logf("A→B %v; B's entry → C's %v, B's return → C's %v (hold-min 400ms, counted from B's grant)", handover.Round(time.Millisecond), afterHold.Round(time.Millisecond), afterB.Round(time.Millisecond))
	if handover < 0 || handover > time.Second {
		t.Errorf("B entered %v after A's fn returned; want a prompt handover", handover)
	}
	// B's hold counts from its grant (A's handover): C enters no sooner
	// than 400ms after B entered, and promptly after that.
	if afterHold < 400*time.Millisecond || afterHold > 2*time.Second {
		t.Errorf("C entered %v after B returned (%v after B entered); want after B's hold-min and promptly", afterB, afterHold)
	}
	if n, _ := direct.Exists(ctx, lockKey(key)).Result(); n != 0 {
		t.Errorf("key still exists after C's release")
	}
}

// TestAdversary37_AsideHoldMinOfAWaiter is outside df067c4 (the release
// script only applies the hold the Client computes): a waiter granted by a
// handover counted its HoldMin from the acquire that found the key busy
// (a.sent = busySent, run.go), not from the grant. A waiter that waited
// longer than its HoldMin has no hold at all: the next waiter gets the key
// as soon as its fn returns, although Spec.HoldMin says "keeps the lease
// at least this long after the grant". Failed (with e198a20's script too)
// until run counted the hold from when the grant is known.
func TestAdversary37_AsideHoldMinOfAWaiter(t *testing.T) {
	srv := leasetest.StartRedis(t)
	a, _ := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	b, brec := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	cc, crec := newClient(t, srv.Client(t), lease.WithRecheck(30*time.Second))
	ctx := context.Background()
	key := "adv37-holdwait"
	waitS := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Wait: 8 * time.Second}
	var bIn, cIn atomic.Int64
	bDone, cDone := make(chan error, 1), make(chan error, 1)
	err := a.Do(ctx, key, spec(5*time.Second, 10*time.Second), func(context.Context) error {
		go func() {
			s := waitS
			s.HoldMin = 300 * time.Millisecond
			bDone <- b.Do(ctx, key, s, func(fctx context.Context) error {
				bIn.Store(time.Now().UnixNano())
				go func() {
					cDone <- cc.Do(ctx, key, waitS, func(context.Context) error {
						cIn.Store(time.Now().UnixNano())
						return nil
					})
				}()
				waitFor(3*time.Second, func() bool { return crec.Count(lease.EventWaiting) > 0 })
				return nil
			})
		}()
		waitFor(3*time.Second, func() bool { return brec.Count(lease.EventWaiting) > 0 })
		time.Sleep(500 * time.Millisecond) // B waits longer than its HoldMin
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan error{bDone, cDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call did not finish")
		}
	}
	if d := time.Duration(cIn.Load() - bIn.Load()); d < 300*time.Millisecond {
		t.Errorf("C entered %v after B entered (B's grant), within B's HoldMin of 300ms", d.Round(time.Millisecond))
	}
}
