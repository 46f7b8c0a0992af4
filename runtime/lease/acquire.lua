-- acquire: grant the lease to ARGV[1] unless another identity holds it; a
-- caller that will wait joins the key's queue, so that the release hands
-- the lease to the first waiter instead of letting everyone race.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue (zset: member by
-- arrival), KEYS[4] queue expiries (hash: member -> ms) (same hash tag)
-- ARGV[1] identity, ARGV[2] ttl ms, ARGV[3] "1" to mint a fencing token,
-- ARGV[4] counter ttl ms, ARGV[5] queue entry lifetime ms (0: not
-- waiting), ARGV[6] queue member (see release.lua), ARGV[7]
-- the key's release channel: a waiter publishes "w" on it at each look,
-- so that a Client keeping the lease between calls (Spec.Keep) releases it,
-- ARGV[8] this attempt's sequence number in its call: stored with the
-- entry, so that the release's message tells the waiter which of its
-- busy answers the handover came after (see release.lua), ARGV[9] "1" to
-- announce a grant on the key's channel ("g": a Lead term starts, and
-- WatchLeader hears it at once; best effort, as "w")
-- Returns one integer: the fencing token (0 unfenced) on a grant; when
-- busy, -3 - the key's PTTL (-1: no key, -2: no expiry, -3 - n: n ms
-- left). One integer is read without the allocations of an array reply.
-- Replaying the same call (a client retry after a lost reply) answers the
-- same grant again: the identity is compared, not just the key's existence.
-- A grant the previous holder's release handed to this identity is found
-- the same way; either way its TTL starts again now.
-- (takeTok: token.lua, put before this script by scripts.go.)
-- answer is a token as the script's answer: a number below 2^53, the
-- digits above (a number would be rounded; the client reads either).
local function answer(tok)
  local n = tonumber(tok)
  if n and n < 9007199254740992 then return n end
  return tok
end
-- refusal is the error for a caller refused at maxmemory (err, the OOM
-- reply): for a fenced caller whose counter could give no token (of
-- another type, or at 2^63 - 1: set from outside), that reason instead,
-- as below maxmemory (a release passes such a waiter over, and its own
-- acquire is refused with the reason: TestAdversary54_PassedOverFencedWaiterAtMaxmemory).
-- Reads only.
local function refusal(err)
  if ARGV[3] ~= '1' then return err end
  local c = redis.pcall('GET', KEYS[2])
  if type(c) == 'table' then return c end
  local digits = c and string.match(c, '^0*(%d+)$')
  if digits and (#digits > 19 or #digits == 19 and digits >= '9223372036854775807') then
    return {err = 'ERR lease: the fencing counter ' .. KEYS[2] .. ' is at 2^63 - 1 or past it (' .. c .. '): no greater token'}
  end
  return err
end
-- The grant is tried first, with SET NX: a free key (the common case)
-- costs one command, not a read and a write. A fenced grant's value
-- carries the time token (the server's time in microseconds), which is
-- the token unless the counter is at or past it: the counter is written,
-- and its old value read, only once the grant was made (takeTok), and in
-- that rare case the value is written again with the counter's next.
local life = tonumber(ARGV[5])
local fence = ARGV[3] == '1'
local tok, t, us = '0', nil, nil
if fence then
  t = redis.call('TIME')
  us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  tok = string.format('%d', us)
end
-- SET NX GET (Redis 7.0) answers a held key's value in the same command:
-- nil when it granted, the value when the key is held. Before 7.0 (NX
-- with GET is a syntax error there) it is SET NX, then GET when held.
-- With pcall: a server at maxmemory refuses the write (OOM) whether or
-- not the key is free, but still answers the reads below, so that a held
-- key is still busy (with its time left) for a call that will not wait
-- and a replay still gets its own grant back, as when the key was read
-- first; a free key is refused, and so is a new waiter (its queue entry
-- is a write: TestAdversary40_WaiterAtMaxmemory), but not a waiter queued
-- before the server got there (see below).
local val = ARGV[1] .. ':' .. tok
local v = redis.pcall('SET', KEYS[1], val, 'NX', 'GET', 'PX', ARGV[2])
if type(v) == 'table' and v.err and string.find(v.err, 'syntax', 1, true) then
  v = redis.pcall('SET', KEYS[1], val, 'NX', 'PX', ARGV[2])
  if not v then
    v = redis.call('GET', KEYS[1])
  elseif not v.err then
    v = false -- granted
  end
end
local refused = type(v) == 'table' and v.err ~= nil
local set = v
if refused then
  v = redis.call('GET', KEYS[1])
  -- A free key whose grant was refused at maxmemory (OOM): a waiter
  -- queued before the server got there still gets it (a hold-min ended,
  -- or the holder's lease ran out). Its queue entry goes first, a write
  -- that frees memory, after which the server lets the script write
  -- (release.lua's tombstone does the same); a caller that was not queued
  -- (the ZREM removes nothing) is refused, nothing changed
  -- (TestAdversary53_HoldMinHolderAtMaxmemory).
  if not v then
    if not string.find(set.err, 'OOM', 1, true) then return set end
    if not (life > 0 and redis.call('ZREM', KEYS[3], ARGV[6]) == 1) then return refusal(set) end
    redis.call('HDEL', KEYS[4], ARGV[6])
    redis.call('SET', KEYS[1], val, 'PX', ARGV[2])
  end
end
if not v then
  if fence then
    local nt, err = takeTok(KEYS[2], us, ARGV[4])
    if not nt then
      -- The counter is not a string (set from outside): no grant.
      redis.call('DEL', KEYS[1])
      return err
    end
    if nt ~= tok then
      tok = nt
      redis.call('SET', KEYS[1], ARGV[1] .. ':' .. tok, 'PX', ARGV[2])
    end
  end
  -- Out of the queue, if an earlier acquire of this call put it there;
  -- its entry's expiry only then (the two are written together).
  if life > 0 and redis.call('ZREM', KEYS[3], ARGV[6]) == 1 then
    redis.call('HDEL', KEYS[4], ARGV[6])
  end
  if ARGV[9] == '1' then redis.pcall('PUBLISH', ARGV[7], 'g') end
  return answer(tok)
end
local sep = string.find(v, ':', 1, true)
if sep and string.sub(v, 1, sep - 1) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return answer(string.sub(v, sep + 1))
end
local pttl = redis.call('PTTL', KEYS[1])
if life > 0 then
  t = t or redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local arrival = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local added = redis.pcall('ZADD', KEYS[3], 'NX', arrival, ARGV[6])
  if type(added) == 'table' then
    -- Refused. At maxmemory ZADD is refused as the script's first write
    -- even when the member is there (it may grow memory), but a waiter
    -- queued before the server got there keeps its place: its re-check (a
    -- timer, or its subscription coming up) must not turn a wait at
    -- maxmemory into an error (TestAcquireQueuedWaiterAtMaxmemory). With
    -- an entry in the expiries, a write that changes nothing comes first
    -- (HDEL of a field no entry has: members are never empty), after which
    -- the server lets the script write; the ZADD again then tells whether
    -- the member was queued. A caller that was not (a new waiter, or one a
    -- release passed over) is refused, its ZADD undone, nothing changed
    -- (TestAdversary54_RefusedRecheckKeepsQueueExpiry). Commands the
    -- least-privilege ACL (README) allows.
    -- A refusal's message from pcall names no command (an ACL's "can't
    -- run this command"): this one is named.
    if not string.find(added.err, 'OOM', 1, true) then return {err = added.err .. ' (the acquire script calls ZADD)'} end
    if not redis.call('HGET', KEYS[4], ARGV[6]) then return refusal(added) end
    redis.call('HDEL', KEYS[4], '')
    if redis.call('ZADD', KEYS[3], 'NX', arrival, ARGV[6]) == 1 then
      redis.call('ZREM', KEYS[3], ARGV[6])
      return refusal(added)
    end
  end
  -- "w" on the key's channel: a Client keeping the lease (Spec.Keep)
  -- releases it once no call uses it. On every look of a waiter, not only
  -- its first: a keeper that missed one (a short loss of replies on its
  -- subscription, which stayed up and so was not confirmed again) hears
  -- the next re-check's (TestAdversary63b_KeeperMissesWaiterInShortBlackhole).
  -- Best effort (an ACL may refuse it).
  redis.pcall('PUBLISH', ARGV[7], 'w')
  redis.call('HSET', KEYS[4], ARGV[6], (now + life) .. ':' .. ARGV[8])
  -- The queue's expiry is lengthened to this entry's, never shortened
  -- (another entry may live longer): by PEXPIRE GT (Redis 7.0), one
  -- command. GT does not set an expiry on a key that has none (a queue
  -- this call just made), and before 7.0 it is an error: read, then set.
  for i = 3, 4 do
    if redis.pcall('PEXPIRE', KEYS[i], life, 'GT') ~= 1 and redis.call('PTTL', KEYS[i]) < life then
      redis.call('PEXPIRE', KEYS[i], life)
    end
  end
end
return -3 - pttl
