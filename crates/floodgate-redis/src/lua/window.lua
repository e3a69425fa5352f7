-- Fixed window and quota (floodgate-core `algorithm/fixed_window.rs`, `algorithm/quota.rs`): a counter
-- for one window, stored with the window's start as 16 bytes, struct '<dd' (start µs, count).
--
-- KEYS/ARGV: none of its own; defines `window(phase, i, key, cost, limit, p2, p3, at, extra)` for
-- apply.lua (see prelude.lua for the script's contract). A fixed window passes its length in p2 and
-- aligns windows to the Unix epoch; a quota passes its calendar period's start and end in p2 and p3
-- (computed by the caller for this `now`) and, to undo, the start of the grant's period in `extra`.
-- Phases: 'd' read the key and decide, 's' status, 'w' consume, 'u' refund. Returns per phase:
-- 'd' allowed, remaining, reset, retry; 's' remaining, reset; 'w' and 'u' the lease id (0).
--
-- Expiry: at the end of the window (period). A write in the window the key already counts keeps its
-- TTL; the first write in a new window sets it.

if use_f then
  window = function(phase, i, key, cost, limit, p2, p3, at, extra)
    local start, stop
    if p3 then
      start, stop = p2, p3
    else
      start = fdiv(now, p2) * p2
      stop = start + p2
    end
    local j = 4 * i
    if phase == 'd' then
      local v = call('GET', key)
      local s, c = -1, 0
      if v then s, c = struct.unpack('<dd', v) end
      S[j - 1], S[j] = s, c
      local used = 0
      if s == start then used = c end
      local end_in = stop - now
      if used + cost <= limit then
        return 1, limit - used - cost, end_in, 0
      end
      local rem = 0
      if limit > used then rem = limit - used end
      if end_in < 1 then end_in = 1 end
      return 0, rem, end_in, end_in
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
      if not same then c = 0 end
      c = c + cost
      if c > MAX then c = MAX end
      S[j - 1], S[j] = start, c
      if same then
        call('SET', key, struct.pack('<dd', start, c), 'KEEPTTL')
      else
        call('SET', key, struct.pack('<dd', start, c), 'PX', ttl(stop))
      end
      return 0
    else
      local taken_in = extra
      if not p3 then taken_in = fdiv(at, p2) * p2 end
      local s, c = S[j - 1], S[j]
      if s ~= taken_in or s < 0 then return 0 end
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
