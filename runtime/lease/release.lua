-- release: end the lease if ARGV[1] holds it. The first live waiter in the
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
-- ARGV[4] tombstone ttl ms (a forced release's: the key's remaining TTL
-- more), ARGV[5] counter ttl ms, ARGV[6] the caller's
-- queue member ("" if it never queued), ARGV[7] the tombstone's value: "1"
-- for the holder's own release ("1>" once it handed the key over), "l" for
-- a leader term's own release ("l>" handed over; as
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
-- The caller's queue entry (ARGV[6]) is taken out where it could matter:
-- at once when the key is not the caller's (a waiter giving up), and on
-- the caller's own release only after the queue's head was read and found
-- non-empty (an empty queue holds no entry of the caller's, so the common
-- release, with nobody queued, does not ask; a grant normally took the
-- entry out already, but not after Redis lost writes). The entry's expiry
-- is written and removed with it: only when there was an entry.
-- The key first: while it holds this identity, this is a release of it,
-- whatever tombstones an earlier grant to the same identity left (a claim
-- released from outside, then granted to it again). Otherwise the
-- tombstone tells a replay from a loss.
local v = redis.call('GET', KEYS[1])
local sep = v and string.find(v, ':', 1, true)
if not sep or string.sub(v, 1, sep - 1) ~= ARGV[1] then
  if ARGV[6] ~= '' and redis.call('ZREM', KEYS[5], ARGV[6]) == 1 then
    redis.call('HDEL', KEYS[6], ARGV[6])
  end
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
-- A forced release's tombstone names the cause to the holder, which learns
-- of the release at its next renewal, at most its remaining TTL from now
-- (read here, in the release: a renewal that landed since the caller read
-- the key counts): it lasts that long, and the tombstone TTL more
-- (TestAdversary62_ForceReleaseRenewedAfterTheRead).
local tombPX = ARGV[4]
if ARGV[7] == 'x' then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then tombPX = left + tonumber(ARGV[4]) end
end
-- A release with nobody queued (the common case) ends here, before the
-- helpers below are made (a script makes its local functions anew on
-- every call).
-- The tombstone is the release's first write, so that a refusal of it
-- (an ACL without SET) leaves everything as it was
-- (TestAdversary17_ACLMissingCommandsRefusesCleanly). At maxmemory the
-- server refuses a script's first write that may grow memory (SET) but,
-- once the script has written, lets it finish: refused with OOM, the
-- tombstone is written after the release's first write that frees memory
-- (DEL, or a queue entry's ZREM) instead (late), so that a release goes
-- through at maxmemory (TestAdversary39_OOMRelease).
local head, late
if not (hold > 0) then -- as the hold-min's "hold > 0" below, NaN included
  local r = redis.pcall('SET', KEYS[3], ARGV[7], 'PX', tombPX)
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'OOM', 1, true) then return r end
    late = true
  end
  -- The queue's head is read at once, without asking first whether the
  -- queue exists: a handover calls one command less, and a user whose ACL
  -- lacks ZRANGE is refused at its first release, not only once someone
  -- waits (TestAdversary43_NoZrangeReleaseAsBefore). An empty range of a
  -- missing key costs about 2 us more than EXISTS (README).
  head = redis.call('ZRANGE', KEYS[5], 0, 0)
  if #head == 0 then
    redis.call('DEL', KEYS[1])
    if late then redis.call('SET', KEYS[3], ARGV[7], 'PX', tombPX) end
    if ARGV[7] == 'l' and type(redis.pcall(ARGV[3], KEYS[2], 'r')) ~= 'number' then return 11 end
    return 1
  end
end
-- Someone is queued, or a hold is set: the caller's own entry goes first
-- (the handover below must not hand the key back to this call, nor the
-- hold-min tell it to wait).
if ARGV[6] ~= '' and redis.call('ZREM', KEYS[5], ARGV[6]) == 1 then
  redis.call('HDEL', KEYS[6], ARGV[6])
  if head then head = redis.call('ZRANGE', KEYS[5], 0, 0) end
end
-- A release forced from outside takes out every entry of the identity it
-- forces out, wherever it is queued (one Redis brought back after losing
-- writes): a later release must not hand the key back to a holder that
-- was told it lost it (TestAdversary41_ForcedHolderGetsKeyBackBeforeItLooks).
-- Only here: a forced release is an operator's, and reads the queue.
if ARGV[7] == 'x' then
  local pre, gone = ARGV[1] .. '|', false
  for _, m in ipairs(redis.call('ZRANGE', KEYS[5], 0, 1023)) do
    if string.sub(m, 1, #pre) == pre then
      redis.call('ZREM', KEYS[5], m)
      redis.call('HDEL', KEYS[6], m)
      gone = true
    end
  end
  if gone and head then head = redis.call('ZRANGE', KEYS[5], 0, 0) end
end
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
    -- A fenced waiter's entry ends in |counter ttl, after its inbox (which
    -- ends in "}:c": TestAdversary76_HoldMinTellsFencedWaiters).
    inbox = inbox and (string.match(inbox, '^(.*)|%d+$') or inbox)
    if inbox and not told[inbox] then
      told[inbox] = true
      tell(cmd, inbox, channel, msg)
    end
  end
end
if hold > 0 then
  -- The lock's SET first (a refusal by an ACL changes nothing); refused
  -- at maxmemory, after a PEXPIRE (a write that does not grow memory, see
  -- above).
  local r = redis.pcall('SET', KEYS[1], '~' .. v, 'PX', hold)
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'OOM', 1, true) then return r end
    redis.call('PEXPIRE', KEYS[1], hold)
    redis.call('SET', KEYS[1], '~' .. v, 'PX', hold)
  end
  redis.call('SET', KEYS[3], 'h', 'PX', ARGV[4])
  announce(ARGV[3], KEYS[2], 'h')
  tellWaiters(KEYS[5], KEYS[2], 'h', ARGV[3])
  return result(2)
end
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
-- Someone is queued (head, read above): the first live entry gets the key.
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
      -- probe channel; absent in entries of older Clients), and for a
      -- fenced waiter |counter ttl ms (its Client's WithCounterTTL; absent
      -- in entries of older Clients: the releaser's then). The inbox ends
      -- in "}:c", never in "|" and digits.
      local id, ttl, fence, claim, inbox = string.match(m, '^([^|]+)|(%d+)|(%d)|(%d+)|?(.*)$')
      local counterPX = ARGV[5]
      if inbox then
        local ib, cpx = string.match(inbox, '^(.*)|(%d+)$')
        if ib then inbox, counterPX = ib, cpx end
      end
      -- An entry of the releasing identity itself (one that Redis brought
      -- back after losing writes, under a release or a ForceRelease that
      -- does not name it) is passed over: the key is not handed back to
      -- the identity that gives it up (TestAdversary40_ForceReleaseHandsBackToHolder).
      local tok = '0'
      if id and id ~= ARGV[1] and fence == '1' then
        -- A fenced waiter that cannot be given a token (a counter of
        -- another type, or at 2^63 - 1: set from outside) is passed over
        -- as a dead one is: the release goes on to the next waiter, and
        -- that waiter's own acquire is refused with the reason
        -- (TestAdversary41_RefusedHandoverEndToEnd). The counter lives as
        -- long after this grant as the waiter's Client has it live after
        -- its own (TestAdversary75a_HandoverCounterTTLIsTheGrantees).
        tok = takeTok(KEYS[4], tonumber(t[1]) * 1000000 + tonumber(t[2]), counterPX)
      end
      if id and id ~= ARGV[1] and tok then
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
        -- The tombstone of a handover says so ("1>", "l>"; a forced
        -- release's stays "x"): Watch tells a handover from the holder's
        -- release by it, as the message may reach Watch after its next
        -- look, or never (TestWatchTellsHandoverWithoutItsMessage). A
        -- replay reads any value but "x" and "h" as a release.
        if ARGV[7] ~= 'x' then
          redis.call('SET', KEYS[3], ARGV[7] .. '>', 'PX', tombPX)
        elseif late then
          redis.call('SET', KEYS[3], ARGV[7], 'PX', tombPX)
        end
        announce(ARGV[3], KEYS[2], note(px))
        return result(1)
      end
    end
  end
end
redis.call('DEL', KEYS[1])
if late then redis.call('SET', KEYS[3], ARGV[7], 'PX', tombPX) end
if ARGV[7] == 'l' then announce(ARGV[3], KEYS[2], 'r') end
return result(1)
