"""Benchmark: decode + aggregate a large HAMi cluster with the domain model.

    .venv/bin/python -m bench.model_bench --nodes 5000 --gpus 8 --pods 100000 --repeat 3

Input is generated deterministically (seeded): v2.10 JSON register annotations, and pods whose
``hami.io/vgpu-devices-allocated`` is written with the model's own encoder, 1-4 shares per GPU,
mixed memory/percentage/cores requests, 10% multi-GPU pods. It is serialised to JSON and parsed
back, so the objects have exactly the shape the API server (and the agent's cache) delivers.

Reported, each in a fresh child process so measurements do not leak into each other:
- `json.loads` of the list bodies (what any client pays; not part of the model);
- `build_state` (decode every annotation, resolve requests, aggregate usage per GPU);
- `cluster_metrics` (free, stranded, FGD for the running mix);
- peak memory: tracemalloc peak of build_state + metrics alone, and the process's max RSS
  (which includes the input objects themselves).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from hami_place_core.annotations import ContainerDevice, GpuDevice, encode_pod_devices, encode_register_json
from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.state import build_state

ROOT = Path(__file__).resolve().parents[1]


def generate(nodes: int, gpus: int, pods: int, seed: int = 7) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    node_objs, node_gpus = [], []
    for n in range(nodes):
        name = f"node-{n:05d}"
        devs = [
            GpuDevice(
                f"GPU-{n:05d}-{i:02d}00-0000-0000-000000000000",
                i,
                10,
                81920,
                100,
                "NVIDIA A100-SXM4-80GB",
                i // 4,
                "hami-core",
                True,
            )
            for i in range(gpus)
        ]
        node_gpus.append((name, [d.uuid for d in devs]))
        rng.shuffle(devs)  # the plugin's order is a Go map's order
        node_objs.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {"gpu": "on"},
                    "annotations": {"hami.io/node-nvidia-register": encode_register_json(devs)},
                },
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    pod_objs = []
    for p in range(pods):
        nums = 2 if rng.random() < 0.1 else 1
        pct = rng.choice([10, 20, 25, 30, 50])
        cores = rng.choice([0, 10, 20, 25, 30])
        node, uuids = node_gpus[rng.randrange(len(node_gpus))]
        shares = [ContainerDevice(u, "NVIDIA", 81920 * pct // 100, cores) for u in rng.sample(uuids, nums)]
        pod_objs.append(
            {
                "metadata": {
                    "name": f"pod-{p:06d}",
                    "namespace": f"team-{p % 50}",
                    "uid": f"uid-{p}",
                    "labels": {"app": f"app-{p % 997}"},
                    "annotations": {
                        "hami.io/vgpu-node": node,
                        "hami.io/vgpu-devices-allocated": encode_pod_devices([shares]),
                        "hami.io/bind-phase": "success",
                    },
                    "ownerReferences": [{"kind": "ReplicaSet", "name": f"rs-{p % 997}", "controller": True}],
                },
                "spec": {
                    "schedulerName": "hami-scheduler",
                    "containers": [
                        {
                            "name": "main",
                            "resources": {
                                "limits": {
                                    "nvidia.com/gpu": str(nums),
                                    "nvidia.com/gpumem-percentage": str(pct),
                                    "nvidia.com/gpucores": str(cores),
                                }
                            },
                        }
                    ],
                },
                "status": {"phase": "Running"},
            }
        )
    return node_objs, pod_objs


def child(path: str, mode: str) -> None:
    text = Path(path).read_text()
    t0 = time.perf_counter()
    doc = json.loads(text)
    t_json = time.perf_counter() - t0
    if mode == "mem":  # tracemalloc slows allocation ~10x: memory is measured in its own run
        tracemalloc.start()
    t0 = time.perf_counter()
    state = build_state(doc["nodes"], doc["pods"])
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    metrics = cluster_metrics(state, mix_from_state(state))
    t_metrics = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] if mode == "mem" else 0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "json_s": t_json,
                "build_s": t_build,
                "metrics_s": t_metrics,
                "model_peak_mib": peak / 2**20,
                "process_max_rss_mib": rss_mib,
                "gpus": metrics.total.gpus,
                "pods": len(state.pods),
                "problems": len(state.problems),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="time", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.mode)
        return
    nodes, pods = generate(args.nodes, args.gpus, args.pods)
    workdir = tempfile.mkdtemp(prefix="hami-place-bench-")
    path = Path(workdir) / "cluster.json"
    path.write_text(json.dumps({"nodes": nodes, "pods": pods}))

    def run(mode: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "bench.model_bench", "--child", str(path), "--mode", mode],
            cwd=ROOT,  # where `bench` is importable
            capture_output=True,
            text=True,
            check=True,
        )
        return dict(json.loads(out.stdout))

    try:
        runs = [run("time") for _ in range(args.repeat)]
        best = {k: min(r[k] for r in runs) for k in runs[0] if k.endswith(("_s", "_mib"))}
        best["model_peak_mib"] = run("mem")["model_peak_mib"]
    finally:
        input_mib = path.stat().st_size / 2**20
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"machine: {platform.processor() or platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, input {input_mib:.0f} MiB JSON"
    )
    print(f"cluster: {args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods; best of {args.repeat} runs")
    print(f"{'json.loads (client side, not the model)':44s} {best['json_s']:.2f} s")
    print(f"{'build_state (decode + aggregate)':44s} {best['build_s']:.2f} s")
    print(f"{'cluster_metrics (free, stranded, FGD)':44s} {best['metrics_s']:.2f} s")
    print(f"{'decode + aggregate + metrics':44s} {best['build_s'] + best['metrics_s']:.2f} s   (target < 2 s)")
    print(f"{'ratio decode+aggregate / 2 s target':44s} {best['build_s'] / 2:.2f}")
    print(f"{'ratio decode+aggregate / json.loads same data':44s} {best['build_s'] / best['json_s']:.2f}")
    print(f"{'model peak memory (tracemalloc)':44s} {best['model_peak_mib']:.0f} MiB (target < 500 MiB)")
    print(f"{'process max RSS, incl. the input objects':44s} {best['process_max_rss_mib']:.0f} MiB")
    print(f"sanity: {runs[0]['gpus']} GPUs, {runs[0]['pods']} pods counted, {runs[0]['problems']} problems")


if __name__ == "__main__":
    main()
