"""The type-aware node-room bound: pods HAMi keeps to some GPU types (nvidia.com/use-gputype,
nouse-gputype, use-gpuuuid) are counted only on GPUs of those types, on hand-built states whose
optimum is known (and checked by the exact MILP), on nodes with GPUs of two models, and on random
states where it must never be below what the planner or the exact MILP frees."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_place_core import annotations as ann
from hami_place_core.annotations import GpuDevice
from hami_place_core.planning import plan
from hami_place_core.planning.bounds import fewest_bins, l2, l2_bound, pattern_bound
from hami_place_core.requests import pod_request
from hami_place_core.state import ClusterState, build_state
from testbed.hami.simulate import Simulator, bind, gpu_uuid, node_manifest, pod_manifest
from tests.planner_fixtures import A100, T4, limits, node, pod

pytest.importorskip("highspy")

from hami_place_core.planning.milp_bounds import milp_bound, node_room_bound


def mixed_node(name: str, models: list[tuple[str, int]], count: int = 10) -> dict[str, Any]:
    """A node whose GPU i is of `models[i]` (HAMi registers each GPU with its own type)."""
    devices = [GpuDevice(gpu_uuid(name, i), i, count, m[1], 100, m[0], health=True) for i, m in enumerate(models)]
    return node_manifest(name, devices)


def exact_gain(state: ClusterState) -> int:
    best = milp_bound(state, time_limit=60, fewest_moves=False)
    assert best.optimal
    return best.gain


def bounds(state: ClusterState) -> tuple[int, int]:
    """The type-blind and the type-aware node-room gains, both proven."""
    blind, typed = node_room_bound(state, type_aware=False), node_room_bound(state)
    assert blind.proven and typed.proven and typed.seconds > 0
    return blind.gain, typed.gain


T4_ONLY = {ann.USE_GPU_TYPE: "T4"}
NOT_A100 = {ann.NOUSE_GPU_TYPE: "A100"}


@pytest.mark.parametrize("selector", [T4_ONLY, NOT_A100], ids=["use-gputype", "nouse-gputype"])
def test_pods_without_a_type_may_still_join_the_typed_ones(selector: dict[str, str]) -> None:
    """Three T4 GPUs hold a 60% pod each that may not use an A100; two A100 GPUs hold 40% pods that
    name no type. The typed pods stay, but the A100 pods may join them (60 + 40): both A100s free,
    with types as without."""
    nodes = [node("t", 3, model=T4), node("a", 2)]
    pods = [pod(f"t{i}", "t", (i,), 60, T4[1], annotations=selector) for i in range(3)]
    pods += [pod(f"a{i}", "a", (i,), 40) for i in range(2)]
    s = build_state(nodes, pods)
    blind, typed = bounds(s)
    assert blind == typed == exact_gain(s) == plan(s).gpus_freed == 2


@pytest.mark.parametrize("selector", [T4_ONLY, NOT_A100], ids=["use-gputype", "nouse-gputype"])
def test_the_type_blind_bound_is_strictly_larger_and_the_typed_one_exact(selector: dict[str, str]) -> None:
    """Two T4 GPUs hold a 30% pod each that may not use an A100; two A100 GPUs hold a 70% pod each
    that may only use an A100. Blind to types, each 30% pod joins a 70% one: two GPUs freed (the
    pattern bound says so too). HAMi keeps each kind on its own model, so the 30% pods can only
    share a T4: one GPU freed, the optimum."""
    nodes = [node("t", 2, model=T4), node("a", 2)]
    pods = [pod(f"t{i}", "t", (i,), 30, T4[1], annotations=selector) for i in range(2)]
    pods += [pod(f"a{i}", "a", (i,), 70, annotations={ann.USE_GPU_TYPE: "A100"}) for i in range(2)]
    s = build_state(nodes, pods)
    blind, typed = bounds(s)
    assert blind == 2 and typed == 1 == exact_gain(s) == plan(s).gpus_freed
    pb = pattern_bound(s)
    assert pb is not None and pb.proven and pb.gain == 2


def test_a_node_with_two_gpu_models_counts_each_model_apart() -> None:
    """Node m has an A100 (a 40% pod that may only use an A100) and a T4 (a 40% T4-only pod): neither
    pod may join the other, so nothing frees, though the node's compute (80%) fits one GPU. An
    aggregate per node says 1; the groups per model say 0, the optimum."""
    s = build_state(
        [mixed_node("m", [A100, T4])],
        [
            pod("a", "m", (0,), 40, annotations={ann.USE_GPU_TYPE: "A100"}),
            pod("t", "m", (1,), 40, T4[1], annotations=T4_ONLY),
        ],
    )
    blind, typed = bounds(s)
    assert blind == 1 and typed == 0 == exact_gain(s) == plan(s).gpus_freed


def test_a_mixed_node_frees_a_gpu_when_a_pod_may_change_model() -> None:
    """On m, the A100's 40% pod names no type, so it may join the T4's 40% pod (kept off A100s by
    nouse-gputype), which may not come to the A100. On n, a 70% pod kept off A100s holds the T4 and a
    20% A100-only pod the A100: neither may join the other. One GPU freed, typed and exact."""
    s = build_state(
        [mixed_node("m", [A100, T4]), mixed_node("n", [T4, A100])],
        [
            pod("a", "m", (0,), 40),
            pod("t", "m", (1,), 40, T4[1], annotations=NOT_A100),
            pod("u", "n", (0,), 70, T4[1], annotations=NOT_A100),
            pod("v", "n", (1,), 20, annotations={ann.USE_GPU_TYPE: "A100"}),
        ],
    )
    blind, typed = bounds(s)
    # Blind, v (20%) also joins u (70%) on n's T4: two GPUs; typed, v stays on the only A100 left.
    assert blind == 2 and typed == 1 == exact_gain(s) == plan(s).gpus_freed


def test_use_gpuuuid_keeps_a_pod_on_its_gpus() -> None:
    """A 40% pod pinned by nvidia.com/use-gpuuuid to its own GPU cannot move, but the other 40% pod
    can come to it: one GPU freed. With that pod kept off the pinned one's GPU by nouse-gpuuuid,
    nothing frees; blind to selectors, one would."""
    here = gpu_uuid("n", 0)
    s = build_state(
        [node("n", 3)],
        [pod("a", "n", (0,), 40, annotations={ann.USE_GPU_UUID: here}), pod("b", "n", (1,), 40)],
    )
    assert node_room_bound(s).gain == exact_gain(s) == 1
    # Both pinned to their own GPUs: nothing frees; blind to selectors, one would.
    s = build_state(
        [node("n", 2)],
        [
            pod("a", "n", (0,), 40, annotations={ann.USE_GPU_UUID: gpu_uuid("n", 0)}),
            pod("b", "n", (1,), 40, annotations={ann.NOUSE_GPU_UUID: gpu_uuid("n", 0)}),
        ],
    )
    blind, typed = bounds(s)
    assert blind == 1 and typed == 0 == exact_gain(s)


def test_fewest_bins() -> None:
    assert fewest_bins([], 100, 10) == 0
    assert fewest_bins([60, 40, 40, 40], 100, 10) == 2 == l2([60, 40, 40, 40], 100)  # 60+40, 40+40
    assert fewest_bins([35] * 6, 100, 10) == 3  # no GPU holds three
    assert fewest_bins([5] * 12, 100, 4) == 3  # the slots bind: 4 a GPU
    assert fewest_bins([45] * 3 + [20] * 6, 100, 3) == 3  # 45+20+20 thrice
    assert fewest_bins([45] * 4 + [20] * 6, 100, 3) == 4
    # Bins of several shapes: L2 and the slot count only (50+50, 50)
    assert fewest_bins([50, 50, 50], 100, 10, exact=False) == 2


# ---- random states, with GPUs of two models on one node ----------------------------------------------
def random_typed_cluster(seed: int) -> ClusterState:
    """1-4 nodes, each GPU an A100 or a T4 (some nodes mixed), node CPU that binds; pods of random
    compute with use-gputype, nouse-gputype or use-gpuuuid, placed by the HAMi simulator."""
    r = random.Random(seed)  # noqa: S311 - test data, reproducible from the seed hypothesis draws
    nodes = []
    for i in range(r.randint(1, 4)):
        n = r.randint(1, 3)
        mixed = r.random() < 0.4
        models = [r.choice([A100, T4]) for _ in range(n)] if mixed else [r.choice([A100, T4])] * n
        out = mixed_node(f"n{i}", models, count=r.choice([4, 10]))
        out["status"]["allocatable"]["cpu"] = r.choice(["8", "16", "64"])
        nodes.append(out)
    state = build_state(nodes, [])
    sim = Simulator(state)
    uuids = [d.uuid for s in state.nodes.values() for d in s.devices]
    pods = []
    for j in range(r.randint(0, 14)):
        pct = r.choice([10, 20, 25, 30, 35, 40, 50, 60, 70, 100])
        annotations: dict[str, str] = {}
        pick = r.random()
        if pick < 0.25:
            annotations[ann.USE_GPU_TYPE] = r.choice(["A100", "T4"])
        elif pick < 0.4:
            annotations[ann.NOUSE_GPU_TYPE] = r.choice(["A100", "T4"])
        elif pick < 0.45:
            annotations[ann.USE_GPU_UUID] = ",".join(r.sample(uuids, min(2, len(uuids))))
        manifest = pod_manifest(
            f"p{j}",
            "ns",
            limits(pct, 1, r.choice([None, None, 12000]) if pct < 100 else None),
            annotations=annotations,
            owner=("ReplicaSet", f"w{j}"),
        )
        if r.random() < 0.5:
            manifest["spec"]["containers"][0]["resources"]["requests"] = {"cpu": r.choice(["2", "4", "6"])}
        placement = sim.place(pod_request(manifest), list(state.nodes))
        if placement is None:
            continue
        bound = bind(manifest, placement)
        sim.apply(bound)
        pods.append(bound)
    return build_state(nodes, pods)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_typed_bound_is_never_below_a_plan_or_the_optimum(seed: int) -> None:
    state = random_typed_cluster(seed)
    typed = node_room_bound(state)
    blind = node_room_bound(state, type_aware=False)
    assert typed.proven and blind.proven
    assert plan(state).gpus_freed <= typed.gain <= min(blind.gain, l2_bound(state).gain)
    best = milp_bound(state, time_limit=30, fewest_moves=False)
    assert best.optimal and best.gain <= typed.gain


def test_a_bound_the_solver_did_not_settle_is_its_dual_bound_and_not_proven() -> None:
    """Where the work limit stops HiGHS, the bins are its dual bound rounded up (never the incumbent,
    which may use more) and `proven` is false; where the incumbent meets that bound, proven."""
    from types import SimpleNamespace

    from hami_place_core.planning.milp_bounds import _NodeRoom
    from hami_place_core.planning.model import PlanOptions

    s = build_state([node("n", 2)], [pod("a", "n", (0,), 40), pod("b", "n", (1,), 40)])
    model = _NodeRoom(s, PlanOptions(), True)

    def stopped(dual: float, primal: float) -> Any:
        info = SimpleNamespace(mip_dual_bound=dual, objective_function_value=primal, primal_solution_status=2)
        return SimpleNamespace(getInfo=lambda: info)

    open_gap = model._result(stopped(0.4, 2.0), 0, 0.0)
    assert (open_gap.bins_needed, open_gap.gain, open_gap.proven) == (1, 1, False)
    settled = model._result(stopped(0.9999999, 1.0), 0, 0.0)
    assert (settled.bins_needed, settled.proven) == (1, True)
    assert node_room_bound(s).gain == 1 and node_room_bound(s).proven
