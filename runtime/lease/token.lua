-- Shared by acquire.lua and release.lua (scripts.go puts it before each).
-- nextTok is the next fencing token, max(counter + 1, us), as a decimal
-- string: exact for a counter past 2^53 too (one set from outside), where
-- doubles skip integers (c + 1 == c), by incrementing its digits.
local function nextTok(cs, us)
  local c = tonumber(cs or '0') or 0
  if c < 9007199254740991 or not string.find(cs, '^[1-9]%d*$') then
    local n = c + 1
    if us > n then n = us end
    return string.format('%d', n)
  end
  local i = #cs
  while i > 0 and string.byte(cs, i) == 57 do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #cs) end
  return string.sub(cs, 1, i - 1) .. string.char(string.byte(cs, i) + 1) .. string.rep('0', #cs - i)
end
-- takeTok mints the next fencing token into the counter ck (expiry px
-- ms) and returns it. It writes the time token us first, reading the
-- counter's old value in the same command (SET ... GET, Redis 6.2): that
-- is the next token unless the counter was at or past it (a clock behind
-- an earlier token, after a failover, or a counter set from outside), and
-- only then is max(counter + 1, us) written over it. One command where a
-- read and a write were two. Before Redis 6.2 (SET ... GET is a syntax
-- error there) it reads, then writes. Returns nil and the error reply
-- when the counter is not a string (nothing written then).
local function takeTok(ck, us, px)
  local tok = string.format('%d', us)
  local c = redis.pcall('SET', ck, tok, 'PX', px, 'GET')
  if type(c) == 'table' and c.err and string.find(c.err, 'syntax', 1, true) then
    c = redis.pcall('GET', ck)
    if type(c) ~= 'table' then redis.call('SET', ck, tok, 'PX', px) end
  end
  if type(c) == 'table' then return nil, c end
  local want = nextTok(c, us)
  if want ~= tok then redis.call('SET', ck, want, 'PX', px) end
  return want
end
