-- fenced HSET: KEYS[1] the record (a hash); ARGV[1] token, ARGV[2] owner,
-- ARGV[3..] field/value pairs. Writes only if the stamp is newer than the
-- stored one, or equal and from the same owner.
-- Returns {1} when written, {0, stored token, stored owner} when stale.
-- The stamp is written after the caller's pairs, so that even a pair naming
-- a stamp field (the Go side refuses those) cannot forge it.
local cur = redis.call('HMGET', KEYS[1], '_fence_token', '_fence_owner')
if cur[1] then
  local t, c = tonumber(ARGV[1]), tonumber(cur[1])
  if t < c or (t == c and cur[2] ~= ARGV[2]) then
    return {0, cur[1], cur[2] or ''}
  end
end
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
redis.call('HSET', KEYS[1], '_fence_token', ARGV[1], '_fence_owner', ARGV[2])
return {1}
