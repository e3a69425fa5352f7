-- Sliding window (floodgate-core `algorithm/sliding_window.rs`): the weighted two-window counter,
-- stored as 24 bytes, struct '<ddd' (start of the current window µs, previous count, current count).
--
-- KEYS/ARGV: none of its own; defines `sliding(phase, i, key, cost, limit, window, _, at)` for
-- apply.lua (see prelude.lua for the script's contract). Phases: 'd' read the key and decide,
-- 's' status, 'w' consume, 'u' refund. Returns per phase: 'd' allowed, remaining, reset, retry;
-- 's' remaining, reset; 'w' and 'u' the lease id (0).
--
-- Exactness: the Rust code compares `prev × (window − elapsed) + (curr + cost) × window` with
-- `limit × window` in u128. Here `limit × window` must stay below 2^53 (the store refuses larger
-- limits); `prev × (window − elapsed)`, which reports can make huge, is only needed exactly when it
-- is at most `limit × window`, and a double that exceeds it is known to be larger.
--
-- Expiry: two windows after the current window's start. A write in the window the key already
-- counts keeps its TTL.

if use_s then
  -- ceil(p × d / w), or limit + 1 when that is larger than limit.
  local function weighted(p, d, w, limit)
    local x = p * d
    if x > limit * w then return limit + 1 end
    local q = fdiv(x, w)
    if q * w < x then q = q + 1 end
    return q
  end
  -- The least e with prev × (w − e) <= room × w (0 when prev is 0).
  local function decayed_by(prev, room, w)
    if prev == 0 then return 0 end
    local keep = fdiv(room * w, prev)
    if keep >= w then return 0 end
    return w - keep
  end
  local function reset_after(start, prev, curr, w)
    if curr > 0 then return start + 2 * w - now end
    if prev > 0 then return start + w - now end
    return 0
  end

  sliding = function(phase, i, key, cost, limit, w, _, at)
    local start = fdiv(now, w) * w
    local j = 4 * i
    if phase == 'd' then
      local v = call('GET', key)
      local s, p, c = -1, 0, 0
      if v then s, p, c = struct.unpack('<ddd', v) end
      S[j - 2], S[j - 1], S[j] = s, p, c
      -- The counts as seen at now.
      if s ~= start then
        if s + w == start then p, c = c, 0 else p, c = 0, 0 end
      end
      local d = w - (now - start)
      local wp = weighted(p, d, w, limit)
      if c + cost <= limit and wp <= limit - c - cost then
        return 1, limit - c - cost - wp, reset_after(start, p, c + cost, w), 0
      end
      local rem = 0
      if limit >= c + wp then rem = limit - c - wp end
      local room = limit - cost
      local retry_at
      if c <= room and p > 0 and decayed_by(p, room - c, w) < w then
        retry_at = start + decayed_by(p, room - c, w)
      else
        retry_at = start + w + decayed_by(c, room, w)
      end
      return 0, rem, reset_after(start, p, c, w), retry_at - now
    end
    local s, p, c = S[j - 2], S[j - 1], S[j]
    if phase == 'u' then
      local taken_in = fdiv(at, w) * w
      if s < 0 then return 0 end
      if taken_in == s then
        c = c - cost
        if c < 0 then c = 0 end
      elseif taken_in + w == s then
        p = p - cost
        if p < 0 then p = 0 end
      else
        return 0
      end
      S[j - 1], S[j] = p, c
      call('SET', key, struct.pack('<ddd', s, p, c), 'KEEPTTL')
      return 0
    end
    local same = s == start
    if not same then
      if s + w == start then p, c = c, 0 else p, c = 0, 0 end
    end
    if phase == 's' then
      local wp = weighted(p, w - (now - start), w, limit)
      local rem = 0
      if limit >= c + wp then rem = limit - c - wp end
      return rem, reset_after(start, p, c, w)
    end
    c = c + cost
    if c > MAX then c = MAX end
    S[j - 2], S[j - 1], S[j] = start, p, c
    if same then
      call('SET', key, struct.pack('<ddd', start, p, c), 'KEEPTTL')
    else
      call('SET', key, struct.pack('<ddd', start, p, c), 'PX', ttl(start + 2 * w))
    end
    return 0
  end
end
