-- The driver: runs the ops of the request through their algorithms, all-or-nothing.
--
-- KEYS/ARGV and return value: see prelude.lua, which this file closes. In order:
-- 1. every op whose key is in its penalty box is refused (or, in the modes that never deny, skipped);
--    every other op reads its key and decides (nothing is written yet);
-- 2. 'c' check: when every enforced op allows, the ops that allow consume (their lease ids are
--    returned); otherwise the enforced ops with a box that denied by their count go into it, and the
--    ops that allowed report their status (the state as it stays). 'p' peek: nothing is written;
--    when the request would be denied, the ops a check would box say so, and the ops that allowed
--    report their status. 'd': a peek denied elsewhere, so as a denied 'p'. 'e': a check denied
--    elsewhere, so as a denied 'c'. 'r' report: every op consumes, and reports its status after.
--    'u' undo: every op gives its grant back, and reports its status after. 'R' and 'U': the same,
--    once (the note is written first; the prelude answered already when it existed).

local function algo(letter)
  if letter == 'b' then return bucket end
  if letter == 'f' or letter == 'q' then return window end
  if letter == 's' then return sliding end
  if letter == 'l' then return log end
  if letter == 'n' then return budget end
  return lease
end
-- Sized once for up to 4 ops (growing a table op by op rehashes it); unused slots are cleared below.
local out = {now, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
for k = 5 * n + 2, 21 do out[k] = nil end
local admitted = true
-- The ops whose key is in its penalty box, nil when none is: HELD[i] = µs until the box ends.
local HELD
for i = 1, n do
  local base = 3 + stride * (i - 1)
  local o = 5 * i - 3
  local left
  if BOX and BOX[2 * i] then
    local ends = tonumber(call('GET', BOX[2 * i - 1]))
    if ends and ends > now then left = ends - now end
  end
  if left then
    HELD = HELD or {}
    HELD[i] = left
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 0, 0, left, left, 0
  else
    local f = algo(ARGV[base + 1])
    local cost = tonumber(ARGV[base + 2])
    -- `prev`: a quota's previous period's count, in the peek modes (nil otherwise).
    local ok, rem, reset, retry, prev = f('d', i, KEYS[i], cost, tonumber(ARGV[base + 4]),
      tonumber(ARGV[base + 5]), tonumber(ARGV[base + 6]))
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, rem, reset, retry, prev or 0
  end
  if out[o] == 0 and ARGV[base + 3] == '1' then admitted = false end
end

if mode == 'c' or mode == 'p' or mode == 'd' or mode == 'e' then
  if mode == 'd' or mode == 'e' then admitted = false end
  if mode == 'p' and admitted then return out end
  if not admitted and BOX then
    -- Denied: each enforced op with a box that its own count denied goes into it, its count
    -- forgotten ('c', 'e'), or says it would ('p', 'd').
    for i = 1, n do
      local block, o = BOX[2 * i], 5 * i - 3
      if block and out[o] == 0 and not (HELD and HELD[i]) and ARGV[3 + stride * (i - 1) + 3] == '1' then
        if mode == 'c' or mode == 'e' then
          call('DEL', KEYS[i])
          call('SET', BOX[2 * i - 1], format('%d', now + block), 'PX', ttl(now + block))
        end
        out[o + 1], out[o + 2], out[o + 3] = 0, block, block
      end
    end
  end
  for i = 1, n do
    local o = 5 * i - 3
    if out[o] == 1 then
      local base = 3 + stride * (i - 1)
      local f = algo(ARGV[base + 1])
      local cost, p1, p2, p3 = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]),
        tonumber(ARGV[base + 6])
      if admitted then
        out[o + 4] = f('w', i, KEYS[i], cost, p1, p2, p3)
      else
        out[o + 1], out[o + 2] = f('s', i, KEYS[i], cost, p1, p2, p3)
      end
    end
  end
  return out
end

if once then call('SET', KEYS[#KEYS], '1', 'PX', ARGV[4 + stride * n]) end
for i = 1, n do
  local base = 3 + stride * (i - 1)
  local o = 5 * i - 3
  local left = HELD and HELD[i]
  if left then
    -- In its penalty box: nothing counts, and its count is gone, so nothing is given back.
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, 0, left, 0, -1
  else
    local f = algo(ARGV[base + 1])
    local cost, p1, p2, p3 = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]),
      tonumber(ARGV[base + 6])
    if mode == 'r' or mode == 'R' then
      out[o + 4] = f('w', i, KEYS[i], cost, p1, p2, p3)
    else
      f('u', i, KEYS[i], cost, p1, p2, p3, tonumber(ARGV[base + 8]), tonumber(ARGV[base + 9]))
    end
    out[o], out[o + 3] = 1, 0
    out[o + 1], out[o + 2] = f('s', i, KEYS[i], cost, p1, p2, p3)
  end
end
return out
