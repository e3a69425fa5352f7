-- wrk script for POST /v1/check: 10 000 users in 100 tenants, visited in turn.
-- wrk -t2 -c64 -d20s --latency -s crates/floodgate-server/benches/check.lua http://127.0.0.1:8080
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local n = 0
request = function()
  n = n + 1
  local body = string.format('{"descriptors":{"user":"u%d","tenant":"t%d"}}', n % 10000, n % 100)
  return wrk.format(nil, "/v1/check", nil, body)
end
