-- acquire: grant the lease to ARGV[1] unless another identity holds it.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash tag)
-- ARGV[1] identity, ARGV[2] ttl ms, ARGV[3] "1" to mint a fencing token,
-- ARGV[4] counter ttl ms
-- Returns {1, token, pttl} on a grant, {0, "0", pttl} when busy.
-- Replaying the same call (a client retry after a lost reply) answers the
-- same grant again: the identity is compared, not just the key's existence.
local v = redis.call('GET', KEYS[1])
if v then
  local sep = string.find(v, ':', 1, true)
  if sep and string.sub(v, 1, sep - 1) == ARGV[1] then
    return {1, string.sub(v, sep + 1), redis.call('PTTL', KEYS[1])}
  end
  return {0, '0', redis.call('PTTL', KEYS[1])}
end
local tok = '0'
if ARGV[3] == '1' then
  -- token = max(counter + 1, server time in microseconds): the time floor
  -- keeps tokens increasing when the counter expires or is lost.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local c = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local n = c + 1
  if now > n then n = now end
  tok = string.format('%d', n)
  redis.call('SET', KEYS[2], tok, 'PX', ARGV[4])
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. tok, 'PX', ARGV[2])
return {1, tok, tonumber(ARGV[2])}
