-- wrk script for bench/webhook_bench.py: send each pre-generated AdmissionReview exactly once.
--
--   wrk -tN -cN -d60s --latency -s once.lua https://127.0.0.1:PORT/mutate -- BODIES.jsonl DONE_DIR
--
-- Run with as many threads as connections: each thread then owns one connection and the bodies
-- i, i+N, i+2N, ... of BODIES.jsonl. After the response to its last body a thread writes
-- DONE_DIR/done-<id> and stops, with nothing left in flight (so every body is sent once and every
-- answer is counted); the caller interrupts wrk (SIGINT) once all threads are done. Responses
-- carrying a JSONPatch are counted, and a monotonic clock (LuaJIT ffi) times the first request
-- and the last response of each thread, because wrk's own duration includes the idle tail.
--
-- request() has no side effect: wrk calls it once on thread 0 before the run, only to check the
-- request's shape (script_verify_request), and never sends that one. The cursor moves on in
-- response() instead, which is exact with one connection per thread.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk_id, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local function now()
   ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
   return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local threads = {}
local mine = {}
local done_path = nil
local asked = nil

-- read back by done() through thread:get
got, patched, bad, first, last = 0, 0, 0, nil, nil

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   local nthreads = tonumber(args[3])
   local headers = {
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json, */*",
      ["Accept-Encoding"] = "gzip",
      ["User-Agent"] = "kube-apiserver-admission",
   }
   local n = 0
   for line in io.lines(args[1]) do
      if #line > 0 then
         if n % nthreads == id then
            mine[#mine + 1] = wrk.format("POST", nil, headers, line)
         end
         n = n + 1
      end
   end
   done_path = args[2] .. "/done-" .. id
end

function request()
   asked = now()
   if got < #mine then
      return mine[got + 1]
   end
   -- never reached when the thread stops after its last answer; harmless if it is
   return wrk.format("GET", "/healthz")
end

function response(status, headers, body)
   if first == nil then
      first = asked
   end
   got = got + 1
   last = now()
   if status ~= 200 then
      bad = bad + 1
   elseif body and string.find(body, '"patchType"', 1, true) then
      patched = patched + 1
   end
   if got >= #mine then
      local f = io.open(done_path, "w")
      f:write(tostring(got))
      f:close()
      wrk.thread:stop()
   end
end

function done(summary, latency, requests)
   local g, p, b, t0, t1 = 0, 0, 0, nil, nil
   for _, t in ipairs(threads) do
      g = g + (t:get("got") or 0)
      p = p + (t:get("patched") or 0)
      b = b + (t:get("bad") or 0)
      local f, l = t:get("first"), t:get("last")
      if f and (t0 == nil or f < t0) then
         t0 = f
      end
      if l and (t1 == nil or l > t1) then
         t1 = l
      end
   end
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,'
         .. '"status_errors":%d,"timeouts":%d,"mean_us":%.1f,"max_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
         .. '"p999_us":%d,"answered":%d,"patched":%d,"not_ok":%d,"window_s":%.6f}\n',
      summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout, latency.mean,
      latency.max, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
      g, p, b, (t0 and t1) and (t1 - t0) or 0
   ))
end
