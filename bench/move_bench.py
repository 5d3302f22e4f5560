"""Benchmark: how long a move takes on the test bed, from placement creation to the replacement
Running on the target GPUs, broken down by step; median over N moves.

    .venv/bin/python bench/move_bench.py --moves 20

Starts a test bed (4 fake A100 nodes + 2 target nodes), one agent, and the allocation stand-in
(HAMi's Filter write; the real HAMi scheduler cannot be built here). A Deployment of 4 replicas is
moved pod by pod, one move at a time, to GPUs on the target nodes. The client polls the placement
and the pods every 10 ms and records when it first sees each step, so steps are measured with
~10 ms resolution (the status timestamps themselves have one-second resolution).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client

from hami_place_core import placement as hp
from testbed.agent_process import AgentProcess
from testbed.allocation_standin import AllocationStandIn
from testbed.certs import CertificateAuthority
from testbed.cluster import TestBed
from testbed.crd import install_crd
from testbed.gpu_nodes import NodeSpec, uniform_nodes
from testbed.waiting import wait_for
from testbed.webhooks import register_webhooks, webhook_configs
from testbed.workloads import deployment

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


def one_move(api: Any, ns: str, i: int, victim: str, target: NodeSpec) -> dict[str, float]:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    body = {
        "apiVersion": hp.API_VERSION,
        "kind": hp.KIND,
        "metadata": {"name": f"m{i}"},
        "spec": {
            "reqID": f"bench-move-{i:03d}",
            "podSelector": {"matchLabels": {"app": "bench"}},
            "nodeName": target.name,
            "gpuDevices": [f"gpu-{i % 4}/20"],
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moves", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hami-place-move-bench-"))
    targets = [NodeSpec("target-a", gpus=4), NodeSpec("target-b", gpus=4)]
    bed = TestBed(workdir=work / "bed", nodes=uniform_nodes(4) + targets)
    bed.start()
    agent: AgentProcess | None = None
    standin: AllocationStandIn | None = None
    try:
        api = bed.api_client()
        install_crd(api)
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
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        ns = "bench"
        core.create_namespace({"metadata": {"name": ns, "labels": {"hami-place-agent": "bench"}}})
        wait_for("default SA", lambda: core.list_namespaced_service_account(ns).items, 30)
        time.sleep(2)  # webhook registration propagates to the apiserver
        standin = AllocationStandIn(api, {ns}, interval=0.02).start()
        apps.create_namespaced_deployment(ns, deployment("bench", replicas=4))
        results = []
        for i in range(args.moves):
            pods = wait_for(
                "4 Ready pods",
                lambda: (
                    (
                        ps := [
                            p
                            for p in core.list_namespaced_pod(ns, label_selector="app=bench").items
                            if p.status.phase == "Running"
                            and not p.metadata.deletion_timestamp
                            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                        ]
                    )
                    and len(ps) == 4
                    and ps
                ),
                60,
            )
            victim = sorted(pods, key=lambda p: p.metadata.creation_timestamp)[0].metadata.name
            results.append(one_move(api, ns, i, victim, targets[i % 2]))
            print(f"move {i:2d}: " + "  ".join(f"{s} {results[-1][s] * 1000:6.0f}ms" for s in STEPS), flush=True)
    finally:
        if standin:
            standin.stop()
        if agent:
            agent.stop()
        bed.stop()
    print(f"\nmachine: {machine()}")
    print(f"{args.moves} moves, median time since the placement was created (and the step's own median):")
    prev = [0.0] * len(results)
    for step in STEPS:
        cumulative = [r[step] for r in results]
        own = [c - p for c, p in zip(cumulative, prev, strict=True)]
        print(
            f"  {step:10s} {statistics.median(cumulative) * 1000:7.0f} ms   (+{statistics.median(own) * 1000:5.0f} ms)"
        )
        prev = cumulative


if __name__ == "__main__":
    main()
