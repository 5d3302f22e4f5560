"""Benchmark: how long a move takes on the test bed, from placement creation to the replacement
Running on the target GPUs, broken down by step; median over N moves.

    .venv/bin/python -m bench.move_bench --moves 20

    HAMI_SCHEDULER_BIN=/path/to/scheduler .venv/bin/python -m bench.move_bench --moves 20
    HAMI_SCHEDULER_BIN=/path/to/scheduler .venv/bin/python -m bench.move_bench --moves 10 --alternate 3

Starts a test bed (4 fake A100 nodes + 2 target nodes) and one agent. Who allocates is decided as
everywhere on the test bed (testbed/hami/allocation.py ``start_allocator``): without
``HAMI_SCHEDULER_BIN`` the labelled stand-in writes HAMi's allocation; with it, the real HAMi
scheduler is the ``hami-scheduler`` extender, so its Filter and Bind (and the post-bind step) are in
every move's path. ``--alternate N`` runs N sessions of each mode in turn (stand-in, HAMi, ...) in
one invocation, so the two are measured under the same machine load and their ratio means something.

A Deployment of 4 replicas is moved pod by pod, one move at a time, to GPUs on the target nodes.
The client polls the placement and the pods every 10 ms and records when it first sees each step,
so steps are measured with ~10 ms resolution (the status timestamps have one-second resolution).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from testbed.agents.agent_process import AgentProcess
from testbed.agents.webhooks import register_webhooks, webhook_configs
from testbed.controlplane.certs import CertificateAuthority
from testbed.controlplane.cluster import TestBed
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import wait_for
from testbed.data.gpu_nodes import NodeSpec, uniform_nodes
from testbed.data.workloads import deployment
from testbed.hami.allocation import Allocator, start_allocator
from testbed.hami.scheduler import ENV as HAMI_ENV

STEPS = ("evicting", "evicted", "claimed", "bound", "running", "completed")


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return f"{model}, {os.cpu_count()} vCPU, Python {platform.python_version()}"


def one_move(api: Any, ns: str, i: int, victim: str, target: NodeSpec, gpu: int) -> dict[str, float]:
    custom: Any = client.CustomObjectsApi(api)  # untyped: the client takes plain dicts
    core: Any = client.CoreV1Api(api)
    body = {
        "apiVersion": hp.API_VERSION,
        "kind": hp.KIND,
        "metadata": {"name": f"m{i}"},
        "spec": {
            "reqID": f"bench-move-{i:03d}",
            "podSelector": {"matchLabels": {"app": "bench"}},
            "nodeName": target.name,
            "gpuDevices": [f"gpu-{gpu}/20"],
            "evictPod": victim,
        },
    }
    t0 = time.monotonic()
    custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body)
    seen: dict[str, float] = {}
    deadline = t0 + 120
    while "completed" not in seen:
        if time.monotonic() > deadline:
            raise RuntimeError(f"move {i} did not complete: {seen}")
        st = custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, f"m{i}").get("status") or {}
        now = time.monotonic() - t0
        phase = st.get("phase")
        if phase == "Failed":
            raise RuntimeError(f"move {i} failed: {st.get('reason')}: {st.get('message')}")
        if phase in ("Evicting", "WaitingForPod", "Claimed", "Bound", "Completed"):
            seen.setdefault("evicting", now)
        if st.get("evictedAt") or phase in ("WaitingForPod",):
            seen.setdefault("evicted", now)
        if st.get("claim"):
            seen.setdefault("claimed", now)
        if st.get("boundPod"):
            seen.setdefault("bound", now)
            pod = core.read_namespaced_pod(st["boundPod"], ns)
            if pod.status.phase == "Running" and pod.spec.node_name == target.name:
                seen.setdefault("running", now)
        if phase == "Completed":
            seen.setdefault("completed", now)
        time.sleep(0.01)
    for step in STEPS:  # a step passed between two polls shows up with the next one's time
        seen.setdefault(step, seen["completed"])
    return seen


def _ready_pods(core: Any, ns: str) -> list[Any] | None:
    pods = [
        p
        for p in core.list_namespaced_pod(ns, label_selector="app=bench").items
        if p.status.phase == "Running"
        and not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    return pods if len(pods) == 4 else None


def _start_agent(api: Any, bed: TestBed, work: Path) -> AgentProcess:
    ca = CertificateAuthority("bench-agent-ca")
    agent = AgentProcess(
        work / "agent",
        bed.kubeconfig,
        ca,
        "bench-agent",
        label="bench",
        env={"HAMI_PLACE_EVICTION_QPS": "100", "HAMI_PLACE_EVICTION_BURST": "100"},
    ).start()
    register_webhooks(
        api, *webhook_configs(bed.binary("helm"), "bench", agent.url, ca.cert_pem, {"hami-place-agent": "bench"})
    )
    return agent


def free_target(pods: list[Any], targets: list[NodeSpec], i: int) -> tuple[NodeSpec, int]:
    """A target GPU no running bench pod holds (the victim's may be reused: it is evicted first).

    Real HAMi places the Deployment's first pods itself (binpack), possibly on the target nodes,
    and a whole-GPU request leaves no room beside it; so targets are chosen from what is free."""
    victim = sorted(pods, key=lambda p: p.metadata.creation_timestamp)[0]
    held = {
        d.uuid
        for p in pods
        if p is not victim
        for c in ann.decode_pod_devices((p.metadata.annotations or {}).get(ann.POD_DEVICES_ALLOCATED)).containers
        for d in c
    }
    for target in (targets[i % 2], targets[(i + 1) % 2]):
        for gpu in range(target.gpus):
            if target.gpu_uuid((i + gpu) % target.gpus) not in held:
                return target, (i + gpu) % target.gpus
    raise RuntimeError("no free target GPU")


def session(moves: int, label: str) -> list[dict[str, float]]:
    """One test bed in the mode the environment names; `moves` moves, one at a time."""
    work = Path(tempfile.mkdtemp(prefix="hami-place-move-bench-"))
    targets = [NodeSpec("target-a", gpus=4), NodeSpec("target-b", gpus=4)]
    bed = TestBed(workdir=work / "bed", nodes=uniform_nodes(4) + targets)
    bed.start()
    agent: AgentProcess | None = None
    allocator: Allocator | None = None
    results: list[dict[str, float]] = []
    try:
        api = bed.api_client()
        install_crd(api)
        agent = _start_agent(api, bed, work)
        core: Any = client.CoreV1Api(api)  # untyped: the client takes plain dicts
        apps: Any = client.AppsV1Api(api)
        ns = "bench"
        core.create_namespace({"metadata": {"name": ns, "labels": {"hami-place-agent": "bench"}}})
        wait_for("default SA", lambda: core.list_namespaced_service_account(ns).items, 30)
        time.sleep(2)  # webhook registration propagates to the apiserver
        allocator = start_allocator(api, {ns}, interval=0.02)
        apps.create_namespaced_deployment(ns, deployment("bench", replicas=4))
        for i in range(moves):
            pods = wait_for("4 Ready pods", lambda: _ready_pods(core, ns), 60)
            victim = sorted(pods, key=lambda p: p.metadata.creation_timestamp)[0].metadata.name
            target, gpu = free_target(pods, targets, i)
            results.append(one_move(api, ns, i, victim, target, gpu))
            print(
                f"{label} move {i:2d}: " + "  ".join(f"{s} {results[-1][s] * 1000:6.0f}ms" for s in STEPS), flush=True
            )
    finally:
        if allocator:
            allocator.stop()
        if agent:
            agent.stop()
        bed.stop()
    return results


@contextlib.contextmanager
def mode(hami_binary: str | None) -> Iterator[str]:
    """The test bed and start_allocator read HAMI_SCHEDULER_BIN: set or unset it for one session."""
    saved = os.environ.pop(HAMI_ENV, None)
    if hami_binary:
        os.environ[HAMI_ENV] = hami_binary
    try:
        yield "hami" if hami_binary else "standin"
    finally:
        os.environ.pop(HAMI_ENV, None)
        if saved is not None:
            os.environ[HAMI_ENV] = saved


def medians(results: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per step: the median time since the placement was created, and the step's own median (ms)."""
    out: dict[str, dict[str, float]] = {"sinceCreated": {}, "own": {}}
    prev = [0.0] * len(results)
    for step in STEPS:
        cumulative = [r[step] for r in results]
        own = [c - p for c, p in zip(cumulative, prev, strict=True)]
        out["sinceCreated"][step] = round(statistics.median(cumulative) * 1000)
        out["own"][step] = round(statistics.median(own) * 1000)
        prev = cumulative
    return out


def report(by_mode: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    doc: dict[str, Any] = {"machine": machine(), "modes": {}}
    for name, results in by_mode.items():
        doc["modes"][name] = {"moves": len(results), **medians(results)}
    if {"standin", "hami"} <= set(by_mode):
        done = {m: doc["modes"][m]["sinceCreated"]["completed"] for m in ("standin", "hami")}
        doc["completedRatioHamiToStandin"] = round(done["hami"] / done["standin"], 2) if done["standin"] else None
    return doc


def print_report(doc: dict[str, Any]) -> None:
    print(f"\nmachine: {doc['machine']}")
    for name, m in doc["modes"].items():
        print(f"{name}: {m['moves']} moves, median time since the placement was created (and the step's own median):")
        for step in STEPS:
            print(f"  {step:10s} {m['sinceCreated'][step]:7d} ms   (+{m['own'][step]:5d} ms)")
    if "completedRatioHamiToStandin" in doc:
        print(f"completed, HAMi / stand-in: {doc['completedRatioHamiToStandin']}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moves", type=int, default=20, help="moves per session")
    ap.add_argument(
        "--alternate",
        type=int,
        default=0,
        metavar="N",
        help=f"N sessions per mode, stand-in and HAMi in turn ({HAMI_ENV})",
    )
    ap.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = ap.parse_args()
    hami_binary = os.environ.get(HAMI_ENV, "").strip() or None
    if args.alternate and not hami_binary:
        ap.error(f"--alternate needs {HAMI_ENV} (a HAMi scheduler binary)")
    plan = [None, hami_binary] * args.alternate if args.alternate else [hami_binary]
    by_mode: dict[str, list[dict[str, float]]] = {}
    for binary in plan:
        with mode(binary) as label:
            by_mode.setdefault(label, []).extend(session(args.moves, label))
    doc = report(by_mode)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_report(doc)


if __name__ == "__main__":
    main()
