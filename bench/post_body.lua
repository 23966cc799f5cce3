-- wrk script for bench/run.sh: POSTs the file named by $BENCH_BODY to $BENCH_PATH
-- (default /webhook) as application/json, and prints one machine-readable line at the end:
--   RESULT <requests/s> <p50 us> <p99 us> <requests> <non-2xx/3xx> <socket errors>
local path = os.getenv("BENCH_BODY")
local f = assert(io.open(path, "rb"), "cannot open BENCH_BODY " .. tostring(path))
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/webhook"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  local seconds = summary.duration / 1e6
  io.write(string.format("RESULT %.2f %d %d %d %d %d\n",
    summary.requests / seconds,
    latency:percentile(50), latency:percentile(99),
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout))
end
