/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package redisstore

import (
	"strconv"
	"strings"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// MaxDebt is the longest time, in nanoseconds, a bucket in Redis can owe
// before it is full again, about 52 days: a token charge or settlement that
// would leave more is cut there. Below it the script's arithmetic is exact
// (sums of two debts stay under 2^53), so the store answers as the memory
// store does for every realistic limit and cost.
const MaxDebt = int64(MaxWindow)

// bucketScript is the script sent to Redis: bucketScriptSource with its
// constants filled in.
var bucketScript = strings.NewReplacer(
	"MAX_DEBT", strconv.FormatInt(MaxDebt, 10),
	"CEILING_WINDOWS", strconv.Itoa(limiter.MaxAdjustDebt+1),
).Replace(bucketScriptSource)

// bucketScript checks, charges, refunds or adjusts every bucket of one batch
// in one atomic step: Redis runs a script without interleaving other
// commands, so no replica can see a half-charged batch.
//
// Lua numbers are doubles, exact only up to 2^53, while nanoseconds since the
// Unix epoch need 61 bits. A bucket's theoretical arrival time (TAT) is
// therefore kept as whole seconds and nanoseconds, and only differences
// (debts, at most MaxDebt = 2^52, and sums of two of them) are formed as
// single numbers: the arithmetic is the memory store's, nanosecond for
// nanosecond.
//
// KEYS[i] is bucket i. ARGV[1] is the operation: "t" take (charge every
// bucket its cost if all hold it), "p" peek, "r" refund (give one token back
// to every bucket that exists), "a" adjust (add each bucket's signed amount to
// its debt, see below). ARGV[2] and ARGV[3] are the time in seconds and
// nanoseconds, or "" and "" to use Redis's own clock (TIME, which Redis 7
// allows in scripts since it replicates effects, not scripts). ARGV[1+3i] and
// ARGV[2+3i] are bucket i's interval and window in nanoseconds and ARGV[3+3i]
// is its shape, the two joined by a space. A bucket is stored as the string
// "<s> <ns> <shape>", its TAT being s seconds plus ns nanoseconds (ns may
// exceed a second: a bucket keeps its s while ns stays below 1e14, so a
// charge formats one number, not two), and expires when it is full again, so
// idle buckets vanish.
//
// Amounts: when the batch is not a take or peek of one token per bucket,
// ARGV[3+3n+i] is bucket i's amount in nanoseconds (n buckets). For a take or
// peek it is the charge of the request's cost (limiter.Request.Charge): the
// bucket must hold min(charge, window), so a cost above the capacity waits for
// a full bucket and is then charged in full. For an adjust it is signed: a
// positive amount is charged unconditionally, creating an absent bucket, but
// never beyond limiter.MaxAdjustDebt capacities below empty (MaxAdjustDebt+1
// windows until full) nor lowering a debt already beyond that; a negative one
// is given back to a bucket that exists, never above full; 0 leaves the
// bucket alone. This is limiter.Request.AdjustedDebt. A one-token take or peek
// sends no amounts and the interval is the charge, so the common call carries
// no extra bytes. No bucket owes more than MaxDebt; a larger charge is cut
// there.
//
// Cost: a call runs 2+n Redis commands for a take of n buckets (TIME, one
// MGET, one PSETEX per bucket; a denied take or a peek writes nothing unless
// a limit changed), and the shape is passed ready-made so that reading a
// bucket formats nothing.
//
// The reply is {allowed, debt_1, ..., debt_n}: allowed is 1 when every bucket
// held its cost, and debt_i is bucket i's time until full before this call,
// in nanoseconds, from which the caller derives Retry-After and the quota
// exactly as the memory store does.
//
// The source names MaxDebt and limiter.MaxAdjustDebt+1 as MAX_DEBT and
// CEILING_WINDOWS, filled in by bucketScript.
//
//nolint:dupword // Lua closes nested blocks with "end end".
const bucketScriptSource = `
-- Globals are table lookups; locals are registers. The one-token path
-- does arithmetic on numeric strings directly: Lua converts them as tonumber
-- does, without the cost of a function call.
local argv, keys, call, tonumber, floor, min = ARGV, KEYS, redis.call, tonumber, math.floor, math.min
local fmt, ceil, match = string.format, math.ceil, string.match
local maxdebt = MAX_DEBT
local secs, sec, nsec
if argv[2] == '' then
  local t = call('TIME')
  secs, nsec = t[1], t[2] * 1000
else
  secs, nsec = argv[2], tonumber(argv[3])
end
sec = tonumber(secs)
local op, n = argv[1], #keys
-- costed: the call sends amounts (ARGV[3+3n+i]); a one-token call keeps
-- its own branches, free of the extra arithmetic.
local costed = #argv > 3 + 3 * n
-- vals[i] becomes bucket i's base seconds (a string) when it is known, or
-- false when it is absent, which is the same as full.
local vals = call('MGET', unpack(keys))
-- out is sized for MaxBatch buckets at once; a reply ends at its first nil.
local out, rescaled = {1, nil, nil, nil, nil}, nil
for i = 1, n do
  local d = 0
  local v = vals[i]
  if v then
    local ts, tn, shape = match(v, '^(%d+) (%d+) (.*)$')
    vals[i] = ts or false
    if ts then
      d = (ts - sec) * 1e9 + (tn - nsec)
      -- Lua interns strings, so this compares two pointers.
      if shape ~= argv[3 + 3 * i] then
        -- The limit changed: keep the fraction of the capacity in use
        -- (above one for a token bucket in debt).
        local ow = tonumber(match(shape, ' (%d+)$'))
        if d > 0 and ow then d = floor(min(d / ow * tonumber(argv[2 + 3 * i]), maxdebt)) end
        rescaled = rescaled or {}
        rescaled[i] = true
      end
    end
  end
  if d < 0 then d = 0 end
  out[i + 1] = d
  if costed then
    -- The bucket must hold the charge, or be full when it exceeds the window.
    local w = tonumber(argv[2 + 3 * i])
    if d + min(tonumber(argv[3 + 3 * n + i]), w) - w > 0 then out[1] = 0 end
  elseif d + argv[1 + 3 * i] - argv[2 + 3 * i] > 0 then
    out[1] = 0
  end
end

-- debts[i] becomes the debt bucket i is to be stored with, or stays nil to
-- leave it alone. One write loop below stores them: a local function would
-- allocate a closure and its upvalues on every call.
local debts = {nil, nil, nil, nil}
if op == 't' and out[1] == 1 then
  if costed then
    for i = 1, n do debts[i] = out[i + 1] + tonumber(argv[3 + 3 * n + i]) end
  else
    for i = 1, n do debts[i] = out[i + 1] + argv[1 + 3 * i] end
  end
elseif op == 'r' then
  for i = 1, n do
    if vals[i] then debts[i] = out[i + 1] - tonumber(argv[1 + 3 * i]) end
  end
elseif op == 'a' then
  for i = 1, n do
    local a, d = tonumber(argv[3 + 3 * n + i]), out[i + 1]
    if a > 0 then
      local ceiling = math.max(d, CEILING_WINDOWS * tonumber(argv[2 + 3 * i]))
      debts[i] = min(d + min(a, ceiling), ceiling)
    elseif a < 0 and vals[i] then
      debts[i] = d + a
    end -- as in the memory store, an amount of 0 changes nothing
  end
elseif rescaled then
  for i = 1, n do
    if rescaled[i] then debts[i] = out[i + 1] end
  end
end

-- Bucket i is stored as owing d nanoseconds from now (at most maxdebt), or
-- deleted when it is full, which is the same as absent. The TAT is base
-- seconds plus offset nanoseconds. A known bucket keeps its base while the
-- offset stays below 1e14 and a new one takes now's seconds, so that usually
-- only the offset is formatted. Every number here is whole and, but for the
-- base, below 1e14, so '%d' prints it exactly (and faster than tostring's
-- '%.14g' or Redis's own '%.17g' for a number argument).
for i = 1, n do
  local d = debts[i]
  if d and d <= 0 then
    call('DEL', keys[i])
  elseif d then
    if d > maxdebt then d = maxdebt end
    local bs, o = vals[i], nil
    if bs then o = d + nsec + (sec - bs) * 1e9 end
    if not o or o < 0 or o >= 1e14 then
      bs, o = secs, nsec + d
      if o >= 1e14 then
        local q = floor(o / 1e9)
        o = o - q * 1e9
        if o < 0 then q = q - 1; o = o + 1e9 elseif o >= 1e9 then q = q + 1; o = o - 1e9 end
        bs = sec + q
      end
    end
    call('PSETEX', keys[i], fmt('%d', ceil(d / 1e6)), fmt('%s %d %s', bs, o, argv[3 + 3 * i]))
  end
end
return out
`
