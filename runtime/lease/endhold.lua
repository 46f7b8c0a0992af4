-- endhold: end a hold-min early (Client.ForceRelease of a lease whose
-- holder has released it with a hold, marked "~" in the lock's value):
-- delete the lock if it still holds ARGV[1]'s held value, and wake the
-- key's waiters to try again ("x": like every one-letter message, it wakes
-- them all; a hold that runs out wakes them the same way, by its PTTL).
-- A tombstone ("e") makes a replay of this call (go-redis re-sends after a
-- lost reply) answer as the first run did.
-- KEYS[1] lock, KEYS[2] channel, KEYS[3] ARGV[1]'s tombstone, KEYS[4] the
-- key's queue (same hash tag)
-- ARGV[1] identity, ARGV[2] publish command, ARGV[3] tombstone ttl ms
-- Returns 1 ended (or a replay), 0 not held, -1 held by another (or by
-- ARGV[1] without a hold: the caller uses the release script then).
if redis.call('GET', KEYS[3]) == 'e' then return 1 end
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local want = '~' .. ARGV[1] .. ':'
if string.sub(v, 1, #want) ~= want then return -1 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[3], 'e', 'PX', ARGV[3])
-- A refused publish (an ACL) does not undo the end of the hold: 11 says
-- that the hold ended and waiters were not told.
local refused = type(redis.pcall(ARGV[2], KEYS[2], 'x')) ~= 'number'
-- Waiters listen on their Clients' own channels (see release.lua).
local told = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, 31)) do
  local inbox = string.match(m, '^[^|]+|%d+|%d|%d+|(.+)$')
  -- A fenced waiter's entry ends in |counter ttl, after its inbox (which
  -- ends in "}:c": TestAdversary76_HoldMinTellsFencedWaiters).
  inbox = inbox and (string.match(inbox, '^(.*)|%d+$') or inbox)
  if inbox and not told[inbox] then
    told[inbox] = true
    if type(redis.pcall(ARGV[2], inbox, #KEYS[2] .. ':' .. KEYS[2] .. 'x')) ~= 'number' then refused = true end
  end
end
if refused then return 11 end
return 1
