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
