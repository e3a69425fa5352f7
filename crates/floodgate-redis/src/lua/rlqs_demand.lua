-- Floodgate: RLQS demand of one bucket group across the fleet (docs/rlqs.md, "Across a fleet").
--
-- KEYS[1]  the group's hash (one key: on a cluster, in its own slot). Each field is one stream's
--          bucket, named '<instance>/<stream>/<bucket id>'; each value 'demand assigned expiry'
--          (requests per second, requests per second, ms on Redis's clock).
-- ARGV[1]  how long this instance's entries live, in ms.
-- ARGV[2]  this instance's name.
-- ARGV[3..] triples: field, demand, assigned, one per member of this instance.
--
-- Writes this instance's members with expiry TIME + ARGV[1], deletes its fields not written now
-- (streams that ended) and every expired field, keeps the key twice as long as an entry lives, and
-- returns the other instances' live members, flattened: {demand, assigned, demand, assigned, ...}
-- as strings.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local mine = ARGV[2] .. '/'
local written = {}
for i = 3, #ARGV, 3 do
  written[ARGV[i]] = true
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. ' ' .. ARGV[i + 2] .. ' ' .. string.format('%.0f', now + ttl))
end
local all = redis.call('HGETALL', KEYS[1])
local others = {}
for i = 1, #all, 2 do
  local field, value = all[i], all[i + 1]
  local demand, assigned, expiry = string.match(value, '^(%S+) (%S+) (%S+)$')
  if not expiry or tonumber(expiry) <= now then
    redis.call('HDEL', KEYS[1], field)
  elseif string.sub(field, 1, #mine) == mine then
    if not written[field] then redis.call('HDEL', KEYS[1], field) end
  else
    others[#others + 1] = demand
    others[#others + 1] = assigned
  end
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return others
