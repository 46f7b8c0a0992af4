-- renew: extend the lease only if ARGV[1] still holds it.
-- KEYS[1] lock key; ARGV[1] identity, ARGV[2] ttl ms
-- Returns 1 when extended, 0 when not the owner (expired, taken, or
-- released with a hold: "~" marks it), -2 when the key holds a value of
-- another type (overwritten from outside). Any other error of GET (an ACL
-- without +get) is the answer: a refusal, not a key overwritten. Safe to
-- replay.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  if string.find(v.err, 'WRONGTYPE', 1, true) then return -2 end
  -- pcall's error names no command (an ACL's "can't run this command"):
  -- this one is named.
  return {err = v.err .. ' (the renewal script calls GET)'}
end
if v then
  local sep = string.find(v, ':', 1, true)
  if sep and string.sub(v, 1, sep - 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
end
return 0
