-- Fixed window and quota (floodgate-core `algorithm/fixed_window.rs`, `algorithm/quota.rs`): a counter
-- for one window. A fixed window stores 16 bytes, struct '<dd' (start µs, count). A quota stores 32,
-- '<dddd' (start µs, count, the period's end µs, the previous period's count): the count of the
-- period just before its own, kept so that a tenant's spend last period stays readable. This script
-- has no calendar, so it keeps the period's end, and at the rollover (the first write in a new
-- period) the old count becomes the previous one when the old period ends where the new one starts,
-- else the previous count is 0 (a period with no traffic came between). A 16-byte quota value (from
-- a release that did not keep the previous count) reads with no end and a previous count of 0; such
-- values expired at their period's end, so none outlives the period it counts.
--
-- KEYS/ARGV: none of its own; defines `window(phase, i, key, cost, limit, p2, p3, at, extra)` for
-- apply.lua (see prelude.lua for the script's contract). A fixed window passes its length in p2 and
-- aligns windows to the Unix epoch; a quota passes its calendar period's start and end in p2 and p3
-- (computed by the caller for this `now`) and, to undo, the bounds of the grant's period: its end in
-- `at` and its start in `extra`.
-- Phases: 'd' read the key and decide, 's' status, 'w' consume, 'u' refund. Returns per phase:
-- 'd' allowed, remaining, reset, retry, and for a quota in modes 'p' and 'd' (peeks) a fifth number,
-- the previous period's count: the kept previous count when the key counts in the current period,
-- the key's count when its period is the one just before the current one, else 0; 's' remaining,
-- reset; 'w' and 'u' the lease id (0).
--
-- Expiry: a fixed window at its end. A quota, whose count stays readable as the previous period's
-- through the next period, at its period's end plus twice its length (`stop + 2 × (stop − start)`):
-- an upper bound of the next period's end (no calendar period is more than twice as long as the one
-- before it: 23- and 25-hour days, 28- to 31-day months); a key kept past that end reads as holding
-- nothing. A write in the period the key already counts keeps its TTL; the first write in a new
-- period sets it.

if use_f then
  window = function(phase, i, key, cost, limit, p2, p3, at, extra)
    local start, stop
    local q = p3 ~= nil
    if q then
      start, stop = p2, p3
    else
      start = fdiv(now, p2) * p2
      stop = start + p2
    end
    -- Op i's slots: S[j - 1] start, S[j] count; for a quota, S[j - 3] the period's end, S[j - 2] the
    -- previous count.
    local j = 4 * i
    if phase == 'd' then
      local v = call('GET', key)
      local s, c = -1, 0
      if v then
        if q and #v == 32 then
          local e, pv
          s, c, e, pv = struct.unpack('<dddd', v)
          S[j - 3], S[j - 2] = e, pv
        else
          s, c = struct.unpack('<dd', v)
        end
      end
      S[j - 1], S[j] = s, c
      local prev
      if q and (mode == 'p' or mode == 'd') then
        prev = 0
        if s == start then prev = S[j - 2] or 0
        elseif S[j - 3] == start then prev = c end
      end
      local used = 0
      if s == start then used = c end
      local end_in = stop - now
      if used + cost <= limit then
        return 1, limit - used - cost, end_in, 0, prev
      end
      local rem = 0
      if limit > used then rem = limit - used end
      if end_in < 1 then end_in = 1 end
      return 0, rem, end_in, end_in, prev
    elseif phase == 's' then
      local used = 0
      if S[j - 1] == start then used = S[j] end
      local rem, reset = 0, 0
      if limit > used then rem = limit - used end
      if used > 0 then reset = stop - now end
      return rem, reset
    elseif phase == 'w' then
      local s, c = S[j - 1], S[j]
      local same = s == start
      local pv = S[j - 2] or 0
      -- A quota value of the 16-byte shape gets the 32-byte one, and the longer expiry with it.
      local shaped = S[j - 3] ~= nil
      if not same then
        -- A new period: the old count is the previous period's when that period ended at this one.
        if q and S[j - 3] == start then pv = c else pv = 0 end
        c = 0
      end
      c = c + cost
      if c > MAX then c = MAX end
      S[j - 1], S[j] = start, c
      if q then
        S[j - 3], S[j - 2] = stop, pv
        if same and shaped then
          call('SET', key, struct.pack('<dddd', start, c, stop, pv), 'KEEPTTL')
        else
          call('SET', key, struct.pack('<dddd', start, c, stop, pv), 'PX', ttl(stop + 2 * (stop - start)))
        end
      elseif same then
        call('SET', key, struct.pack('<dd', start, c), 'KEEPTTL')
      else
        call('SET', key, struct.pack('<dd', start, c), 'PX', ttl(stop))
      end
      return 0
    else
      local s, c = S[j - 1], S[j]
      if s < 0 then return 0 end
      if q then
        -- Into the grant's period: the key's own, or the one just before it (a grant taken before
        -- the rollover, given back after), whose count is the previous count.
        local e, pv = S[j - 3], S[j - 2]
        if s == extra then
          c = c - cost
          if c < 0 then c = 0 end
          S[j] = c
        elseif s == at and e then
          pv = pv - cost
          if pv < 0 then pv = 0 end
          S[j - 2] = pv
        else
          return 0
        end
        if e then
          call('SET', key, struct.pack('<dddd', s, c, e, pv), 'KEEPTTL')
        else
          call('SET', key, struct.pack('<dd', s, c), 'KEEPTTL')
        end
        return 0
      end
      if s ~= fdiv(at, p2) * p2 then return 0 end
      c = c - cost
      if c < 0 then c = 0 end
      S[j] = c
      call('SET', key, struct.pack('<dd', s, c), 'KEEPTTL')
      return 0
    end
  end
end

-- Budget (floodgate-core `algorithm/budget.rs`): the same 16 bytes, '<dd' (first use µs, count); a
-- count that never refills and is gone `ttl` (p2) after its first use. Defines
-- `budget(phase, i, key, cost, limit, ttl, _, at)`, with the phases of `window`. A budget gone (or
-- never used, or refunded to 0) starts anew at the next use; the key expires with it.
if use_n then
  budget = function(phase, i, key, cost, limit, span, _, at)
    local j = 4 * i
    if phase == 'd' then
      local v = call('GET', key)
      local s, c = -1, 0
      if v then s, c = struct.unpack('<dd', v) end
      if s < 0 or c <= 0 or now >= s + span then s, c = now, 0 end
      S[j - 1], S[j] = s, c
      local end_in = s + span - now
      if c + cost <= limit then
        return 1, limit - c - cost, end_in, 0
      end
      local rem = 0
      if limit > c then rem = limit - c end
      if end_in < 1 then end_in = 1 end
      return 0, rem, end_in, end_in
    elseif phase == 's' then
      local s, c = S[j - 1], S[j]
      local rem, reset = 0, 0
      if limit > c then rem = limit - c end
      if c > 0 then reset = s + span - now end
      return rem, reset
    elseif phase == 'w' then
      local s, c = S[j - 1], S[j]
      local fresh = c == 0
      c = c + cost
      if c > MAX then c = MAX end
      S[j] = c
      if fresh then
        call('SET', key, struct.pack('<dd', s, c), 'PX', ttl(s + span))
      else
        call('SET', key, struct.pack('<dd', s, c), 'KEEPTTL')
      end
      return 0
    else
      local s, c = S[j - 1], S[j]
      if c <= 0 or at < s then return 0 end
      c = c - cost
      if c < 0 then c = 0 end
      S[j] = c
      call('SET', key, struct.pack('<dd', s, c), 'KEEPTTL')
      return 0
    end
  end
end
