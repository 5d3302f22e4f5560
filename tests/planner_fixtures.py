"""Cluster builders and checks the planner tests share (tests/unit, tests/cli): GPU nodes and pods
as HAMi registers and binds them, a replay that checks a plan move by move, and a real subset of
the shipped example."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.annotations import NVIDIA_DEVICE_TYPE, ContainerDevice, GpuDevice
from hami_place_core.examples import resolve_snapshot
from hami_place_core.planning import Move, apply_moves, check_moves
from hami_place_core.snapshot import load_snapshot
from hami_place_core.state import ClusterState, build_state
from testbed.hami.simulate import Placement, bind, gpu_uuid, node_manifest, pod_manifest

A100 = ("NVIDIA A100-SXM4-80GB", 81920)
T4 = ("NVIDIA-Tesla T4", 15360)


def node(
    name: str,
    n: int = 2,
    model: tuple[str, int] = A100,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    count: int = 10,
    unhealthy: tuple[int, ...] = (),
    cordoned: tuple[int, ...] = (),
    ready: bool = True,
) -> dict[str, Any]:
    devices = [
        GpuDevice(gpu_uuid(name, i), i, count, model[1], 100, model[0], health=i not in unhealthy) for i in range(n)
    ]
    out = node_manifest(name, devices, labels=labels, ready=ready)
    out["spec"] = {**({"taints": taints} if taints else {}), **({"unschedulable": True} if unschedulable else {})}
    if cordoned:
        out["metadata"]["annotations"][ann.NODE_DEVICE_CORDON] = ",".join(gpu_uuid(name, i) for i in cordoned)
    return out


def limits(pct: int, nums: int = 1, mem_mib: int | None = None) -> dict[str, str]:
    if pct >= 100:
        return {"nvidia.com/gpu": str(nums), "nvidia.com/gpucores": "100"}
    out = {"nvidia.com/gpu": str(nums), "nvidia.com/gpucores": str(pct)}
    if mem_mib is not None:
        out["nvidia.com/gpumem"] = str(mem_mib)
    else:
        out["nvidia.com/gpumem-percentage"] = str(pct)
    return out


def pod(
    name: str,
    node_name: str,
    gpus: tuple[int, ...],
    pct: int,
    devmem: int = A100[1],
    *,
    namespace: str = "ns",
    owner: tuple[str, str] | str | None = "rs",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    mem_mib: int | None = None,
) -> dict[str, Any]:
    """A running pod HAMi bound to GPU indices `gpus` of `node_name`, pct% of each (100 = whole)."""
    own = (("ReplicaSet", f"{name}-rs") if owner == "rs" else owner) if owner is not None else None
    manifest = pod_manifest(
        name,
        namespace,
        limits(pct, len(gpus), mem_mib),
        annotations=annotations,
        labels=labels,
        owner=own,  # type: ignore[arg-type]
    )
    manifest["spec"].update(spec or {})
    mem = mem_mib if mem_mib is not None else devmem * min(pct, 100) // 100
    devs = tuple(ContainerDevice(gpu_uuid(node_name, i), NVIDIA_DEVICE_TYPE, mem, min(pct, 100)) for i in gpus)
    return bind(manifest, Placement(node_name, (devs,), 0.0))


def replay(state: ClusterState, moves: tuple[Move, ...] | list[Move]) -> None:
    """Independent of check_moves: replay on a copy, usage never above capacity after any move."""
    s = apply_moves(state, [])
    for m in moves:
        s = apply_moves(s, [m])
        for n in s.nodes.values():
            for d in n.devices:
                u = n.usage[d.uuid]
                assert u.used <= d.count and u.usedmem <= d.devmem and u.usedcores <= d.devcore, (m, d, u)
    assert not check_moves(state, list(moves))


# The benchmark's MILP subset 14: 16 nodes of the shipped openb example where the greedy planner
# frees 3 GPUs and a plan of direct, valid moves frees 4 (tests/unit/test_planner_exact.py).
SUBSET_14 = [
    f"openb-node-{n:04d}" for n in (35, 37, 213, 397, 421, 576, 606, 666, 798, 823, 886, 1008, 1023, 1032, 1174, 1211)
]


@cache
def subset_raw() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods, _ = load_snapshot(resolve_snapshot("example"))
    keep = set(SUBSET_14)
    return (
        [n for n in nodes if n["metadata"]["name"] in keep],
        [p for p in pods if (p.get("spec") or {}).get("nodeName") in keep],
    )


def subset() -> ClusterState:
    """Subset 14 of the openb example as a state (the exact planner's and the exchange pass's tests)."""
    nodes, pods = subset_raw()
    return build_state(nodes, pods)


def moves_of(doc: dict[str, Any]) -> list[Move]:
    """The moves of a `plan -o json` document, for check_moves."""
    return [
        Move(
            m["pod"],
            m["workload"],
            m["from"]["node"],
            tuple(m["from"]["gpus"]),
            m["to"]["node"],
            tuple(m["to"]["gpus"]),
            tuple(m["to"]["uuids"]),
            m["reason"],
        )
        for m in doc["moves"]
    ]


def openb_subset(name: str) -> ClusterState:
    """A 16-node subset of a replayed openb state, as the planner benchmark drew it
    (tests/unit/data/openb-<name>-subset.json.gz: the nodes and pods as the replay wrote them;
    the openb trace is CC BY 4.0, docs/openb.md). Where each comes from: the tests using it."""
    with gzip.open(Path(__file__).parent / "unit" / "data" / f"openb-{name}-subset.json.gz", "rt") as f:
        doc = json.load(f)
    return build_state(doc["nodes"], doc["pods"])


def exact_outcomes(monkeypatch: Any) -> list[Any]:
    """The exact stage's outcomes (ExactOutcome, with the work each spent) of the plans made from
    here on (`monkeypatch`: pytest's fixture)."""
    from hami_place_core.planning import exact as planner_exact

    seen: list[Any] = []
    solve = planner_exact.solve

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(solve(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(planner_exact, "solve", spy)
    return seen
