-- Floodgate: reservation records, one hash per reservation, settled at most once.
--
-- KEYS[1]  the record's key (one key: on a cluster, in its own slot).
-- ARGV[1]  'put', 'get' or 'settle'.
-- ARGV[2]  now in µs since the Unix epoch, or '' to read Redis's own clock (TIME): the test clock.
--
-- put     ARGV[3] the body (the engine's bytes), ARGV[4] the ttl in µs, ARGV[5] how long the key is
--         kept, in ms (past the expiry, so that retried settlements find their answer). Writes
--         {b = body, e = expiry µs}. Returns {now, expiry}.
-- get     Returns {now} when there is no record, else {now, expiry, body, settlement, kept}, the
--         settlement '' while pending, kept how much longer the record is kept, in ms (its PTTL).
-- settle  ARGV[3] the settlement (the engine's bytes). Returns {now, 0} when there is no record;
--         {now, 1} when it was pending and is now settled; {now, 2, settlement} when it was already
--         settled (nothing written); {now, 3} when it expired unsettled (nothing written).
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local op = ARGV[1]
if op == 'put' then
  local e = now + tonumber(ARGV[4])
  redis.call('HSET', KEYS[1], 'b', ARGV[3], 'e', string.format('%.0f', e))
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {now, e}
end
local r = redis.call('HMGET', KEYS[1], 'b', 'e', 's')
if not r[1] then
  if op == 'get' then return {now} end
  return {now, 0}
end
local e = tonumber(r[2])
if op == 'get' then return {now, e, r[1], r[3] or '', redis.call('PTTL', KEYS[1])} end
if r[3] then return {now, 2, r[3]} end
if now >= e then return {now, 3} end
redis.call('HSET', KEYS[1], 's', ARGV[3])
return {now, 1}
