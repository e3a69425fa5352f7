-- Token bucket and GCRA (floodgate-core `algorithm/bucket.rs`): one number per key, the theoretical
-- arrival time (TAT) in µs, stored as a decimal string.
--
-- KEYS/ARGV: none of its own; defines `bucket(phase, i, key, cost, interval, burst, at)` for
-- apply.lua (see prelude.lua for the script's contract). Phases: 'd' read the key and decide,
-- 's' status, 'w' consume, 'u' refund. Returns per phase: 'd' allowed, remaining, reset, retry;
-- 's' remaining, reset; 'w' and 'u' the lease id (0).
--
-- Expiry: the key lives until its TAT, rounded up to a whole second plus one second; a write whose
-- new TAT stays within that keeps the key's TTL (SET KEEPTTL), so a busy key sets its expiry about
-- once a second rather than on every call.

if use_b then
  local G = 1000000
  bucket = function(phase, i, key, cost, interval, burst)
    local span = interval * burst
    if phase == 'd' then
      local v = call('GET', key)
      local tat = 0
      if v then tat = tonumber(v) end
      S[4 * i] = tat
      local ahead = 0
      if tat > now then ahead = tat - now end
      local new_ahead = ahead + interval * cost
      if new_ahead > MAX then new_ahead = MAX end
      if new_ahead <= span then
        return 1, fdiv(span - new_ahead, interval), new_ahead, 0
      end
      local rem = 0
      if span > ahead then rem = fdiv(span - ahead, interval) end
      return 0, rem, ahead, new_ahead - span
    elseif phase == 's' then
      local tat = S[4 * i]
      local ahead = 0
      if tat > now then ahead = tat - now end
      local rem = 0
      if span > ahead then rem = fdiv(span - ahead, interval) end
      return rem, ahead
    elseif phase == 'w' then
      local old = S[4 * i]
      local tat = old
      if tat < now then tat = now end
      tat = tat + interval * cost
      if tat > MAX then tat = MAX end
      S[4 * i] = tat
      -- The key's expiry is at least (floor(old / G) + 2) × G when it exists (see above).
      local horizon = (fdiv(tat, G) + 2) * G
      if old > 0 and horizon <= (fdiv(old, G) + 2) * G then
        call('SET', key, format('%d', tat), 'KEEPTTL')
      else
        call('SET', key, format('%d', tat), 'PX', ttl(horizon))
      end
      return 0
    else
      local tat = S[4 * i]
      if tat == 0 then return 0 end
      local back = tat - interval * cost
      if back <= now then back = 0 end
      S[4 * i] = back
      call('SET', key, format('%d', back), 'KEEPTTL')
      return 0
    end
  end
end
