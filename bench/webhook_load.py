"""The webhook benchmark's targets and load (bench/webhook_bench.py): small HTTPS clients for the agent
and the API server, the agent's metrics, process CPU accounting and waiting for a quiet machine, wrk
runs and their parsing, the bare Sanic baseline, and the statistics of the results."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import platform
import resource
import signal
import ssl
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LUA_DIR = REPO / "bench" / "webhook_lua"


# ---- small HTTPS clients ----------------------------------------------------------------------------
class Https:
    """Keep-alive HTTPS client, one connection per thread, JSON in and out."""

    def __init__(self, port: int, context: ssl.SSLContext, timeout: float = 30) -> None:
        self.port, self.context, self.timeout = port, context, timeout
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def raw(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):  # e.g. the server closed an idle keep-alive
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = self.raw(method, path, None if body is None else json.dumps(body).encode())
        return status, (json.loads(raw) if raw else None)


def api_context(bed: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(bed.ca_file))
    ctx.load_cert_chain(str(bed.pki / "admin-client.crt"), str(bed.pki / "admin-client.key"))
    return ctx


def agent_metric(agent: Https, name: str, label: str = "") -> float:
    """Sum of the agent's /metrics samples called `name` whose labels contain `label`."""
    status, raw = agent.raw("GET", "/metrics")
    assert status == 200, status
    total = 0.0
    for line in raw.decode().splitlines():
        metric, _, value = line.rpartition(" ")
        if metric.split("{", 1)[0] == name and label in metric:
            total += float(value)
    return total


def mutate_count(agent: Https) -> float:
    """AdmissionReviews the agent's mutating webhook has answered."""
    return agent_metric(agent, "hami_place_admission_seconds_count", 'webhook="mutate"')


def mutate_seconds(agent: Https) -> float:
    """Total time inside the agent's /mutate handler (its own histogram: parse, decide, answer)."""
    return agent_metric(agent, "hami_place_admission_seconds_sum", 'webhook="mutate"')


# ---- process accounting ----------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """user+system CPU of a live process, from /proc."""
    try:
        fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    vals = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = vals[3] + vals[4]  # idle + iowait
    return float(sum(vals) - idle), float(sum(vals))


class CpuMeter:
    """CPU use over a window, in cores (1.0 = one core busy): named processes, wrk (a reaped
    child), this benchmark process, the whole machine, and "other": what the machine spent
    outside every process of this benchmark (other work sharing the machine, interrupts)."""

    ours: list[int] = []  # noqa: RUF012 - every process of the benchmark, set once started

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self.t0 = time.monotonic()
        self.c0 = {n: cpu_seconds(p) for n, p in self.pids.items()}
        self.ours0 = {p: cpu_seconds(p) for p in self.ours}
        self.children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.m0 = machine_busy()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        out = {n: (cpu_seconds(p) - self.c0[n]) / wall for n, p in self.pids.items()}
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        wrk = ch.ru_utime + ch.ru_stime - self.children0.ru_utime - self.children0.ru_stime
        if wrk > 0:
            out["wrk"] = wrk / wall
        busy, total = machine_busy()
        out["machine"] = (busy - self.m0[0]) / (total - self.m0[1]) * (os.cpu_count() or 1)
        ours = sum(cpu_seconds(p) - c for p, c in self.ours0.items()) / wall
        ours += out.get("wrk", 0) + out["bench"]
        out["other"] = max(0.0, out["machine"] - ours)
        return {k: round(v, 2) for k, v in out.items()}


QUIET_CORES = 0.2


def wait_quiet(max_wait: float, log: Callable[[str], None]) -> None:
    """The machine may be shared: before a measurement, wait (at most `max_wait` seconds) until
    the CPU used outside the benchmark's processes has stayed under QUIET_CORES for 2 s."""
    t0, calm = time.monotonic(), 0
    while time.monotonic() - t0 < max_wait:
        meter = CpuMeter({})
        time.sleep(0.5)
        calm = calm + 1 if meter.stop()["other"] < QUIET_CORES else 0
        if calm >= 4:
            return
    if max_wait > 0:
        log(f"  other work kept the machine busy for {max_wait:.0f}s; measuring anyway")


# ---- wrk ---------------------------------------------------------------------------------------------
@dataclass
class WrkRun:
    label: str
    connections: int
    threads: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    errors: int
    patched: int | None = None
    claimed: int | None = None
    handler_ms: float | None = None  # mean time inside the agent's handler, from its own histogram
    cpu: dict[str, float] = field(default_factory=dict)


def run_wrk(
    label: str,
    url: str,
    script: str,
    script_args: list[str],
    connections: int,
    threads: int,
    duration: float,
    pids: dict[str, int],
    done_dir: Path | None = None,
) -> WrkRun:
    """Run wrk; with `done_dir` (once.lua), interrupt it as soon as every thread has finished."""
    argv = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--timeout=10s",
        "--latency",
        "-s",
        str(LUA_DIR / script),
        url,
        "--",
        *script_args,
    ]
    meter = CpuMeter(pids)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if done_dir is not None:
            deadline = time.monotonic() + duration + 5
            while proc.poll() is None and time.monotonic() < deadline:
                if len(list(done_dir.glob("done-*"))) >= threads:
                    proc.send_signal(signal.SIGINT)  # wrk stops its threads and reports
                    break
                time.sleep(0.02)
        out, _ = proc.communicate(timeout=duration + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    cpu = meter.stop()
    line = next((x for x in out.splitlines() if x.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk produced no result:\n{out}")
    d = json.loads(line[len("BENCH_JSON ") :])
    errors = sum(d[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
    if done_dir is None:
        requests, seconds = d["requests"], d["duration_us"] / 1e6
    else:
        requests, seconds = d["answered"], d["window_s"]
        errors += d["not_ok"]
    return WrkRun(
        label=label,
        connections=connections,
        threads=threads,
        requests=requests,
        seconds=round(seconds, 3),
        rps=round(requests / seconds, 1) if seconds else 0.0,
        p50_ms=d["p50_us"] / 1000,
        p90_ms=d["p90_us"] / 1000,
        p99_ms=d["p99_us"] / 1000,
        p999_ms=d["p999_us"] / 1000,
        max_ms=d["max_us"] / 1000,
        errors=errors,
        patched=d.get("patched"),
        cpu=cpu,
    )


def best_of(runs: list[WrkRun]) -> list[WrkRun]:
    """Per (label, connections): the run with the highest rate (the least disturbed by anything
    else on the machine), in first-seen order."""
    best: dict[tuple[str, int], WrkRun] = {}
    for r in runs:
        key = (r.label, r.connections)
        if key not in best or r.rps > best[key].rps:
            best[key] = r
    return list(best.values())


# ---- the bare baseline -------------------------------------------------------------------------------
def serve_bare(port: int, cert: str, key: str, parser: str = "orjson") -> int:
    """The baseline: the same Sanic, TLS and single process as the agent, and no logic at all: parse
    the review (with orjson, as the agent does; ``json`` = the standard library), answer allowed."""
    import orjson
    from sanic import Request, Sanic
    from sanic import response as r

    app = Sanic("bare-webhook", configure_logging=False)
    app.config.ACCESS_LOG = False
    app.config.REQUEST_MAX_SIZE = 8 * 1024 * 1024
    app.config.KEEP_ALIVE_TIMEOUT = 30
    served = [0]
    loads = orjson.loads if parser == "orjson" else json.loads

    @app.post("/mutate")
    async def mutate(request: Request) -> r.HTTPResponse:
        doc = loads(request.body)
        served[0] += 1
        answer = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": doc["request"]["uid"], "allowed": True},
        }
        return r.raw(orjson.dumps(answer), content_type="application/json")

    @app.get("/healthz")
    async def healthz(request: Request) -> r.HTTPResponse:
        return r.json({"status": "ok", "served": served[0]})

    app.run(
        host="127.0.0.1",
        port=port,
        ssl={"cert": cert, "key": key},
        single_process=True,
        access_log=False,
        motd=False,
    )
    return 0


# ---- statistics ---------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "mean": round(statistics.fmean(values) * 1000, 3),
        "p50": round(pct(values, 50) * 1000, 3),
        "p90": round(pct(values, 90) * 1000, 3),
        "p99": round(pct(values, 99) * 1000, 3),
    }


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, IndexError, ValueError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kib / 1024 / 1024:.0f} GiB"
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False).stdout.split("Copyright")[0]
    import sanic

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "wrk": wrk.strip(),
        "sanic": sanic.__version__,
        "commit": subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
        ).stdout.strip(),
    }
