-- Token bucket and GCRA for a request of exactly one limit: the shortcut of the driver (prelude.lua,
-- bucket.lua, apply.lua) without its loop, with the fewest arguments and Redis calls (TIME, GET, one
-- SET). The state is bucket.lua's, so the same key may be touched by this script and by the driver
-- in turn: the theoretical arrival time (TAT) in µs as a decimal string, expiring at its whole second
-- plus one second (`SET … PX` when the TAT enters a new second, `SET … KEEPTTL` otherwise).
-- A limit with a penalty box is not sent here: the driver reads and writes its box.
--
-- KEYS[1]  the limit's state key.
-- ARGV[1]  mode: 'c' check, 'p' peek, 'r' report. With one limit, a check consumes exactly when the
--          limit allows (enforced or shadow alike), as the driver does.
-- ARGV[2]  interval µs (the time one token takes to come back).
-- ARGV[3]  span µs: interval × burst, < 2^52.
-- ARGV[4]  cost ≥ 1 (at most the burst for 'c' and 'p'; clamped to 2^52 by the store).
-- ARGV[5..7]  the guard and the test clock: see one_prelude.lua, which runs first.
--
-- Returns {now µs, remaining, reset_after µs} when allowed ('r' always consumes and answers with the
-- state after), {now µs, remaining, reset_after µs, retry_after µs ≥ 1} when denied, {-2, now µs}
-- when stale (past not_after: nothing was written).

local key, interval, span, cost = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local floor = math.floor

-- floor(a / b) exactly, for integers 0 <= a < 2^53 and b >= 1 (see prelude.lua).
local function fdiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 end
  return q
end

local old = tonumber(call('GET', key) or 0)
local ahead = 0
if old > now then ahead = old - now end
local mode = ARGV[1]
if mode ~= 'r' then
  local new_ahead = ahead + interval * cost
  if new_ahead > 9007199254740992 then new_ahead = 9007199254740992 end
  if new_ahead > span then
    local rem = 0
    if span > ahead then rem = fdiv(span - ahead, interval) end
    return {now, rem, ahead, new_ahead - span}
  end
  if mode == 'p' then return {now, fdiv(span - new_ahead, interval), new_ahead} end
end

local tat = old
if tat < now then tat = now end
tat = tat + interval * cost
if tat > 9007199254740992 then tat = 9007199254740992 end
-- The key's expiry is at least (floor(old / G) + 2) × G when it exists: keep it while the TAT stays
-- in the same second.
local sec = fdiv(tat, 1000000)
if old > 0 and sec == fdiv(old, 1000000) then
  call('SET', key, string.format('%d', tat), 'KEEPTTL')
else
  call('SET', key, string.format('%d', tat), 'PX', math.ceil(((sec + 2) * 1000000 - now) / 1000) + 1 + slack)
end
ahead = tat - now
local rem = 0
if span > ahead then rem = fdiv(span - ahead, interval) end
return {now, rem, ahead}
