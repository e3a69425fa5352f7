-- Sliding log (floodgate-core `algorithm/sliding_log.rs`): one sorted-set member per admitted
-- microsecond, scored by its time, named '<time>:<cost>' (admissions in the same microsecond merge).
--
-- KEYS/ARGV: none of its own; defines `log(phase, i, key, cost, limit, window, _, at)` for apply.lua
-- (see prelude.lua for the script's contract). Phases: 'd' read the key and decide, 's' status,
-- 'w' consume, 'u' refund. Returns per phase: 'd' allowed, remaining, reset, retry; 's' remaining,
-- reset; 'w' and 'u' the lease id (0).
--
-- Expiry: a window after the newest admission, set on every write; entries out of the window are
-- removed on every consume.

if use_l then
  local function cost_of(member)
    return tonumber(string.match(member, ':(%d+)$'))
  end

  log = function(phase, i, key, cost, limit, w, _, at)
    local j = 4 * i
    if phase == 'd' then
      -- Every entry, oldest first: {member, time, member, time, ...}.
      local all = call('ZRANGE', key, 0, -1, 'WITHSCORES')
      local used, first_live, newest = 0, 0, 0
      for k = #all - 1, 1, -2 do
        local t = tonumber(all[k + 1])
        if t + w <= now then break end
        used = used + cost_of(all[k])
        first_live = k
      end
      if #all > 0 then newest = tonumber(all[#all]) end
      S[j - 3], S[j - 2], S[j - 1], S[j] = all, used, first_live, newest
      if used + cost <= limit then
        return 1, limit - used - cost, w, 0
      end
      local left, retry_at = used, now
      if first_live > 0 then
        for k = first_live, #all - 1, 2 do
          left = left - cost_of(all[k])
          retry_at = tonumber(all[k + 1]) + w
          if left + cost <= limit then break end
        end
      end
      local rem, reset = 0, 0
      if limit > used then rem = limit - used end
      if newest + w > now then reset = newest + w - now end
      return 0, rem, reset, retry_at - now
    elseif phase == 's' then
      local used, newest = S[j - 2], S[j]
      local rem, reset = 0, 0
      if limit > used then rem = limit - used end
      if newest + w > now then reset = newest + w - now end
      return rem, reset
    elseif phase == 'w' then
      local all, used, first_live, newest = S[j - 3], S[j - 2], S[j - 1], S[j]
      if #all > 0 and tonumber(all[2]) + w <= now then
        call('ZREMRANGEBYSCORE', key, '-inf', now - w)
      end
      local c = cost
      if #all > 0 and newest == now and first_live > 0 then
        c = c + cost_of(all[#all - 1])
        call('ZREM', key, all[#all - 1])
      end
      call('ZADD', key, now, format('%d:%d', now, c))
      call('PEXPIRE', key, ttl(now + w))
      used = used + cost
      -- Later phases need only the totals: the entries read are stale now.
      S[j - 3], S[j - 2], S[j - 1], S[j] = {}, used, 0, now
      return 0
    else
      local found = call('ZRANGEBYSCORE', key, at, at)
      if #found == 0 then return 0 end
      local c = cost_of(found[1]) - cost
      call('ZREM', key, found[1])
      if c > 0 then
        call('ZADD', key, at, format('%d:%d', at, c))
      end
      -- Recompute the totals for a status after the refund.
      local all = call('ZRANGE', key, 0, -1, 'WITHSCORES')
      local used, newest = 0, 0
      for k = #all - 1, 1, -2 do
        local t = tonumber(all[k + 1])
        if t + w <= now then break end
        used = used + cost_of(all[k])
      end
      if #all > 0 then
        newest = tonumber(all[#all])
        -- The log lasts a window after its newest entry; a give-back that removed the only entry
        -- and wrote back what is left made the key anew, without an expiry.
        call('PEXPIRE', key, ttl(newest + w))
      end
      S[j - 2], S[j] = used, newest
      return 0
    end
  end
end
