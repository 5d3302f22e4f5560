"""Untrusted cluster data, pure logic: seeded hostile register and allocation annotations drive the
model, the fragmentation metrics, every CLI rendering, the snapshot (as JSON), the REST view, target
resolution and the planner. None may raise; whatever is decoded is within HAMi's field widths and
non-negative, and every problem stays on the node or pod it came from.

``FUZZ_SEED=<n>`` replays one seed (the failure message names it and the case)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from hami_place_core import annotations as ann
from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.planning import PlanOptions, plan
from hami_place_core.snapshot import make_snapshot, summary
from hami_place_core.state import ClusterState, build_state
from hami_place_core.targets import TargetError, parse_targets, resolve
from kubectl_hami_place.ops.render import heatmap, render_tables
from testbed.data.fuzz import Case, Fuzzer

SEEDS = [int(os.environ["FUZZ_SEED"])] if os.environ.get("FUZZ_SEED") else [1, 2, 3, 4, 5, 6]
CASES = 40  # nodes per seed
PODS = 3  # pods per node


def node(name: str, register: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {ann.NODE_REGISTER: register}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
        },
    }


def pod(name: str, node_name: str, allocation: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "fuzz",
            "uid": f"uid-{name}",
            "annotations": {ann.POD_VGPU_NODE: node_name, ann.POD_DEVICES_ALLOCATED: allocation},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "10"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def fuzzed(seed: int) -> tuple[list[Case], ClusterState]:
    f = Fuzzer(seed)
    cases = [f.case(PODS) for _ in range(CASES)]
    nodes = [node(f"n{i}", c.register) for i, c in enumerate(cases)]
    pods = [pod(f"p{i}-{j}", f"n{i}", a) for i, c in enumerate(cases) for j, a in enumerate(c.allocations)]
    return cases, build_state(nodes, pods)


def check_widths(state: ClusterState, seed: int) -> None:
    for name, n in state.nodes.items():
        for d in n.devices:
            assert 0 <= d.index < 2**64, (seed, name, d)
            for v in (d.count, d.devmem, d.devcore):
                assert 0 <= v < 2**31, (seed, name, d)
    for key, p in state.pods.items():
        for slots, mem, cores in p.per_gpu.values():
            assert slots >= 0 and mem >= 0 and cores >= 0, (seed, key, p.per_gpu)


@pytest.mark.parametrize("seed", SEEDS)
def test_hostile_annotations_never_break_the_model_or_its_views(seed: int) -> None:
    cases, state = fuzzed(seed)
    check_widths(state, seed)
    metrics = cluster_metrics(state, mix_from_state(state))
    names = sorted(state.nodes)
    render_tables(state, metrics, names, wide=True)
    heatmap(state, metrics, names, color=False)
    # JSON, as the REST API and `inspect -o json` send it: every figure finite
    doc = json.dumps(summary(state, metrics), allow_nan=False)
    json.dumps(make_snapshot([], [], state, metrics, f"fuzz seed {seed}"), allow_nan=False)
    for i, case in enumerate(cases):
        n = state.nodes[f"n{i}"]
        try:
            resolve(parse_targets(["gpu-0"]), n)
        except TargetError as e:
            assert str(e), (seed, i)
        else:
            # resolved: the node's inventory is consistent and readable, exactly one GPU has index 0
            assert n.error is None and n.parseable, (seed, i, case.register[:200])
    assert '"nodes"' in doc
    plan(state, PlanOptions(max_moves=5, solver="greedy"))


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_one_bad_pod_or_node_degrades_only_itself(seed: int) -> None:
    """The fuzzed objects next to one clean node with one clean pod: the clean ones read as if
    alone, whatever the neighbours carry."""
    cases, _ = fuzzed(seed)
    clean_reg = ann.encode_register_json(
        [ann.GpuDevice(uuid="GPU-clean-0", index=0, count=10, devmem=81920, devcore=100, type="A100", health=True)]
    )
    clean = [node("clean", clean_reg)], [pod("clean-pod", "clean", "GPU-clean-0,NVIDIA,8192,10:;")]
    alone = build_state(*clean)
    nodes = clean[0] + [node(f"n{i}", c.register) for i, c in enumerate(cases)]
    pods = clean[1] + [pod(f"p{i}-{j}", f"n{i}", a) for i, c in enumerate(cases) for j, a in enumerate(c.allocations)]
    mixed = build_state(nodes, pods)
    assert mixed.nodes["clean"].usage == alone.nodes["clean"].usage
    assert mixed.nodes["clean"].error is None and "fuzz/clean-pod" not in mixed.problems
    assert all(k.startswith("fuzz/p") for k in mixed.problems)  # each problem on the pod it came from


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("GPU-a,NVIDIA," + "9" * 400 + ",100:;", "value out of range"),
        ("GPU-a,NVIDIA,١٠,100:;", "invalid syntax"),
        ("GPU-a,NVIDIA,1_0,100:;", "invalid syntax"),
        ("GPU-a,NVIDIA,-81920,100:;", "memory is negative (-81920)"),
        ("GPU-a,NVIDIA,2147483648,100:;", "value out of range"),
    ],
)
def test_allocations_hami_would_refuse_count_nothing(value: str, error: str) -> None:
    """Each case of the issue: the pod's allocation is invalid, with the reason, and adds no usage
    (HAMi v2.10.0's onAddPod drops a pod whose devices do not decode)."""
    reg = ann.encode_register_json(
        [ann.GpuDevice(uuid="GPU-a", index=0, count=10, devmem=81920, devcore=100, type="A100", health=True)]
    )
    state = build_state([node("n", reg)], [pod("p", "n", value)])
    assert error in state.problems["fuzz/p"]
    assert state.nodes["n"].usage["GPU-a"].used == 0 and state.nodes["n"].usage["GPU-a"].usedmem == 0
    metrics = cluster_metrics(state, mix_from_state(state))
    assert metrics.nodes["n"].whole_free == 1
    assert state.unreadable_summary().startswith("1 pod with HAMi data that cannot be used")


@pytest.mark.parametrize(
    ("register", "error"),
    [
        ('[{"id":"GPU-a","index":1' + "0" * 30 + ',"count":10,"devmem":1,"devcore":100}]', "does not fit HAMi's uint"),
        ('[{"id":"GPU-a","index":0,"count":10,"devmem":1' + "0" * 400 + ',"devcore":100}]', "does not fit"),
        ('[{"id":"GPU-a","index":0,"count":-1,"devmem":1,"devcore":100}]', "count is negative (-1)"),
        ("GPU-a,10,81920,100,A100,0,true,١٠,hami-core:", "index: strconv.ParseInt: parsing '١٠': invalid syntax"),
        ("GPU-a,10,81920,100,A100,0,true,1_0,hami-core:", "invalid syntax"),
        ("GPU-a,-1,81920,100,A100,0,true,0,hami-core:", "count is negative (-1)"),
    ],
)
def test_registers_hami_would_refuse_or_that_are_negative_make_the_node_invalid(register: str, error: str) -> None:
    n = build_state([node("n", register)], []).nodes["n"]
    assert n.register.format == "invalid" and n.devices == () and error in (n.error or ""), n.error
    with pytest.raises(TargetError, match="has no readable HAMi GPU inventory"):
        resolve(parse_targets(["gpu-0"]), n)


def test_a_duplicate_index_is_never_resolved() -> None:
    """The issue's case: two GPUs at index 0; a placement for gpu-0 used to take the first."""
    devices = [
        ann.GpuDevice(uuid=f"GPU-{i}", index=0, count=10, devmem=81920, devcore=100, type="A100", health=True)
        for i in range(2)
    ]
    n = build_state([node("n", ann.encode_register_json(devices))], []).nodes["n"]
    with pytest.raises(TargetError, match=r"inconsistent, so gpu-N is not resolved: duplicate GPU index \[0\]"):
        resolve(parse_targets(["gpu-0"]), n)


def test_go_integer_parsing_matches_strconv() -> None:
    assert ann.go_parse_int("+5", 32) == 5 and ann.go_parse_int("-0") == 0 and ann.go_parse_int("00012") == 12
    assert ann.go_parse_int("2147483647", 32) == 2**31 - 1 and ann.go_parse_int("-2147483648", 32) == -(2**31)
    for bad in ("", "+", "-", " 5", "5 ", "1_0", "0x10", "1e3", "1.5", "١٠", "１０", "++5"):
        with pytest.raises(ValueError, match="invalid syntax"):
            ann.go_parse_int(bad, 32)
    for big in ("2147483648", "-2147483649", "9" * 400):
        with pytest.raises(ValueError, match="value out of range"):
            ann.go_parse_int(big, 32)
