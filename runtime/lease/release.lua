-- release: delete the lease only if ARGV[1] holds it, leave a short-lived
-- tombstone with the identity, and notify waiters; with ARGV[2] > 0
-- (hold-min), set the remaining hold as TTL instead and notify waiters that
-- the lease now ends sooner.
-- KEYS[1] lock key, KEYS[2] notification channel, KEYS[3] tombstone key
-- (same hash tag)
-- ARGV[1] identity, ARGV[2] hold ms, ARGV[3] publish command,
-- ARGV[4] tombstone ttl ms
-- Returns 1 released (also when replayed after a release whose reply was
-- lost: the tombstone names us), 2 hold set, 0 not held (expired or deleted
-- from outside), -1 held by another identity (left alone).
local v = redis.call('GET', KEYS[1])
if not v then
  if redis.call('GET', KEYS[3]) == ARGV[1] then return 1 end
  return 0
end
local sep = string.find(v, ':', 1, true)
if not sep or string.sub(v, 1, sep - 1) ~= ARGV[1] then return -1 end
local hold = tonumber(ARGV[2])
if hold > 0 then
  redis.call('PEXPIRE', KEYS[1], hold)
  redis.call(ARGV[3], KEYS[2], 'h')
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[4])
redis.call(ARGV[3], KEYS[2], 'r')
return 1
