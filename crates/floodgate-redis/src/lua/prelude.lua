-- Floodgate: apply the limits of one request, atomically, in one call.
--
-- This file opens the one script the Redis store runs (prelude.lua, the algorithm files, then
-- apply.lua, concatenated in that order by `script.rs`). The contract of the whole script:
--
-- KEYS[i]   (i = 1..n) the state key of op i (one key per limit); then the penalty box key of each
--           op whose `block` is above 0, in the order of those ops; then, in modes 'R' and 'U', the
--           change's note (see `once` below). All in one hash slot on a cluster.
-- ARGV[1]   mode: 'c' check (all-or-nothing), 'p' peek, 'd' peek of a request known to be denied
--           elsewhere (cross-slot), 'e' check of a request taken as denied (cross-slot: another slot
--           decides it, or this slot is asked again to consume), 'r' report (consume, never deny),
--           'u' undo (give grants back); 'R' and 'U': 'r' and 'u' made at most once.
-- ARGV[2]   now in µs since the Unix epoch, or '' to read Redis's own clock (TIME): the test clock.
-- ARGV[3]   slack in ms added to every expiry set (0 in production; tests on a manual clock raise it
--           because Redis expires keys on its own clock).
-- then, per op, `stride` arguments (7, or 9 in modes 'u' and 'U'); n, the number of ops, is how many
-- whole strides follow ARGV[3] (at most one argument comes after them):
--   algo    'b' token bucket / GCRA, 'f' fixed window, 'q' quota, 's' sliding window,
--           'l' sliding log, 'c' concurrency, 'n' budget
--   cost    ≥ 1 (already checked against the capacity for 'c', 'p', 'd' and 'e')
--   enforce '1' when the op's denial denies the request, '0' for shadow ops
--   p1 p2 p3  the limit's parameters:
--           b: interval µs, burst        f: limit, window µs       s: limit, window µs
--           l: limit, window µs          c: limit, lease µs        q: limit, period start, period end
--           n: limit, ttl µs
--   block   the op's penalty box, in µs (0: none; else its key is among KEYS, see above). An op
--           whose key is in its box (the box key holds its end, a time past now) is refused without
--           asking its algorithm: {0, 0, left, left, 0}, `left` µs to the box's end; in 'r', 'R',
--           'u' and 'U' it changes nothing and answers {1, 0, left, 0, -1} (-1: nothing taken).
--           When the request is denied — in 'c' and 'p' when an enforced op denies, always in 'd'
--           and 'e' — each enforced op with a box that its own count denies goes into the box in
--           'c' and 'e': its state key is deleted (its count forgotten) and its box key set to
--           now + block, expiring then; 'p' and 'd' write nothing. Either way the op answers
--           {0, 0, block, block, 0}. A box that has ended reads as none, and the key as fresh: its
--           count was deleted when the box began.
--   (modes 'u' and 'U' only) at, extra: the grant's time, and for 'c' the lease id; for 'q' the
--           end and the start of the period the grant was taken in (the script has no calendar)
-- then, optionally, one last argument (ARGV[4 + stride × n]):
--   not_after  µs since the Unix epoch: the latest `now` at which the caller may still be waiting for
--           the answer (its deadline plus a margin, on its estimate of Redis's clock). Past it, the
--           caller has given up and applied its failure policy: the call changes nothing. The store
--           sends it with checks ('c', 'e') and reports (the calls that write for a request); peeks
--           write nothing and undos give back what was really taken, so they go without, and so do
--           calls on the test clock. Absent: no guard.
-- once (modes 'R' and 'U'): the last KEY is the change's note (in the ops' slot, not an op), and the
--           last argument, in place of not_after, how long the note is kept, in ms. When the note
--           exists the change was made: nothing is written and the answer is {-3, now}. Otherwise
--           the note is written with the change, in this one atomic call.
--
-- Returns {now, then per op: allowed (1/0), remaining, reset_after µs, retry_after µs (0 when
-- allowed), lease id (0 unless a concurrency permit was granted; -1 when the op took nothing in a mode
-- that always takes, see `block`; in the peek modes 'p' and 'd', for a 'q' op, what its key counted in
-- the calendar period before the current one, see window.lua, and 0 for a key in its penalty box)} — or {-1, now} when a quota op's period bounds do not contain now
-- (the caller recomputes them for that now and calls again; nothing was written) — or {-2, now} when
-- now is past not_after (stale: nothing was written, the caller answers as at its deadline) — or
-- {-3, now} when a change made at most once was made before.
--
-- Numbers are Lua doubles: every time, count and product stays below 2^53 (the store clamps costs and
-- refuses limits whose arithmetic would not; see the crate docs).

-- Globals read through Redis's protected global table are slower than locals: look them up once.
local tonumber, call, format, floor = tonumber, redis.call, string.format, math.floor

local mode = ARGV[1]
local once = mode == 'R' or mode == 'U'
local stride = 7
if mode == 'u' or mode == 'U' then stride = 9 end
local n = floor((#ARGV - 3) / stride)
local now = tonumber(ARGV[2])
if not now then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end
if once then
  -- Made before: by a call whose answer was lost, or by another instance finishing it.
  if call('EXISTS', KEYS[#KEYS]) == 1 then return {-3, now} end
else
  -- A call that runs after its caller gave up (a paused or overloaded Redis runs the backlog late)
  -- changes nothing: a denied request must not be charged, nor a passed one late, in another
  -- window. (A change made at most once needs no guard: made late, it is not made again.)
  local not_after = ARGV[4 + stride * n]
  if not_after and now > tonumber(not_after) then return {-2, now} end
end
local slack = tonumber(ARGV[3])
local MAX = 9007199254740992
-- Per-op state between phases: op i owns S[4i-3] .. S[4i].
local S = {}
-- Penalty boxes, nil when no op has one: op i's box key and block µs in BOX[2i - 1], BOX[2i].
local BOX
local boxes = 0

local use_b, use_f, use_s, use_l, use_c, use_n
for i = 1, n do
  local base = 3 + stride * (i - 1)
  local block = ARGV[base + 7]
  if block ~= '0' then
    boxes = boxes + 1
    BOX = BOX or {}
    BOX[2 * i - 1], BOX[2 * i] = KEYS[n + boxes], tonumber(block)
  end
  local a = ARGV[base + 1]
  if a == 'b' then use_b = true
  elseif a == 'f' then use_f = true
  elseif a == 'q' then
    use_f = true
    if now < tonumber(ARGV[base + 5]) or now >= tonumber(ARGV[base + 6]) then return {-1, now} end
  elseif a == 's' then use_s = true
  elseif a == 'l' then use_l = true
  elseif a == 'c' then use_c = true
  elseif a == 'n' then use_n = true
  end
end

-- floor(a / b) exactly, for integers 0 <= a < 2^53 and b >= 1: the quotient of two doubles may round
-- up to the next integer, never down past one.
local function fdiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 end
  return q
end

-- Milliseconds from now until `exp` µs, rounded up, at least 1, plus the slack.
local function ttl(exp)
  local d = exp - now
  if d < 1000 then return 1 + slack end
  return math.ceil(d / 1000) + 1 + slack
end

local bucket, window, sliding, log, lease, budget
