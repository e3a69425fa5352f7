-- Concurrency (floodgate-core `algorithm/concurrency.rs`): one sorted-set member per permit held,
-- named '<lease id>:<cost>' and scored by its expiry µs, plus the member 'n' scored by minus the last
-- lease id granted (ids are max(last + 1, now), so a key forgotten and made afresh never reuses one).
--
-- KEYS/ARGV: none of its own; defines `lease(phase, i, key, cost, limit, lease_us, _, at, id)` for
-- apply.lua (see prelude.lua for the script's contract). Phases: 'd' read the key and decide,
-- 's' status, 'w' take a permit, 'u' release the permit `id`. Returns per phase: 'd' allowed,
-- remaining, reset, retry; 's' remaining, reset; 'w' the new lease id; 'u' 0.
--
-- Expiry: when the last lease ends, set on every write; expired leases are removed on every take.

if use_c then
  local function cost_of(member)
    return tonumber(string.match(member, ':(%d+)$'))
  end

  lease = function(phase, i, key, cost, limit, lease_us, _, at, id)
    local j = 4 * i
    if phase == 'd' then
      -- {'n', -last id, member, expiry, ...}, by expiry.
      local all = call('ZRANGE', key, 0, -1, 'WITHSCORES')
      local last_id, used, first_live, max_exp = 0, 0, 0, 0
      local from = 1
      if all[1] == 'n' then
        last_id = -tonumber(all[2])
        from = 3
      end
      for k = #all - 1, from, -2 do
        local exp = tonumber(all[k + 1])
        if exp <= now then break end
        used = used + cost_of(all[k])
        first_live = k
      end
      if #all >= from + 1 then max_exp = tonumber(all[#all]) end
      S[j - 3], S[j - 2], S[j - 1], S[j] = all, used, last_id, max_exp
      local reset = 0
      if max_exp > now then reset = max_exp - now end
      if used + cost <= limit then
        if reset < lease_us then reset = lease_us end
        return 1, limit - used - cost, reset, 0
      end
      local left, retry_at = used, now
      if first_live > 0 then
        for k = first_live, #all - 1, 2 do
          left = left - cost_of(all[k])
          retry_at = tonumber(all[k + 1])
          if left + cost <= limit then break end
        end
      end
      local rem = 0
      if limit > used then rem = limit - used end
      return 0, rem, reset, retry_at - now
    elseif phase == 's' then
      local used, max_exp = S[j - 2], S[j]
      local rem, reset = 0, 0
      if limit > used then rem = limit - used end
      if max_exp > now then reset = max_exp - now end
      return rem, reset
    elseif phase == 'w' then
      local all, used, last_id, max_exp = S[j - 3], S[j - 2], S[j - 1], S[j]
      local from = 1
      if all[1] == 'n' then from = 3 end
      if #all >= from + 1 and tonumber(all[from + 1]) <= now then
        call('ZREMRANGEBYSCORE', key, 0, now)
      end
      local new_id = last_id + 1
      if new_id < now then new_id = now end
      local exp = now + lease_us
      call('ZADD', key, exp, format('%d:%d', new_id, cost), -new_id, 'n')
      if exp > max_exp then max_exp = exp end
      call('PEXPIRE', key, ttl(max_exp))
      S[j - 3], S[j - 2], S[j - 1], S[j] = {}, used + cost, new_id, max_exp
      return new_id
    else
      if call('ZREM', key, format('%d:%d', id, cost)) == 0 then return 0 end
      -- Recompute the totals for a status after the release.
      local all = call('ZRANGE', key, 0, -1, 'WITHSCORES')
      local used, max_exp, from = 0, 0, 1
      if all[1] == 'n' then from = 3 end
      for k = #all - 1, from, -2 do
        local exp = tonumber(all[k + 1])
        if exp <= now then break end
        used = used + cost_of(all[k])
      end
      if #all >= from + 1 then max_exp = tonumber(all[#all]) end
      S[j - 2], S[j] = used, max_exp
      return 0
    end
  end
end
