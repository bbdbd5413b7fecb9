-- The bucket script as it was before token costs (issue #13), one token per
-- bucket: the baseline of BenchmarkTakeVsScriptBeforeTokens. Keep it as is.
-- Globals are table lookups; locals are registers.
local argv, keys, call, tonumber, floor = ARGV, KEYS, redis.call, tonumber, math.floor
local secs, sec, nsec
if argv[2] == '' then
  local t = call('TIME')
  secs, nsec = t[1], tonumber(t[2]) * 1000
else
  secs, nsec = argv[2], tonumber(argv[3])
end
sec = tonumber(secs)
local op, n = argv[1], #keys
-- vals[i] becomes bucket i's base seconds (a string) when it is known, or
-- false when it is absent, which is the same as full.
local vals = call('MGET', unpack(keys))
local out, rescaled = {1}, nil
for i = 1, n do
  local d = 0
  local v = vals[i]
  if v then
    local ts, tn, shape = string.match(v, '^(%d+) (%d+) (.*)$')
    vals[i] = ts or false
    if ts then
      d = (tonumber(ts) - sec) * 1e9 + (tonumber(tn) - nsec)
      -- Lua interns strings, so this compares two pointers.
      if shape ~= argv[3 + 3 * i] then
        -- The limit changed: keep the fraction of the capacity in use.
        local ow = tonumber(string.match(shape, ' (%d+)$'))
        if d > 0 and ow then d = floor(math.min(d / ow, 1) * tonumber(argv[2 + 3 * i])) end
        rescaled = rescaled or {}
        rescaled[i] = true
      end
    end
  end
  if d < 0 then d = 0 end
  out[i + 1] = d
  if d + tonumber(argv[1 + 3 * i]) - tonumber(argv[2 + 3 * i]) > 0 then out[1] = 0 end
end

-- put stores bucket i as owing d nanoseconds from now, or deletes it when
-- it is full, which is the same as absent. The TAT is base seconds plus
-- offset nanoseconds. A known bucket keeps its base while the offset stays
-- below 1e14 and a new one takes now's seconds, so that usually only the
-- offset is formatted; whole numbers below 1e14 print exactly.
local function put(i, d)
  if d <= 0 then
    call('DEL', keys[i])
    return
  end
  local bs, o = vals[i], nil
  if bs then o = d + nsec + (sec - tonumber(bs)) * 1e9 end
  if not o or o < 0 or o >= 1e14 then
    bs, o = secs, nsec + d
    if o >= 1e14 then
      local q = floor(o / 1e9)
      o = o - q * 1e9
      if o < 0 then q = q - 1; o = o + 1e9 elseif o >= 1e9 then q = q + 1; o = o - 1e9 end
      bs = sec + q
    end
  end
  call('PSETEX', keys[i], math.ceil(d / 1e6), bs .. ' ' .. o .. ' ' .. argv[3 + 3 * i])
end

if op == 't' then
  if out[1] == 1 then
    for i = 1, n do put(i, out[i + 1] + tonumber(argv[1 + 3 * i])) end
    return out
  end
elseif op == 'r' then
  for i = 1, n do
    if vals[i] then put(i, out[i + 1] - tonumber(argv[1 + 3 * i])) end
  end
  return out
end
if rescaled then
  for i = 1, n do
    if rescaled[i] then put(i, out[i + 1]) end
  end
end
return out
