-- renew many: extend each lease KEYS[i] only if identity ARGV[2i-1] still
-- holds it, to ARGV[2i] ms. Returns one 1 (extended) or 0 (not the owner)
-- per key. Safe to replay. Standalone servers only (keys span slots).
local out = {}
for i = 1, #KEYS do
  local ok = 0
  local v = redis.call('GET', KEYS[i])
  if v then
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
