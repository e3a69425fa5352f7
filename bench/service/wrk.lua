-- wrk script of the service section (bench/service/run): POST a check for one of 10 000 users in
-- 100 tenants, visited in turn (thread i of N sends n = i, i + N, i + 2N, ...), every status code
-- counted, and a JSON report written at the end.
--
--   WRK_API=floodgate|limitador WRK_JSON=out.json WRK_THREADS=2 wrk -t2 -c64 -d8s -s bench/service/wrk.lua URL
--
-- WRK_API=floodgate (and the nginx ceiling): POST /v1/check {"descriptors":{"user":..,"tenant":..}}
-- WRK_API=limitador: POST /check_and_report {"namespace":"bench","values":{...},"delta":1}
-- The report has the fields of a floodgate-bench throughput report (docs/bench.md): 200 is
-- allowed, 429 denied, any other status an error `http_<status>`, and wrk's socket errors
-- (`connect`, `read`, `write`, `timeout`) errors of their own.
local api = os.getenv("WRK_API") or "floodgate"
local out = os.getenv("WRK_JSON")
local count_statuses = os.getenv("WRK_STATUSES") ~= "0"

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local path, body
if api == "limitador" then
  path = "/check_and_report"
  body = '{"namespace":"bench","values":{"user":"u%d","tenant":"t%d"},"delta":1}'
elseif api == "floodgate" then
  path = "/v1/check"
  body = '{"descriptors":{"user":"u%d","tenant":"t%d"}}'
else
  error("WRK_API must be floodgate or limitador, not " .. api)
end

-- Main state: the threads, numbered as they are set up.
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

-- Thread states.
local n, step
statuses = {}
function init(args)
  n = id
  step = tonumber(os.getenv("WRK_THREADS") or "2")
end

function request()
  local i = n
  n = n + step
  return wrk.format(nil, path, nil, string.format(body, i % 10000, i % 100))
end

if count_statuses then
  function response(status, headers, _)
    statuses[status] = (statuses[status] or 0) + 1
  end
end

local function json_string(s)
  return '"' .. tostring(s):gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

function done(summary, latency, requests)
  local counts = {}
  for _, t in ipairs(threads) do
    for status, c in pairs(t:get("statuses") or {}) do
      counts[status] = (counts[status] or 0) + c
    end
  end
  local e = summary.errors
  local by_kind = { connect = e.connect, read = e.read, write = e.write, timeout = e.timeout }
  local allowed, denied
  if count_statuses then
    allowed, denied = counts[200] or 0, counts[429] or 0
    for status, c in pairs(counts) do
      if status ~= 200 and status ~= 429 then by_kind["http_" .. status] = c end
    end
  else
    -- Without the response callback wrk only knows how many answers were >= 400 (429s included).
    allowed, denied = summary.requests - e.status, 0
    by_kind["http_status_ge_400"] = e.status
  end
  local total = 0
  local kinds = {}
  for k, v in pairs(by_kind) do
    if v > 0 then
      total = total + v
      table.insert(kinds, json_string(k) .. ": " .. v)
    end
  end
  table.sort(kinds)
  local status_list = {}
  for status, c in pairs(counts) do table.insert(status_list, json_string(status) .. ": " .. c) end
  table.sort(status_list)
  local secs = summary.duration / 1e6
  local fields = {
    '"scenario": "throughput"',
    '"client": "wrk"',
    '"api": ' .. json_string(api),
    '"mode": "closed"',
    '"threads": ' .. #threads,
    '"duration_s": ' .. string.format("%.6f", secs),
    '"sent": ' .. (summary.requests + e.connect + e.read + e.write + e.timeout),
    '"responses": ' .. summary.requests,
    '"decisions_per_sec": ' .. string.format("%.3f", (allowed + denied) / secs),
    '"requests_per_sec": ' .. string.format("%.3f", summary.requests / secs),
    '"allowed": ' .. allowed,
    '"denied": ' .. denied,
    '"errors": {"total": ' .. total .. ', "by_kind": {' .. table.concat(kinds, ", ") .. '}}',
    '"statuses": {' .. table.concat(status_list, ", ") .. '}',
    '"bytes": ' .. summary.bytes,
  }
  for _, p in ipairs({ { "p50_us", 50 }, { "p90_us", 90 }, { "p99_us", 99 }, { "p999_us", 99.9 } }) do
    table.insert(fields, '"' .. p[1] .. '": ' .. latency:percentile(p[2]))
  end
  table.insert(fields, '"max_us": ' .. latency.max)
  table.insert(fields, '"mean_us": ' .. string.format("%.3f", latency.mean))
  local text = "{\n  " .. table.concat(fields, ",\n  ") .. "\n}\n"
  if out and out ~= "" then
    local f = assert(io.open(out, "w"))
    f:write(text)
    f:close()
  else
    io.write(text)
  end
end
