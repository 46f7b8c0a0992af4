-- fenced HSET: KEYS[1] the record (a hash); ARGV[1] token, ARGV[2] owner,
-- ARGV[3] the write's identity (16 hex digits, the same in every send of
-- one write), ARGV[4..] field/value pairs. Writes only if the stamp is
-- newer than the stored one, or equal and from the same owner.
-- Returns {1} when written, {0, stored token, stored owner} when stale.
-- The identities of the last 16 writes under the stored stamp are kept in
-- _fence_writes (" id id … "): a send of a write already carried out (go-
-- redis re-sends a write whose reply it lost; the first send may reach
-- the server after the re-send, and after later writes) answers {1} and
-- writes nothing, so it never undoes a later write.
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
if not string.find(ARGV[3], '^%x+$') then
  return redis.error_reply('ERR fence: the write\'s identity is not hex digits')
end
local cur = redis.call('HMGET', KEYS[1], '_fence_token', '_fence_owner', '_fence_writes')
local writes = ' ' .. ARGV[3] .. ' '
if cur[1] then
  local c = digits(cur[1])
  if not c then
    return redis.error_reply('ERR fence: the record\'s stored token is not a decimal integer')
  end
  local d = cmp(t, c)
  if d < 0 or (d == 0 and cur[2] ~= ARGV[2]) then
    return {0, cur[1], cur[2] or ''}
  end
  if d == 0 and cur[3] then
    if string.find(cur[3], writes, 1, true) then
      return {1} -- carried out already (an earlier send of this write)
    end
    writes = cur[3] .. ARGV[3] .. ' '
    local keep = 16 * (#ARGV[3] + 1) + 1
    if #writes > keep then
      writes = string.sub(writes, #writes - keep + 1)
    end
  end
end
-- In chunks: unpack returns at most a few thousand values.
for i = 4, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], '_fence_token', ARGV[1], '_fence_owner', ARGV[2], '_fence_writes', writes)
return {1}
