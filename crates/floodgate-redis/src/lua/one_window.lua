-- Fixed window for a request of exactly one limit: the shortcut of the driver (prelude.lua,
-- window.lua, apply.lua) without its loop, with the fewest arguments and Redis calls (TIME, GET, one
-- SET). The state is window.lua's, so the same key may be touched by this script and by the driver
-- in turn: struct '<dd' (the window's start µs, its count), expiring at the window's end (`SET … PX`
-- on the first write in a window, `SET … KEEPTTL` after). Windows are aligned to the Unix epoch.
-- A limit with a penalty box is not sent here: the driver reads and writes its box.
--
-- KEYS[1]  the limit's state key.
-- ARGV[1]  mode: 'c' check, 'p' peek, 'r' report. With one limit, a check consumes exactly when the
--          limit allows (enforced or shadow alike), as the driver does.
-- ARGV[2]  limit, < 2^52.
-- ARGV[3]  window µs, < 2^52.
-- ARGV[4]  cost ≥ 1 (at most the limit for 'c' and 'p'; clamped to 2^52 by the store).
-- ARGV[5..7]  the guard and the test clock: see one_prelude.lua, which runs first.
--
-- Returns {now µs, remaining, reset_after µs} when allowed ('r' always consumes and answers with the
-- state after), {now µs, remaining, reset_after µs, retry_after µs ≥ 1} when denied, {-2, now µs}
-- when stale (past not_after: nothing was written).

local key, limit, w, cost = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

-- The window's start: floor(now / w) × w, exactly (see fdiv in prelude.lua).
local start = math.floor(now / w)
if start * w > now then start = start - 1 end
start = start * w
local stop = start + w

local v = call('GET', key)
local used, same = 0, false
if v then
  local s, c = struct.unpack('<dd', v)
  if s == start then used, same = c, true end
end
local mode = ARGV[1]
if mode ~= 'r' then
  if used + cost > limit then
    local rem = 0
    if limit > used then rem = limit - used end
    return {now, rem, stop - now, stop - now}
  end
  if mode == 'p' then return {now, limit - used - cost, stop - now} end
end

local c = used + cost
if c > 9007199254740992 then c = 9007199254740992 end
if same then
  call('SET', key, struct.pack('<dd', start, c), 'KEEPTTL')
else
  local d = stop - now
  local px = 1 + slack
  if d >= 1000 then px = math.ceil(d / 1000) + 1 + slack end
  call('SET', key, struct.pack('<dd', start, c), 'PX', px)
end
local rem = 0
if limit > c then rem = limit - c end
return {now, rem, stop - now}
