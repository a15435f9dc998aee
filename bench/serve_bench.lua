-- wrk script of bench/serve_bench.sh: POSTs one search per request to
-- /indexes/$INDEX/search, cycling through the bodies in $BODIES (one JSON body per
-- line), each thread from its own offset; counts non-200 answers; prints one line
--   result qps Q p50_ms A p99_ms B requests N non200 M
-- from wrk's latency histogram (request sent to answer read, per connection).
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do
    bodies[#bodies + 1] = line
end
local path = "/indexes/" .. os.getenv("INDEX") .. "/search"
local headers = {["Content-Type"] = "application/json"}
local threads = {}

function setup(thread)
    thread:set("offset", #threads * 7919)
    table.insert(threads, thread)
end

function init(args)
    i = offset
    non200 = 0
end

function request()
    i = i + 1
    return wrk.format("POST", path, headers, bodies[(i % #bodies) + 1])
end

function response(status, hdrs, body)
    if status ~= 200 then
        non200 = non200 + 1
    end
end

function done(summary, latency, requests)
    local bad = 0
    for _, t in ipairs(threads) do
        bad = bad + t:get("non200")
    end
    io.write(string.format("result qps %.1f p50_ms %.3f p99_ms %.3f requests %d non200 %d errors %d\n",
        summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
        latency:percentile(99) / 1000, summary.requests, bad,
        summary.errors.connect + summary.errors.read + summary.errors.write +
        summary.errors.status + summary.errors.timeout))
end
