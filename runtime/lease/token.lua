-- Shared by acquire.lua and release.lua (scripts.go puts it before each).
-- takeTok mints the next fencing token of a grant or a handover into the
-- counter ck (expiry px ms) and returns it as a decimal string. The token
-- is max(counter + 1, us), us the server's time in microseconds: the time
-- floor keeps tokens increasing when the counter expires or is lost.
-- takeTok writes the time token first, reading the counter's old value
-- in the same command (SET ... GET, Redis 6.2): that is the token unless
-- the counter was at or past it (a clock behind an earlier token, after a
-- failover, or a counter set from outside), and only then is the
-- counter's next written over it. One command where a read and a write
-- were two. Before Redis 6.2 (SET ... GET is a syntax error there) it
-- reads, then writes. Returns nil and the error reply when the counter is
-- not a string (nothing written then). A counter past 2^53 (one set from
-- outside), where doubles skip integers (c + 1 == c), is incremented by
-- its digits. (One function: a script makes its local functions anew on
-- every call.)
local function takeTok(ck, us, px)
  local tok = string.format('%d', us)
  local cs = redis.pcall('SET', ck, tok, 'PX', px, 'GET')
  if type(cs) == 'table' and cs.err and string.find(cs.err, 'syntax', 1, true) then
    cs = redis.pcall('GET', ck)
    if type(cs) ~= 'table' then redis.call('SET', ck, tok, 'PX', px) end
  end
  if type(cs) == 'table' then return nil, cs end
  local c = tonumber(cs or '0') or 0
  if c < us then return tok end
  local want
  if c < 9007199254740991 or not string.find(cs, '^[1-9]%d*$') then
    want = string.format('%d', c + 1)
  else
    local i = #cs
    while i > 0 and string.byte(cs, i) == 57 do i = i - 1 end
    if i == 0 then
      want = '1' .. string.rep('0', #cs)
    else
      want = string.sub(cs, 1, i - 1) .. string.char(string.byte(cs, i) + 1) .. string.rep('0', #cs - i)
    end
  end
  redis.call('SET', ck, want, 'PX', px)
  return want
end
