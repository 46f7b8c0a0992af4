-- quickrelease: the release of a lease with nobody queued, the common
-- case, in a script of three keys and two arguments (the full release,
-- release.lua, takes six keys and seven arguments, and a script's
-- arguments are a good part of its cost: TestReleaseQuickMatchesFull,
-- BenchmarkDoVsRaw). It acts only where release.lua, given the same
-- identity, no hold, tombstone "1" and any queue member, would do
-- exactly this: the key holds ARGV[1] and the queue is empty. Then it
-- writes the tombstone (as release.lua, the release's first write) and
-- deletes the key, and answers 1. Anywhere else (someone queued, the key
-- not ARGV[1]'s, a replay of a quick release that ran, a command the
-- server refused: an ACL without EXISTS or SET, or maxmemory for the
-- tombstone) it changes nothing
-- and answers -9: the caller then sends release.lua, which decides, and
-- finds the tombstone this script left when it was a replay.
-- KEYS[1] lock, KEYS[2] ARGV[1]'s tombstone, KEYS[3] queue (same hash tag)
-- ARGV[1] identity, ARGV[2] tombstone ttl ms
local v = redis.call('GET', KEYS[1])
local sep = v and string.find(v, ':', 1, true)
if not sep or string.sub(v, 1, sep - 1) ~= ARGV[1] then return -9 end
-- EXISTS, not release.lua's ZRANGE: an empty range of a missing key costs
-- the server a few microseconds more (TestZZ... see BenchmarkDoVsRaw).
-- With pcall: a user whose ACL lacks EXISTS gets release.lua's answer.
local q = redis.pcall('EXISTS', KEYS[3])
if q ~= 0 then return -9 end
local r = redis.pcall('SET', KEYS[2], '1', 'PX', ARGV[2])
if type(r) == 'table' and r.err then return -9 end
redis.call('DEL', KEYS[1])
return 1
