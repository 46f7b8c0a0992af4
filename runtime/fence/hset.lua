-- fenced HSET: KEYS[1] the record (a hash); ARGV[1] token, ARGV[2] owner,
-- ARGV[3..] field/value pairs. Writes only if the stamp is newer than the
-- stored one, or equal and from the same owner.
-- Returns {1} when written, {0, stored token, stored owner} when stale.
-- The stamp is written after the caller's pairs, so that even a pair naming
-- a stamp field (the Go side refuses those) cannot forge it.
-- Tokens are compared as decimal digits, not as Lua numbers (doubles, which
-- skip integers past 2^53): exact up to 2^64 - 1.
local function digits(s)
  if not string.find(s, '^%d+$') then return nil end
  s = string.gsub(s, '^0+', '')
  return s
end
-- cmp returns -1, 0 or 1 as a <, =, > b (canonical digit strings).
local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y and -1 or 1 end
  end
  return 0
end
local t = digits(ARGV[1])
if not t then
  return redis.error_reply('ERR fence: the token is not a decimal integer')
end
local cur = redis.call('HMGET', KEYS[1], '_fence_token', '_fence_owner')
if cur[1] then
  local c = digits(cur[1])
  if not c then
    return redis.error_reply('ERR fence: the record\'s stored token is not a decimal integer')
  end
  local d = cmp(t, c)
  if d < 0 or (d == 0 and cur[2] ~= ARGV[2]) then
    return {0, cur[1], cur[2] or ''}
  end
end
-- In chunks: unpack returns at most a few thousand values.
for i = 3, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], '_fence_token', ARGV[1], '_fence_owner', ARGV[2])
return {1}
