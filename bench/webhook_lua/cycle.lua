-- wrk script for bench/webhook_bench.py: POST pre-generated AdmissionReview bodies, round-robin.
--
--   wrk -t2 -c16 -d10s --latency -s cycle.lua https://127.0.0.1:PORT/mutate -- BODIES.jsonl
--
-- BODIES.jsonl holds one JSON document per line. Each thread starts at its own offset. No
-- response() callback, so wrk does not buffer bodies: the client stays as cheap as possible.
-- done() prints one machine-readable line, "BENCH_JSON {...}", with wrk's exact latency
-- distribution (microseconds).

local threads = {}
local reqs = {}
local i = 0

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   local headers = {
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json, */*",
      ["Accept-Encoding"] = "gzip",
      ["User-Agent"] = "kube-apiserver-admission",
   }
   for line in io.lines(args[1]) do
      if #line > 0 then
         reqs[#reqs + 1] = wrk.format("POST", nil, headers, line)
      end
   end
   i = (id or 0) % #reqs
end

function request()
   i = i % #reqs + 1
   return reqs[i]
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,'
         .. '"status_errors":%d,"timeouts":%d,"mean_us":%.1f,"max_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
         .. '"p999_us":%d}\n',
      summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout, latency.mean,
      latency.max, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)
   ))
end
