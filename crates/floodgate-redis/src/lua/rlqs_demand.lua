-- Floodgate: RLQS demand and claims of one bucket group across the fleet (docs/rlqs.md, "Across a
-- fleet").
--
-- KEYS[1]  the group's hash (one key: on a cluster, in its own slot). Each field is one stream's
--          bucket, named '<instance>/<stream>/<bucket id>'; each value
--          'demand assigned desired expiry' (requests per second ×3, ms on Redis's clock):
--          `assigned` is the rate its instance has claimed for it, `desired` its share by the
--          instance's last view of the fleet.
-- ARGV[1]  how long this instance's entries live, in ms.
-- ARGV[2]  this instance's name.
-- ARGV[3]  the group's limit, requests per second.
-- ARGV[4..] triples: field, demand, desired, one per member of this instance.
--
-- The claim: the other instances' live claims hold `held`; this instance may claim what is left of
-- the limit, `limit - held` (never below 0). When its members desire more, each is granted the
-- same fraction of its desire, so that the claims never sum past the limit — every instance
-- claims in this one script, which Redis runs alone. Writes this instance's members with their
-- granted rate and expiry TIME + ARGV[1], deletes its fields not written now (streams that ended)
-- and every expired field, keeps the key twice as long as an entry lives, and returns the
-- fraction granted, then the other instances' live members, flattened:
-- {fraction, demand, assigned, desired, demand, assigned, desired, ...} as strings.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local mine = ARGV[2] .. '/'
local limit = tonumber(ARGV[3])
local written = {}
local want = 0
for i = 4, #ARGV, 3 do
  written[ARGV[i]] = true
  want = want + tonumber(ARGV[i + 2])
end
local all = redis.call('HGETALL', KEYS[1])
local others = {}
local held = 0
for i = 1, #all, 2 do
  local field, value = all[i], all[i + 1]
  local demand, assigned, desired, expiry = string.match(value, '^(%S+) (%S+) (%S+) (%S+)$')
  if not expiry then
    -- An entry of the earlier three-part form: its claim is what it was assigned.
    demand, assigned, expiry = string.match(value, '^(%S+) (%S+) (%S+)$')
    desired = assigned
  end
  if not expiry or not tonumber(expiry) or tonumber(expiry) <= now then
    redis.call('HDEL', KEYS[1], field)
  elseif string.sub(field, 1, #mine) == mine then
    if not written[field] then redis.call('HDEL', KEYS[1], field) end
  else
    held = held + (tonumber(assigned) or 0)
    others[#others + 1] = demand
    others[#others + 1] = assigned
    others[#others + 1] = desired
  end
end
local room = limit - held
if room < 0 then room = 0 end
local fraction = 1
if want > room then fraction = room / want end
local expiry = string.format('%.0f', now + ttl)
for i = 4, #ARGV, 3 do
  local granted = tonumber(ARGV[i + 2]) * fraction
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. ' ' .. string.format('%.17g', granted) .. ' ' .. ARGV[i + 2] .. ' ' .. expiry)
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
table.insert(others, 1, string.format('%.17g', fraction))
return others
