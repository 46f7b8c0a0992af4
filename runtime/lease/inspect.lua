-- inspect: read one lease's state in one atomic step (writes nothing), for
-- Client.Inspect and leasectl.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue (zset: member by
-- arrival µs), KEYS[4] queue expiries (hash: member -> ms) (same hash tag)
-- ARGV[1] how many queue entries to return at most
-- Returns {value, pttl, counter, now s, now µs, queued, m1, arrival1,
-- expiry1, m2, ...}: value is the lock's value ("identity:token", or
-- "~identity:token" while a hold-min runs out) or "" when free; pttl the
-- lock's PTTL (-2 free, -1 no expiry); counter the fence counter or "";
-- now the server's TIME; queued the queue's length (ZCARD); then the first
-- ARGV[1] queue members in arrival order, each with its arrival (µs) and
-- expiry (ms, "0" when missing: a dead entry), all by the server's clock.
-- A lock key of another type is an error reply naming it.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return redis.error_reply('WRONGTYPE the lock key ' .. KEYS[1] .. ' holds a value of another type')
end
local t = redis.call('TIME')
local out = {v or '', redis.call('PTTL', KEYS[1]), '', t[1], t[2], 0}
local c = redis.pcall('GET', KEYS[2])
if type(c) == 'string' then out[3] = c end
if redis.call('TYPE', KEYS[3])['ok'] == 'zset' then
  out[6] = redis.call('ZCARD', KEYS[3])
  local q = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
  local hash = redis.call('TYPE', KEYS[4])['ok'] == 'hash'
  for i = 1, #q, 2 do
    out[#out + 1] = q[i]
    out[#out + 1] = q[i + 1]
    out[#out + 1] = hash and redis.call('HGET', KEYS[4], q[i]) or '0'
  end
end
return out
