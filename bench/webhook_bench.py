"""Benchmark: the agent's mutating admission webhook, on the local test bed, against baselines.

    .venv/bin/python -m bench.webhook_bench --duration 10 --connections 16 [--profile]

Needs ``wrk`` on PATH (Debian: ``apt-get install wrk``; the LuaJIT scripts are in
bench/webhook_lua/) and the test-bed binaries (``make testbed-build``); with ``go`` on PATH it also
builds bench/webhook_go (a no-op webhook in Go). Everything runs on 127.0.0.1: a TestBed (etcd,
kube-apiserver, controller-manager, scheduler, kwok with 4 fake GPU nodes), the hami-place CRD, one
agent (``python -m agent``, TLS) whose webhooks are registered for namespaces labelled
``hami-place-agent=bench`` only, and bare Sanic apps as the baseline (same TLS certificate
authority, single process, handler = parse the review + an allow answer echoing the uid): ``bare``
parses with orjson, as the agent does, ``bare-json`` with the standard library. All placements are
created up front through the apiserver (so through the validating webhook): non-matching ones in
the pod's namespace, others elsewhere, and the ones to claim.

1. **No-match path** (wrk, closed loop, 1/4/16 connections, best of ``--repeat``): realistic pod
   AdmissionReviews (what the apiserver sends for a Deployment's GPU pod, ~6.5 KB; the shape was
   checked against a review captured from the test bed's apiserver) for a namespace whose
   placements do not match the pod. Agent and bare app are interleaved; the agent's own histogram
   gives its handler time, and its review count is checked against wrk's.
2. **Pod creation through the real apiserver**: pods POSTed (raw HTTPS, keep-alive, pre-serialised)
   in a palindromic order to namespaces without placements: served by the agent's webhook, by the
   same registration pointing at the bare app, at the Go webhook, and by no webhook. GPU pods
   (candidates: every webhook is called) sequentially and with concurrent workers, then the same
   pod without its GPU resources (not a candidate: the registration's matchConditions keep the
   apiserver from calling any webhook; the review counts are checked either way). Pods stay
   unscheduled (no scheduler serves their schedulerName), so scheduler and kwok churn does not load
   either arm.
3. **Match path** (wrk, one connection per thread): each review matches its own pending placement
   and claims it (a status PUT with a resourceVersion precondition through the apiserver). Every
   body is sent exactly once; afterwards the placements are listed and the number newly Claimed
   must equal the number of patched answers. Baseline: the same status PUT sent straight to the
   apiserver. Then the no-match runs again with every claimed placement in the cache, and (unless
   ``--no-follower``) the match runs again on a replica that is not the leader, whose controller
   therefore never runs: the difference is the controller's share.

Latencies are wrk's (closed loop: a slow answer delays the next request of its connection, so they
are service times under saturation, not open-loop latencies). The machine may be shared: each
measurement first waits (``--quiet-wait``) for other work to calm down and records the CPU used
outside the benchmark's processes. ``--profile`` adds py-spy runs (no-match and match) and prints
the hottest functions; profiled runs are not in the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.webhook_load import (
    REPO,
    CpuMeter,
    Https,
    WrkRun,
    agent_metric,
    api_context,
    best_of,
    machine,
    mutate_count,
    mutate_seconds,
    run_wrk,
    serve_bare,
    summary_ms,
    wait_quiet,
)
from bench.webhook_objects import (
    GPUS_PER_NODE,
    GROUP,
    NODES,
    PLURAL,
    VERSION,
    admission_review,
    admitted_pod,
    compact,
    nomatch_selector,
    placement,
    pod_template,
    target,
)
from bench.webhook_report import report, summarize_profile

# The namespaces the agent serves carry this label (the tests' convention); its webhooks are
# registered for them only, and its controller acts on them only (HAMI_PLACE_NAMESPACE_SELECTOR).
BENCH_LABEL, BENCH_VALUE = "hami-place-agent", "bench"
ARM_LABEL = "hami-place-bench-arm"  # namespaces whose pods go to the bare (or the Go) webhook instead
CONFIG_NAME = "hami-place-bench"


# ---- the benchmark -------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.bed: Any = None
        self.agent: Any = None
        self.bare: Any = None
        self.bare_json: Any = None
        self.go: Any = None
        self.follower: Any = None
        self.results: dict[str, Any] = {"machine": machine(), "args": vars(args)}
        self.log = lambda msg: print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    # ---- set-up and tear-down
    def start(self) -> None:
        from kubernetes import client

        from testbed.agents.agent_process import AgentProcess
        from testbed.agents.webhooks import register_webhooks, webhook_configs
        from testbed.controlplane.certs import CertificateAuthority
        from testbed.controlplane.cluster import TestBed
        from testbed.controlplane.crd import install_crd
        from testbed.controlplane.processes import Process, free_port, wait_until
        from testbed.data.gpu_nodes import uniform_nodes

        self.log("starting the test bed (etcd, kube-apiserver, kcm, scheduler, kwok, 4 GPU nodes)")
        self.bed = TestBed(workdir=self.workdir / "testbed", nodes=uniform_nodes(NODES, gpus=GPUS_PER_NODE)).start()
        self.kube = self.bed.api_client()
        self.api = Https(self.bed.api_port, api_context(self.bed))
        install_crd(self.kube)

        ca = CertificateAuthority("hami-place-bench-ca")
        self.ca = ca
        self.agent_env = {
            # Claims must stay Claimed until they are counted (no pod ever appears for them).
            "HAMI_PLACE_CLAIM_LEASE_SECONDS": "3600",
            "HAMI_PLACE_NAMESPACE_SELECTOR": f"{BENCH_LABEL}={BENCH_VALUE}",
        }
        self.agent = AgentProcess(self.workdir / "agent", self.bed.kubeconfig, ca, "bench-agent", self.agent_env)
        self.agent.start()  # assigned first, so that stop() ends it even if it never gets ready
        self.agent_http = Https(self.agent.port, self.agent.ssl_context())

        crt, key = ca.issue_server(["127.0.0.1", "localhost"]).write(self.workdir / "agent", "bare-tls")

        def server(name: str, argv: list[str], port: int) -> tuple[Any, Https, str]:
            proc = Process(name, argv, self.workdir)
            proc.start_with_env(dict(os.environ), cwd=REPO)
            http = Https(port, self.agent.ssl_context())
            wait_until(f"{name} /healthz", lambda: http.raw("GET", "/healthz")[0] == 200, proc, 30)
            return proc, http, f"https://127.0.0.1:{port}"

        def bare(parser: str) -> tuple[Any, Https, str]:
            port = free_port()
            argv = [
                sys.executable,
                "-m",
                "bench.webhook_bench",
                "--serve-bare",
                str(port),
                "--cert",
                str(crt),
                "--key",
                str(key),
            ]
            return server(f"bare-{parser}", [*argv, "--bare-parser", parser], port)

        self.bare, self.bare_http, self.bare_url = bare("orjson")
        self.bare_json, self.bare_json_http, self.bare_json_url = bare("json")
        # A no-op webhook in Go: what calling any webhook costs the API server, Python or not.
        if shutil.which("go"):
            binary = self.workdir / "webhook-go"
            subprocess.run(["go", "build", "-o", str(binary), "."], cwd=REPO / "bench" / "webhook_go", check=True)
            port = free_port()
            argv = [str(binary), f"127.0.0.1:{port}", str(crt), str(key)]
            self.go, self.go_http, self.go_url = server("webhook-go", argv, port)
        else:
            self.log("go not found: the pod-creation phase runs without the Go webhook arm")

        self.log(f"registering the webhooks for namespaces labelled {BENCH_LABEL}={BENCH_VALUE}")
        helm = self.bed.binary("helm")
        mutating, validating = webhook_configs(
            helm, CONFIG_NAME, self.agent.url, ca.cert_pem, {BENCH_LABEL: BENCH_VALUE}
        )
        register_webhooks(self.kube, mutating, validating)
        adm = client.AdmissionregistrationV1Api(self.kube)
        # The bare server (and the Go one) as pod webhooks too, for their own namespaces, with the
        # agent's registration otherwise: they show what any webhook costs the apiserver.
        for arm, url in (("bare", self.bare_url), ("go", self.go_url if self.go else "")):
            if not url:
                continue
            hook, _ = webhook_configs(helm, f"{CONFIG_NAME}-{arm}", url, ca.cert_pem, {})
            hook["webhooks"][0]["name"] = f"pods.{arm}.bench.hami-place.scheduling.hami.placement.com"
            hook["webhooks"][0]["namespaceSelector"] = {"matchLabels": {ARM_LABEL: arm}}
            adm.create_mutating_webhook_configuration(hook)  # type: ignore[arg-type]

        self.ns_nomatch = self.namespace("bench-nomatch", True)
        self.ns_other = [self.namespace(f"bench-other-{i}", True) for i in range(4)]
        self.ns_match = self.namespace("bench-match", True)
        self.ns_prof = self.namespace("bench-match-profile", True) if self.args.profile else ""
        self.ns_follow = self.namespace("bench-match-follower", True) if self.args.follower else ""
        self.ns_put = self.namespace("bench-put", True)
        self.ns_pods = {
            "agent": self.namespace("bench-pods-agent", True),
            "bare": self.namespace("bench-pods-bare", {ARM_LABEL: "bare"}),
            **({"go": self.namespace("bench-pods-go", {ARM_LABEL: "go"})} if self.go else {}),
            "none": self.namespace("bench-pods-none", {}),
        }
        self.wait_validating_active()
        self.pids = {
            "agent": self.agent.proc.pid,
            "apiserver": self.bed.components["kube-apiserver"].pid,
            "etcd": self.bed.components["etcd"].pid,
        }
        # Everything of ours, so that CPU used by anything else on the machine shows as "other".
        self.all_pids = {
            **{n: c.pid for n, c in self.bed.components.items() if c.pid},
            "agent": self.agent.proc.pid,
            "bare": self.bare.pid,
            "bare-json": self.bare_json.pid,
            **({"go": self.go.pid} if self.go else {}),
        }
        CpuMeter.ours = list(self.all_pids.values())

    def stop(self) -> None:
        for part in (self.bare, self.bare_json, self.go, self.agent, self.follower, self.bed):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.stop()

    def namespace(self, name: str, labels: dict[str, str] | bool) -> str:
        if isinstance(labels, bool):
            labels = {BENCH_LABEL: BENCH_VALUE} if labels else {}
        status, body = self.api.json("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
        assert status == 201, body
        deadline = time.monotonic() + 30
        while self.api.json("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default ServiceAccount in {name}")
            time.sleep(0.05)
        return name

    def wait_validating_active(self) -> None:
        body = placement("probe", "probe-00001", {"matchLabels": {"app": "probe"}}, "no-such-node", ["gpu-0"])
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns_nomatch}/{PLURAL}?dryRun=All"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, resp = self.api.json("POST", path, body)
            if status >= 400 and "node no-such-node not found" in json.dumps(resp):
                return
            time.sleep(0.2)
        raise RuntimeError("the agent's validating webhook never took effect")

    # ---- placements
    def create_placements(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        def create(item: tuple[str, dict[str, Any]]) -> None:
            ns, body = item
            status, resp = self.api.json("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}", body)
            if status != 201:
                raise RuntimeError(f"placement {ns}/{body['metadata']['name']}: HTTP {status}: {resp}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, items))

    def seed_placements(self) -> None:
        a = self.args
        items: list[tuple[str, dict[str, Any]]] = []
        for i in range(a.nomatch_placements):
            node, gpus = target(i)
            sel = nomatch_selector(i)
            items.append((self.ns_nomatch, placement(f"nm-{i:05d}", f"bench-nm-{i:05d}", sel, node, gpus)))
        for k, ns in enumerate(self.ns_other):
            for i in range(a.other_placements // len(self.ns_other)):
                node, gpus = target(i)
                # these WOULD match the benchmark pod, but live in other namespaces
                sel = {"matchLabels": {"app": "llm-serve"}}
                items.append((ns, placement(f"o-{i:05d}", f"bench-o{k}-{i:05d}", sel, node, gpus)))
        follow_n = a.match_placements if a.follower else 0
        for ns, count in (
            (self.ns_match, a.match_placements),
            (self.ns_prof, self.profile_n),
            (self.ns_follow, follow_n),
        ):
            for i in range(count):
                node, gpus = target(i)
                sel = {"matchLabels": {"app": f"m-{i:05d}"}}
                items.append((ns, placement(f"m-{i:05d}", f"bench-m-{i:05d}", sel, node, gpus)))
        for i in range(a.put_placements):
            node, gpus = target(i)
            sel = {"matchLabels": {"app": f"put-{i:05d}"}}
            items.append((self.ns_put, placement(f"put-{i:05d}", f"bench-put-{i:05d}", sel, node, gpus)))
        t0 = time.monotonic()
        self.log(f"creating {len(items)} placements through the apiserver (and the validating webhook)")
        self.create_placements(items)
        self.log(f"  created in {time.monotonic() - t0:.1f}s")

    def wait_cache(self, bodies: list[str]) -> None:
        """Every match body must find its placement in the agent's cache: dry-run reviews (which
        consume nothing) until each one returns a patch."""
        pending = list(range(len(bodies)))
        deadline = time.monotonic() + 60
        while pending:
            still = []
            for i in pending:
                doc = json.loads(bodies[i])
                doc["request"]["dryRun"] = True
                status, resp = self.agent_http.json("POST", "/mutate", doc)
                if status != 200 or "patch" not in resp["response"]:
                    still.append(i)
            pending = still
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} placements never reached the agent's cache")
            if pending:
                time.sleep(0.2)

    # ---- phase 1: no-match
    def phase_nomatch(self) -> None:
        a = self.args
        bodies = self.nomatch_bodies(self.ns_nomatch, "nomatch.jsonl")
        # The same pod for a served namespace without any placement: the agent's floor.
        self.nomatch_bodies(self.ns_pods["agent"], "nomatch-empty.jsonl")
        size = statistics.fmean(len(b) for b in bodies)
        self.results["review_bytes"] = round(size)
        path = self.workdir / "nomatch.jsonl"
        # Every server must answer "allowed, no patch" to these very bodies.
        for name, srv in (("agent", self.agent_http), ("bare", self.bare_http), ("bare-json", self.bare_json_http)):
            for b in bodies[:8]:
                status, resp = srv.raw("POST", "/mutate", b.encode())
                doc = json.loads(resp)
                if status != 200 or not doc["response"]["allowed"] or "patch" in doc["response"]:
                    raise RuntimeError(f"{name} answered a no-match review with HTTP {status}: {resp[:300]!r}")
        self.log(f"no-match reviews: {size:.0f} bytes each; cache holds {self.placement_count()} placements")

        sweep = sorted(set(a.sweep) | {a.connections})
        for url in (self.agent.url, self.bare_url, self.bare_json_url):  # warm up (TLS, first-request paths)
            run_wrk("warm-up", url + "/mutate", "cycle.lua", [str(path)], 4, 2, 2, self.pids)
        runs: list[WrkRun] = []
        for rep in range(a.repeat):
            for n, c in enumerate(sweep):
                order = ["agent", "bare"]
                if (n + rep) % 2:
                    order.reverse()  # alternate who goes first
                runs += [self.nomatch_run(label, c) for label in order]
            runs.append(self.nomatch_run("agent-empty-ns", a.connections, "nomatch-empty.jsonl"))
            # The baseline with the standard library's parser (the agent's parser before orjson).
            runs.append(self.nomatch_run("bare-json", a.connections))
        self.results["nomatch_all"] = [asdict(r) for r in runs]
        self.results["nomatch"] = [asdict(r) for r in best_of(runs)]

    def nomatch_bodies(self, ns: str, filename: str) -> list[str]:
        bodies = []
        for _ in range(64):  # same pod, distinct uids and token volume names
            pod = admitted_pod(pod_template("llm-serve", self.template_hash), ns)
            bodies.append(compact(admission_review(pod, ns)))
        (self.workdir / filename).write_text("\n".join(bodies) + "\n")
        return bodies

    def nomatch_run(self, label: str, c: int, bodies: str = "nomatch.jsonl") -> WrkRun:
        a = self.args
        url = {"bare": self.bare_url, "bare-json": self.bare_json_url}.get(label, self.agent.url) + "/mutate"
        path = str(self.workdir / bodies)
        before = mutate_count(self.agent_http), mutate_seconds(self.agent_http)
        wait_quiet(a.quiet_wait, self.log)
        run = run_wrk(label, url, "cycle.lua", [path], c, min(a.threads, c), a.duration, self._pids(label))
        if not label.startswith("bare"):
            answered = mutate_count(self.agent_http) - before[0]
            # wrk counts completed answers; the agent may have finished a few more in flight
            if not run.requests <= answered <= run.requests + c:
                raise RuntimeError(f"agent answered {answered} reviews, wrk counted {run.requests}")
            run.handler_ms = round((mutate_seconds(self.agent_http) - before[1]) / answered * 1000, 3)
        self.log(
            f"  no-match {label:5s} c={c:<3d} {run.rps:8.0f}/s  p50 {run.p50_ms:.2f} ms  "
            f"p99 {run.p99_ms:.2f} ms  errors {run.errors}  cpu {run.cpu}"
        )
        return run

    def _pids(self, label: str) -> dict[str, int]:
        if label in ("bare", "bare-json"):
            proc = self.bare if label == "bare" else self.bare_json
            assert proc.pid is not None
            return {label: proc.pid}
        return {"agent": self.pids["agent"]}

    def placement_count(self) -> int:
        _, resp = self.api.json("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        return len(resp["items"])

    # ---- phase 2: pod creation through the apiserver
    def phase_pods(self) -> None:
        a = self.args
        gpu = pod_template("llm-serve", self.template_hash)
        # Left unscheduled (no scheduler serves this name), so scheduler and kwok churn does not
        # load the control plane during the measurement; the webhook still sees a GPU pod.
        gpu["spec"]["schedulerName"] = "hami-place-bench-unscheduled"
        # The same pod without its GPU resources: not a candidate, so the registration's
        # matchConditions keep the API server from calling any webhook for it.
        cpu = _without_gpu_resources(gpu)
        bodies = {"gpu": json.dumps(gpu).encode(), "cpu": json.dumps(cpu).encode()}
        paths = {arm: f"/api/v1/namespaces/{ns}/pods" for arm, ns in self.ns_pods.items()}
        arms = list(self.ns_pods)  # agent, bare, [go,] none

        def create(arm: str, kind: str = "gpu") -> float:
            t0 = time.perf_counter()
            status, raw = self.api.raw("POST", paths[arm], bodies[kind])
            dt = time.perf_counter() - t0
            if status != 201:
                raise RuntimeError(f"pod create ({arm}): HTTP {status}: {raw[:300]!r}")
            if GROUP.encode() in raw:
                raise RuntimeError("a pod in a namespace without placements was patched")
            return dt

        def served() -> dict[str, int]:
            """Reviews each webhook server has answered."""
            out = {"agent": int(mutate_count(self.agent_http))}
            out["bare"] = int(self.bare_http.json("GET", "/healthz")[1]["served"])
            if self.go:
                out["go"] = int(self.go_http.json("GET", "/healthz")[1]["served"])
            return out

        _wait_until_served([x for x in arms if x != "none"], create, served)

        # Palindromic order: each arm sees the same mean position, so linear drift cancels.
        pattern = (*arms, *reversed(arms))
        out: dict[str, Any] = {}
        modes = [
            ("sequential", 1, "gpu"),
            (f"{a.pod_workers} workers", a.pod_workers, "gpu"),
            ("sequential, CPU-only pods", 1, "cpu"),
        ]
        for mode, workers, kind in modes:
            per_worker = max(1, a.pods // workers)

            def worker(_: int, per_worker: int = per_worker, kind: str = kind) -> dict[str, list[float]]:
                times: dict[str, list[float]] = {arm: [] for arm in arms}
                for i in range(a.pod_warmup * len(arms)):
                    create(pattern[i % len(pattern)], kind)
                for i in range(per_worker * len(arms)):
                    arm = pattern[i % len(pattern)]
                    times[arm].append(create(arm, kind))
                return times

            wait_quiet(a.quiet_wait, self.log)
            before, seconds = served(), mutate_seconds(self.agent_http)
            meter = CpuMeter(self.pids)
            t0 = time.monotonic()
            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(worker, range(workers)))
            wall = time.monotonic() - t0
            cpu = meter.stop()
            after = served()
            reviewed = {arm: after[arm] - before[arm] for arm in after}
            handler_ms = (mutate_seconds(self.agent_http) - seconds) / max(1, reviewed["agent"]) * 1000
            times = {arm: [t for part in parts for t in part[arm]] for arm in arms}
            expected = (len(times["agent"]) + workers * a.pod_warmup) if kind == "gpu" else 0
            if set(reviewed.values()) != {expected}:
                raise RuntimeError(f"the webhooks reviewed {reviewed} pods, expected {expected} each")
            st = {arm: summary_ms(v) for arm, v in times.items()}
            none = st["none"]
            out[mode] = {
                "workers": workers,
                "pod": kind,
                "reviewed": reviewed,
                **st,
                **{f"{arm}_ratio_mean": round(st[arm]["mean"] / none["mean"], 3) for arm in arms},
                **{f"{arm}_ratio_p50": round(st[arm]["p50"] / none["p50"], 3) for arm in arms},
                **{f"{arm}_added_ms_mean": round(st[arm]["mean"] - none["mean"], 3) for arm in arms},
                "pods_per_s": round(sum(len(v) for v in times.values()) / wall, 1),
                "agent_handler_ms": round(handler_ms, 3) if reviewed["agent"] else None,
                "cpu": cpu,
            }
            self.log(
                f"  pods {mode:26s} mean/p50 ms: "
                + "  ".join(f"{arm} {st[arm]['mean']:.2f}/{st[arm]['p50']:.2f}" for arm in arms)
                + f"  ratio agent/none {out[mode]['agent_ratio_mean']:.3f}/{out[mode]['agent_ratio_p50']:.3f}"
                f"  reviewed {reviewed}  cpu {cpu}"
            )
        self.results["pods"] = out

    # ---- phase 3: match
    def match_bodies(self, ns: str, count: int) -> list[str]:
        """Review i carries the labels of placement m-<i> in `ns` (and matches nothing else)."""
        bodies = []
        for i in range(count):
            pod = admitted_pod(pod_template(f"m-{i:05d}", self.template_hash), ns)
            bodies.append(compact(admission_review(pod, ns)))
        return bodies

    def phase_match(self, bodies: list[str], ns: str, runs_spec: list[tuple[str, int, int, int]]) -> list[WrkRun]:
        runs = []
        for label, c, lo, hi in runs_spec:
            path = self.workdir / f"match-{label}-{c}.jsonl"
            path.write_text("\n".join(bodies[lo:hi]) + "\n")
            done_dir = self.workdir / f"match-{label}-{c}.done"
            done_dir.mkdir()
            claimed_before = self.claimed(ns)
            seconds_before = mutate_seconds(self.agent_http)
            wait_quiet(self.args.quiet_wait, self.log)
            run = run_wrk(
                label,
                self.agent.url + "/mutate",
                "once.lua",
                [str(path), str(done_dir), str(c)],
                c,
                c,
                self.args.match_timeout,
                self.pids,
                done_dir=done_dir,
            )
            claimed = self.claimed(ns) - claimed_before
            run.handler_ms = round((mutate_seconds(self.agent_http) - seconds_before) / max(1, run.requests) * 1000, 3)
            run_ok = run.requests == hi - lo and run.patched == hi - lo and claimed == run.patched
            self.log(
                f"  match c={c:<3d} {run.requests} answers, {run.patched} patched, {claimed} newly Claimed "
                f"({'ok' if run_ok else 'MISMATCH'}); {run.rps:.0f}/s p50 {run.p50_ms:.2f} ms "
                f"p99 {run.p99_ms:.2f} ms  cpu {run.cpu}"
            )
            if claimed != run.patched:
                raise RuntimeError(f"{claimed} placements were claimed but {run.patched} answers carried a patch")
            run.claimed = claimed
            runs.append(run)
        return runs

    def claimed(self, ns: str) -> int:
        status, resp = self.api.json("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}")
        assert status == 200, resp
        phases = Counter((p.get("status") or {}).get("phase", "Pending") for p in resp["items"])
        by = Counter((p.get("status") or {}).get("claimedBy") for p in resp["items"] if p.get("status"))
        assert set(by) <= {"bench-agent", "bench-follower", None}, by
        return phases["Claimed"]

    def phase_put_baseline(self) -> None:
        """The claim's write alone: the same status PUT (resourceVersion precondition), sent
        straight to the apiserver by this process, sequentially and from concurrent threads."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns_put}/{PLURAL}"
        status, resp = self.api.json("GET", path)
        assert status == 200, resp
        objs = sorted(resp["items"], key=lambda o: o["metadata"]["name"])
        out: dict[str, Any] = {}
        half = len(objs) // 2
        for mode, workers, chunk in (("sequential", 1, objs[:half]), ("4 threads", 4, objs[half:])):

            def put(obj: dict[str, Any]) -> float:
                body = {
                    "apiVersion": obj["apiVersion"],
                    "kind": obj["kind"],
                    "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "resourceVersion")},
                    "spec": obj["spec"],
                    "status": {
                        "phase": "Claimed",
                        "reason": "Claimed",
                        "message": "claimed at admission by pod llm-serve-7d9c5bf6f8-<generated>",
                        "claim": secrets.token_hex(8),
                        "claimedBy": "bench-direct",
                        "claimedAt": "2025-06-02T16:13:13Z",
                        "claimLeaseExpiresAt": "2025-06-02T17:13:13Z",
                        "targetUUIDs": ["GPU-00000000-0000-0000-0000-000000000000"],
                        "observedGeneration": obj["metadata"].get("generation", 1),
                    },
                }
                data = json.dumps(body).encode()
                t0 = time.perf_counter()
                status, raw = self.api.raw("PUT", f"{path}/{obj['metadata']['name']}/status", data)
                dt = time.perf_counter() - t0
                if status != 200:
                    raise RuntimeError(f"status PUT: HTTP {status}: {raw[:300]!r}")
                return dt

            wait_quiet(self.args.quiet_wait, self.log)
            meter = CpuMeter(self.pids)
            t0 = time.monotonic()
            with ThreadPoolExecutor(workers) as pool:
                times = list(pool.map(put, chunk))
            wall = time.monotonic() - t0
            out[mode] = {**summary_ms(times), "per_s": round(len(times) / wall, 1), "cpu": meter.stop()}
            self.log(
                f"  direct status PUT {mode:10s} {out[mode]['per_s']:.0f}/s  p50 {out[mode]['p50']:.2f} ms  "
                f"p99 {out[mode]['p99']:.2f} ms  cpu {out[mode]['cpu']}"
            )
        self.results["put_baseline"] = out

    # ---- the controller's share: the same match runs on a replica that is not the leader
    def phase_follower(self, spec: list[tuple[str, int, int, int]]) -> None:
        """Replace the agent by one with leader election on and the Lease held by someone else:
        it serves the webhooks from the same cache, but its controller never runs a pass."""
        from testbed.agents.agent_process import AgentProcess

        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "hami-place-bench", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 3600,
                "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
            },
        }
        status, resp = self.api.json("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", lease)
        assert status == 201, resp
        self.agent.stop()  # its webhook registration is no longer used: wrk talks to the replica directly
        env = {
            **self.agent_env,
            "HAMI_PLACE_LEADER_ELECTION": "true",
            "HAMI_PLACE_LEASE_NAME": "hami-place-bench",
            "HAMI_PLACE_NAMESPACE": "kube-system",
        }
        self.follower = AgentProcess(self.workdir / "agent", self.bed.kubeconfig, self.ca, "bench-follower", env)
        self.agent = self.follower.start()
        self.agent_http = Https(self.agent.port, self.agent.ssl_context())
        self.pids["agent"] = self.agent.proc.pid
        CpuMeter.ours.append(self.agent.proc.pid)
        bodies = self.match_bodies(self.ns_follow, self.args.match_placements)
        self.wait_cache(bodies)
        time.sleep(2)  # past the first lease attempt
        checks = self.agent_http.json("GET", "/readyz")[1]["checks"]
        if checks["leader"].get("leader"):
            raise RuntimeError(f"the follower replica became leader: {checks['leader']}")
        runs = self.phase_match(bodies, self.ns_follow, [(f"follower-{lbl}", c, lo, hi) for lbl, c, lo, hi in spec])
        self.results["match_follower"] = [asdict(r) for r in runs]

    # ---- profiling
    def profile(self, label: str, load: Callable[[], Any]) -> None:
        """py-spy samples the agent (200 Hz, without pausing it) for exactly as long as `load` runs."""
        pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = self.workdir / f"profile-{label}.txt"
        wait_quiet(self.args.quiet_wait, self.log)
        proc = subprocess.Popen(
            [pyspy, "record", "--nonblocking", "-r", "200", "-f", "raw", "-o", str(out), "-p", str(self.pids["agent"])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(1)  # attached
            load()
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output and exits
            _, err = proc.communicate(timeout=60)
        if not out.exists():
            self.log(f"py-spy failed: {err.strip()[-500:]}")
            return
        self.results.setdefault("profiles", {})[label] = summarize_profile(out)

    # ---- the whole run
    def run(self) -> None:
        a = self.args
        self.template_hash = "7d9c5bf6f8"
        self.profile_n = a.match_placements // 2 if a.profile else 0
        self.start()
        self.seed_placements()
        bodies = self.match_bodies(self.ns_match, a.match_placements)
        prof_bodies = self.match_bodies(self.ns_prof, self.profile_n) if a.profile else []
        self.log("waiting until the agent's cache holds every placement (dry-run probes)")
        self.wait_cache(bodies + prof_bodies)

        self.log("phase 1: no-match path, agent vs bare Sanic (wrk)")
        self.phase_nomatch()
        self.log("phase 2: pod creation through the apiserver: agent webhook vs bare webhook vs none")
        self.phase_pods()
        self.log("phase 3: match path (each review claims a placement with a status PUT), and the PUT alone")
        self.phase_put_baseline()
        per = a.match_placements // len(a.match_connections)
        spec = [("match", c, k * per, (k + 1) * per) for k, c in enumerate(a.match_connections)]
        self.results["match"] = [asdict(r) for r in self.phase_match(bodies, self.ns_match, spec)]
        self.log("no-match again, now with every match placement Claimed (the controller tracks them)")
        after = [self.nomatch_run("agent-after-claims", c) for c in (1, a.connections) for _ in range(a.repeat)]
        self.results["nomatch_after_claims"] = [asdict(r) for r in best_of(after)]
        self.results["metrics"] = {
            "claims": agent_metric(self.agent_http, "hami_place_claims_total"),
            "claim_conflicts": agent_metric(self.agent_http, "hami_place_claim_conflicts_total"),
            "errors": agent_metric(self.agent_http, "hami_place_errors_total"),
        }

        if a.profile:
            self.log("profiling (py-spy) the no-match and match paths; these runs are not in the table")
            path = str(self.workdir / "nomatch.jsonl")
            self.profile(
                f"no-match c={a.connections}",
                lambda: run_wrk(
                    "prof", self.agent.url + "/mutate", "cycle.lua", [path], a.connections, 2, a.duration, {}
                ),
            )
            c = max(a.match_connections)
            self.profile(
                f"match c={c}",
                lambda: self.phase_match(prof_bodies, self.ns_prof, [("profile", c, 0, self.profile_n)]),
            )
        if a.follower:
            self.log("match path again on a replica whose controller is idle (not the leader)")
            self.phase_follower(spec)
        self.results["agent_log_tail"] = self.agent.log_tail(20)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=10, help="seconds per wrk run (default: %(default)s)")
    p.add_argument("--connections", type=int, default=16, help="main no-match connection count (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads for no-match runs (default: %(default)s)")
    p.add_argument(
        "--sweep",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 4, 16],
        help="no-match connection counts (default: 1,4,16)",
    )
    p.add_argument("--repeat", type=int, default=3, help="no-match runs per point; the best is reported")
    p.add_argument("--nomatch-placements", type=int, default=100, help="non-matching placements in the pod's namespace")
    p.add_argument("--other-placements", type=int, default=400, help="placements in 4 other namespaces")
    p.add_argument("--match-placements", type=int, default=2000, help="placements claimed in the match phase")
    p.add_argument(
        "--match-connections",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 4],
        help="match-phase connection counts; the placements are split between them (default: 1,4)",
    )
    p.add_argument(
        "--put-placements", type=int, default=400, help="placements for the direct status-PUT baseline (half each mode)"
    )
    p.add_argument(
        "--no-follower",
        dest="follower",
        action="store_false",
        help="skip the match runs on a non-leader replica (the controller's share)",
    )
    p.add_argument("--match-timeout", type=float, default=120, help="upper bound per match run, seconds")
    p.add_argument("--pods", type=int, default=300, help="pods per arm and mode in the creation phase")
    p.add_argument("--pod-workers", type=int, default=4, help="concurrent workers in the second creation mode")
    p.add_argument("--pod-warmup", type=int, default=10, help="discarded pods per arm and worker")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=60,
        help="before each measurement, wait up to this long for other work on the machine to calm down (0: never)",
    )
    p.add_argument("--profile", action="store_true", help="also profile the agent with py-spy")
    p.add_argument("--json", type=Path, help="write all results as JSON here")
    p.add_argument("--workdir", type=Path, help="keep logs and state here (default: a temporary directory)")
    p.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--bare-parser", default="orjson", help=argparse.SUPPRESS)
    p.add_argument("--cert", help=argparse.SUPPRESS)
    p.add_argument("--key", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_bare:
        return serve_bare(args.serve_bare, args.cert, args.key, args.bare_parser)
    if not shutil.which("wrk"):
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    for c in args.match_connections:
        if args.match_placements // len(args.match_connections) < c:
            print("--match-placements too small for --match-connections", file=sys.stderr)
            return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="webhook-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, workdir)
    ok = False
    try:
        bench.run()
        ok = True
    finally:
        bench.stop()
        if args.json:
            args.json.write_text(json.dumps(bench.results, indent=2, default=str))
        if not ok:
            print(f"benchmark failed; logs kept in {workdir}", file=sys.stderr)
        elif not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(report(bench.results))
    return 0


def _without_gpu_resources(pod: dict[str, Any]) -> dict[str, Any]:
    """The same pod without its nvidia.com/ resources (a copy)."""
    out: dict[str, Any] = json.loads(json.dumps(pod))
    for c in out["spec"]["containers"]:
        for section in c["resources"].values():
            for k in [k for k in section if k.startswith("nvidia.com/")]:
                del section[k]
    return out


def _wait_until_served(
    arms: list[str], create: Callable[[str], float], served: Callable[[], dict[str, int]], timeout: float = 30
) -> None:
    """Webhook configurations take effect asynchronously: create pods until each arm's server sees one."""
    for arm in arms:
        deadline = time.monotonic() + timeout
        while True:
            before = served()[arm]
            create(arm)
            if served()[arm] > before:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {arm} pod webhook never took effect")
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
