-- The fixed window most blog posts and gists use, written here as the peer to measure against:
-- INCR, and EXPIRE on every call.
--
-- KEYS[1]  the window's counter
-- ARGV[1]  limit, ARGV[2] window in seconds, ARGV[3] cost
-- Returns {allowed (1/0), the count}.
local count = redis.call('INCRBY', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if count > tonumber(ARGV[1]) then
  return {0, count}
end
return {1, count}
