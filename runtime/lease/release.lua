-- release: delete the lease only if ARGV[1] holds it, and notify waiters;
-- with ARGV[2] > 0 (hold-min), set the remaining hold as TTL instead.
-- KEYS[1] lock key, KEYS[2] notification channel (same hash tag)
-- ARGV[1] identity, ARGV[2] hold ms, ARGV[3] publish command
-- Returns 1 released, 2 hold set, 0 not held (expired, or a replay of a
-- release that already ran), -1 held by another identity (left alone).
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local sep = string.find(v, ':', 1, true)
if not sep or string.sub(v, 1, sep - 1) ~= ARGV[1] then return -1 end
local hold = tonumber(ARGV[2])
if hold > 0 then
  redis.call('PEXPIRE', KEYS[1], hold)
  return 2
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[3], KEYS[2], '1')
return 1
