-- The opening of the single-limit scripts (one_bucket.lua, one_window.lua), concatenated in front
-- of each by `script.rs`: read the time, and answer stale before anything is read or written.
--
-- ARGV[1..4]  the script's own (see the script).
-- ARGV[5]  (optional) not_after: µs since the Unix epoch; when now is past it the caller has given
--          up, and the call changes nothing (see prelude.lua). The store sends it with 'c' and 'r',
--          and 2^53 (never) on the test clock; absent: no guard.
-- ARGV[6]  (test clock only) now in µs since the Unix epoch, instead of Redis's TIME.
-- ARGV[7]  (test clock only) slack in ms added to the expiry set.
--
-- Defines `call`, `tonumber`, `now` (µs) and `slack` (ms) for the script; returns {-2, now µs} when
-- now is past not_after.

-- Globals read through Redis's protected global table are slower than locals (see prelude.lua).
local call, tonumber = redis.call, tonumber
local now, slack = ARGV[6], 0
if now then
  now, slack = tonumber(now), tonumber(ARGV[7])
else
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end
local not_after = ARGV[5]
if not_after and now > tonumber(not_after) then return {-2, now} end
