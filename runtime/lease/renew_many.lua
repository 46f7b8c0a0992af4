-- renew many: extend each lease KEYS[i] only if identity ARGV[2i-1] still
-- holds it, to ARGV[2i] ms. Returns per key 1 (extended), 0 (not the owner)
-- or -2 (a value of another type: overwritten from outside), so that one
-- foreign key cannot fail the others. Any other error of GET (an ACL
-- without +get, which refuses it for every key alike) is the answer for
-- all: a refusal, not keys overwritten. Safe to replay. Standalone servers
-- only (keys span slots).
local out = {}
for i = 1, #KEYS do
  local ok = 0
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' and v.err then
    -- pcall's error names no command (an ACL's "can't run this
    -- command"): this one is named.
    if not string.find(v.err, 'WRONGTYPE', 1, true) then return {err = v.err .. ' (the renewal script calls GET)'} end
    ok = -2
  elseif v then
    local id = ARGV[2 * i - 1]
    local sep = string.find(v, ':', 1, true)
    if sep and string.sub(v, 1, sep - 1) == id then
      redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
      ok = 1
    end
  end
  out[i] = ok
end
return out
