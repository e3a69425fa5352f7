-- The token bucket most blog posts and gists use, written here as the peer to measure against:
-- tokens and the last refill time in a hash, refilled with floating-point arithmetic.
--
-- KEYS[1]  the bucket's hash
-- ARGV[1]  capacity, ARGV[2] refill rate in tokens per second, ARGV[3] cost
-- Returns {allowed (1/0), tokens left (floored)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local capacity, rate, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * rate)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return {allowed, math.floor(tokens)}
