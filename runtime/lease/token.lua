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
-- not a string, or at 2^63 - 1 or past it (the counter is left as it
-- was). A counter past 2^53 (one set from outside), where doubles skip
-- integers (c + 1 == c), is incremented by its digits. (One function: a
-- script makes its local functions anew on every call.)
local function takeTok(ck, us, px)
  local tok = string.format('%d', us)
  local cs = redis.pcall('SET', ck, tok, 'PX', px, 'GET')
  if type(cs) == 'table' and cs.err and string.find(cs.err, 'syntax', 1, true) then
    cs = redis.pcall('GET', ck)
    if type(cs) ~= 'table' then redis.call('SET', ck, tok, 'PX', px) end
  end
  if type(cs) == 'table' then return nil, cs end
  -- Only decimal digits are a counter: one written from outside as
  -- anything else ("1e300", "nan", "-5") is read as none, which leaves
  -- the time floor (Lua reads "1e300" as a number that %d cannot format:
  -- TestAdversary40_CounterNotANumberToken).
  local digits = cs and string.match(cs, '^0*(%d+)$')
  if not digits then return tok end
  local c = tonumber(digits)
  if c < us then return tok end
  local want
  if c < 9007199254740991 then
    want = string.format('%d', c + 1)
  else
    local i = #digits
    while i > 0 and string.byte(digits, i) == 57 do i = i - 1 end
    if i == 0 then
      want = '1' .. string.rep('0', #digits)
    else
      want = string.sub(digits, 1, i - 1) .. string.char(string.byte(digits, i) + 1) .. string.rep('0', #digits - i)
    end
    -- Tokens are read as 64-bit signed integers: past 2^63 - 1 (a
    -- counter set from outside) there is no greater one to give.
    if #want > 19 or #want == 19 and want > '9223372036854775807' then
      redis.call('SET', ck, cs, 'PX', px) -- back over the time token
      return nil, {err = 'ERR lease: the fencing counter ' .. ck .. ' is at 2^63 - 1 or past it (' .. cs .. '): no greater token'}
    end
  end
  redis.call('SET', ck, want, 'PX', px)
  return want
end
