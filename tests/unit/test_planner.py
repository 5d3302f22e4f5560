"""The defragmentation planner: exact small cases, every constraint, validation, bounds."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from hami_place_core import annotations as ann
from hami_place_core.examples import resolve_snapshot
from hami_place_core.planning import Move, PlanOptions, check_moves, plan
from hami_place_core.planning.bounds import l2, l2_bound, pattern_bound
from hami_place_core.planning.constraints import node_refusal, tolerates, untolerated_taint
from hami_place_core.snapshot import load_snapshot
from hami_place_core.state import ClusterState, build_state
from testbed.hami.simulate import gpu_uuid
from tests.planner_fixtures import T4, node, pod, replay


def state_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> ClusterState:
    return build_state(nodes, pods)


# ---- exact small cases ----------------------------------------------------------------------------
def test_two_half_empty_gpus_become_one_with_one_move() -> None:
    s = state_of([node("n1", 2)], [pod("a", "n1", (0,), 40), pod("b", "n1", (1,), 30)])
    p = plan(s)
    assert p.gpus_freed == 1 and len(p.moves) == 1
    m = p.moves[0]
    # cheapest first: the lighter GPU (b, 30%) is emptied into the other one
    assert (m.pod, m.from_node, m.from_gpus, m.to_node, m.to_gpus) == ("ns/b", "n1", (1,), "n1", (0,))
    assert m.frees == ("n1/gpu-1",) and m.gpu_devices == ["gpu-0"] and m.to_uuids == (gpu_uuid("n1", 0),)
    assert (p.before.whole_free, p.after.whole_free) == (0, 1)
    replay(s, p.moves)


def test_nothing_to_do_on_a_packed_or_empty_cluster() -> None:
    assert plan(state_of([node("n1", 2)], [])).moves == ()
    packed = state_of([node("n1", 2)], [pod("a", "n1", (0,), 60), pod("b", "n1", (1,), 60)])
    assert plan(packed).moves == ()


def test_exclusive_pods_are_never_moved_for_free_gpus() -> None:
    s = state_of([node("n1", 4)], [pod("w", "n1", (0,), 100), pod("a", "n1", (1,), 30), pod("b", "n1", (2,), 30)])
    p = plan(s)
    assert [m.pod for m in p.moves] == ["ns/a"] and p.gpus_freed == 1  # equal GPUs: the lower index first


def test_the_gpu_left_with_least_room_is_chosen_best_fit() -> None:
    # b (20%, the cheapest to empty) can go to a (60% used) or c (30% used): best fit is a.
    nodes = [node("n1", 2), node("n2", 1)]
    s = state_of(nodes, [pod("a", "n1", (0,), 60), pod("b", "n1", (1,), 20), pod("c", "n2", (0,), 30)])
    p = plan(s)
    assert [(m.pod, m.to_node, m.to_gpus) for m in p.moves] == [("ns/b", "n1", (0,))]
    assert p.gpus_freed == 1
    replay(s, p.moves)


def _chain_case() -> ClusterState:
    # GPU0: 65. GPU1: 44+22+16+11+5 (98). GPU2: 44+23+22+5+5 (99). GPU3..5: 65 each.
    # 65 on GPU0 fits nowhere; it fits GPU1 once 44 and 22 leave; 44 fits GPU2 once 23 and 22
    # leave; 22, 23, 22 fit next to the 65s. 5 moves free one GPU.
    pods = [
        pod("p0", "n1", (0,), 65),
        *(pod(f"q{i}", "n1", (1,), s) for i, s in enumerate((44, 22, 16, 11, 5))),
        *(pod(f"r{i}", "n1", (2,), s) for i, s in enumerate((44, 23, 22, 5, 5))),
        *(pod(f"s{i}", "n1", (3 + i,), 65) for i in range(3)),
    ]
    return state_of([node("n1", 6)], pods)


def test_ejection_chain_frees_a_gpu_direct_moves_cannot() -> None:
    s = _chain_case()
    assert plan(s, PlanOptions(max_moves_per_gpu=4)).moves == ()
    p = plan(s)
    assert p.gpus_freed == 1 and len(p.moves) == 5
    assert [m.pod for m in p.moves][-1] == "ns/p0" and p.moves[-1].frees == ("n1/gpu-0",)
    assert all(m.reason.startswith("make room") for m in p.moves[:-1])
    replay(s, p.moves)


def test_matches_the_milp_optimum_and_its_fewest_moves() -> None:
    pytest.importorskip("highspy")
    from hami_place_core.planning.milp_bounds import milp_bound

    s = _chain_case()
    p = plan(s)
    best = milp_bound(s, time_limit=60, start=p.moves)
    assert best.optimal and (best.gain, best.moves) == (p.gpus_freed, len(p.moves)) == (1, 5)


def test_never_beats_the_bounds_and_misses_by_at_most_one_here() -> None:
    """A case where cheapest-first best fit is not optimal: 23% goes next to a 65% (the tightest
    fit), where the optimum keeps that room for a 32%. The bounds hold in order. The exact
    planner (the default where HiGHS is installed and the cluster is small) finds the optimum."""
    pytest.importorskip("highspy")
    from hami_place_core.planning.milp_bounds import milp_bound

    sizes = [[47], [47], [47, 32], [65], [65], [32, 32], [23], [81], [81, 16], [59], [46, 32], [22, 22]]
    pods = [pod(f"p{g}-{k}", f"n{g // 4}", (g % 4,), pct) for g, c in enumerate(sizes) for k, pct in enumerate(c)]
    s = state_of([node(f"n{i}", 4) for i in range(3)], pods)
    p = plan(s, PlanOptions(solver="greedy"))
    best = milp_bound(s, time_limit=60, start=p.moves)
    pb = pattern_bound(s)
    assert best.optimal and pb is not None and pb.proven
    assert best.gain - 1 <= p.gpus_freed <= best.gain <= pb.gain <= l2_bound(s).gain
    assert (p.gpus_freed, best.gain) == (3, 4)
    replay(s, p.moves)
    exact = plan(s)
    assert (exact.solver, exact.gpus_freed) == ("exact", 4) and len(exact.moves) <= 8 * 4
    replay(s, exact.moves)


def test_a_move_budget_is_not_spent_on_moves_that_free_nothing() -> None:
    """No GPU of 40%+40%, 55% and 70% can be emptied. Moving a 40% next to the 55% lowers FGD, so
    the single-moves step tries it; it frees nothing and must go back even when it used up
    --max-moves (it used to stay: the step stopped at the limit before taking such moves back)."""
    sizes = [[40, 40], [55], [70]]
    pods = [pod(f"p{g}-{k}", "n0", (g,), pct) for g, c in enumerate(sizes) for k, pct in enumerate(c)]
    s = state_of([node("n0", 3)], pods)
    for limit in (None, 1, 2):
        p = plan(s, PlanOptions(max_moves=limit))
        assert (p.gpus_freed, p.moves) == (0, ()), limit


def test_the_move_bound_and_the_most_gpus_at_a_rate() -> None:
    """A 25%+25% GPU between two 60% GPUs: the only GPU any plan can free takes two moves (either
    25% into a 60% GPU, or a 60% out and a 25% in its place), so at 1.3 moves per GPU nothing can
    be freed, and the planner's plan is exactly the bound."""
    pytest.importorskip("highspy")
    from hami_place_core.planning.bounds import most_gain_at_rate, move_frontier

    sizes = [[25, 25], [60], [60]]
    pods = [pod(f"p{g}-{k}", "n0", (g,), pct) for g, c in enumerate(sizes) for k, pct in enumerate(c)]
    s = state_of([node("n0", 3)], pods)
    pb = pattern_bound(s)
    assert pb is not None and pb.gain == 1
    assert move_frontier(s, [0, 1, 2]) == {0: 0.0, 1: 2.0, 2: math.inf}
    assert most_gain_at_rate(s, 1.3, pb.gain) == 0
    assert most_gain_at_rate(s, 2.0, pb.gain) == 1
    p = plan(s)
    assert (p.gpus_freed, len(p.moves)) == (1, 2)
    replay(s, p.moves)


@pytest.mark.parametrize(("cpu", "gain"), [("20", 1), ("40", 0)])
def test_the_milp_counts_node_cpu_as_the_planner_does(cpu: str, gain: int) -> None:
    """Two 64-CPU nodes, one pod each (40% and 30% of a GPU): merging them frees a GPU unless the
    two pods' CPU requests overflow either node; the relaxations without node rows still say 1."""
    pytest.importorskip("highspy")
    from hami_place_core.planning.milp_bounds import milp_bound, node_room_bound

    pods = [pod("a", "n1", (0,), 40), pod("b", "n2", (0,), 30)]
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    s = state_of([node("n1", 1), node("n2", 1)], pods)
    p = plan(s)
    best = milp_bound(s, time_limit=60, start=p.moves)
    pb = pattern_bound(s)
    assert best.optimal and best.gain == p.gpus_freed == gain
    assert pb is not None and pb.gain == l2_bound(s).gain == 1
    # The aggregated bound counts node CPU too: here it is exact.
    assert node_room_bound(s).gain == gain
    replay(s, p.moves)


def test_lone_pods_on_cpu_full_nodes_share_an_empty_gpu_of_a_roomy_node() -> None:
    """n1 and n2 have no CPU left, each holds one 40% pod: neither can join the other, but both can
    join on n3's empty GPU: two moves free two GPUs and take one, a net gain of one."""
    nodes = [node("n1", 1), node("n2", 1), node("n3", 2)]
    for n, cpu in zip(nodes, ("32", "32", "64"), strict=True):
        n["status"]["allocatable"]["cpu"] = cpu
    pods = [pod("a", "n1", (0,), 40), pod("b", "n2", (0,), 40)]
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "30"}
    s = state_of(nodes, pods)
    p = plan(s)
    assert p.gpus_freed == 1 and len(p.moves) == 2
    assert {m.to_node for m in p.moves} == {"n3"} and len({m.to_gpus for m in p.moves}) == 1
    assert sorted(f for m in p.moves for f in m.frees) == ["n1/gpu-0", "n2/gpu-0"]
    assert [t for m in p.moves for t in m.takes] == [f"n3/gpu-{p.moves[0].to_gpus[0]}"] == list(p.moves[0].takes)
    assert all("sharing an empty GPU" in m.reason for m in p.moves)
    replay(s, p.moves)
    from kubectl_hami_place.ops.moves import describe_move as describe
    from kubectl_hami_place.ops.plan import render_plan

    taken = p.moves[0].takes[0]
    assert describe(p.moves[0]).endswith(f"; takes {taken})")
    assert f"(frees it) (takes {taken})" in render_plan(p, "test")


def test_an_empty_gpu_takes_a_split_gpu_and_a_pod_ejected_for_a_larger_one() -> None:
    """n1-n3 have no CPU left. n1/gpu-0 empties only if its 46% pod goes to n4's empty GPU (its 32%
    one fits n1/gpu-1); n3's 65% pod fits nowhere, but n2/gpu-0 takes it once its 47% pod leaves
    for that same empty GPU. Four moves free two GPUs and take one; pairing whole GPUs cannot."""
    nodes = [node("n1", 2), node("n2", 1), node("n3", 1), node("n4", 1)]
    for n, cpu in zip(nodes, ("12", "8", "4", "64"), strict=True):
        n["status"]["allocatable"]["cpu"] = cpu
    pods = [
        pod("a", "n1", (0,), 46),
        pod("b", "n1", (0,), 32),
        pod("c", "n1", (1,), 60),
        pod("d", "n2", (0,), 47),
        pod("f", "n2", (0,), 30, owner=None),  # no controller: stays
        pod("g", "n3", (0,), 65),
    ]
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    s = state_of(nodes, pods)
    p = plan(s)
    assert p.gpus_freed == 1 and len(p.moves) == 4
    assert sorted(f for m in p.moves for f in m.frees) == ["n1/gpu-0", "n3/gpu-0"]
    assert [t for m in p.moves for t in m.takes] == ["n4/gpu-0"]
    assert {m.name: (m.to_node, m.to_gpus) for m in p.moves} == {
        "a": ("n4", (0,)),
        "b": ("n1", (1,)),
        "d": ("n4", (0,)),
        "g": ("n2", (0,)),
    }
    replay(s, p.moves)
    # Within one move per GPU there is no net gain to be had.
    assert plan(s, PlanOptions(max_moves_per_gpu=1)).gpus_freed == 0


def test_pairing_counts_only_partners_whose_type_accepts_the_empty_gpu() -> None:
    """r/gpu-0 (an A100 of a roomy node) is empty. The 45% and 40% GPUs can share it; the 75% GPU
    could only share it with the 20% pod, which asks for a T4. Type-blind, that pod counted as the
    75%'s partner: the 75% went in first, nothing could join it, and with patience 1 pairing gave
    up having freed nothing (on gpuspec25 with departures it left 18 GPUs behind this way)."""
    nodes = [node("r", 1), node("n1", 1), node("n2", 1), node("n3", 1), node("t", 1, model=T4)]
    for n, cpu in zip(nodes, ("64", "4", "4", "4", "4"), strict=True):
        n["status"]["allocatable"]["cpu"] = cpu
    pods = [
        pod("big", "n1", (0,), 75),
        pod("mid", "n2", (0,), 45),
        pod("low", "n3", (0,), 40),
        pod("t4", "t", (0,), 20, devmem=T4[1], annotations={ann.USE_GPU_TYPE: "T4"}),
    ]
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    s = state_of(nodes, pods)
    from hami_place_core.planning.constraints import replacement_state
    from hami_place_core.planning.engine import Engine
    from hami_place_core.planning.ordering import sequence
    from hami_place_core.planning.passes import fresh_gpus

    engine = Engine(replacement_state(s), PlanOptions())
    fresh_gpus(engine, patience=1)
    moves = sequence(engine)
    assert moves is not None
    assert sorted((m.name, m.to_node) for m in moves) == [("low", "r"), ("mid", "r")]
    replay(s, moves)
    # And in a whole plan: the 45% and 40% pods pair on r, the T4 pod and the 75% stay.
    p = plan(s)
    assert p.gpus_freed == 1 and sorted(m.name for m in p.moves) == ["low", "mid"]


def test_gpus_of_cpu_full_nodes_are_emptied_before_those_of_a_roomy_node() -> None:
    """a and b sit alone on CPU-full nodes; r has CPU and two GPUs at 47%, as a and b are. Emptying
    r/gpu-0 into r/gpu-1 first would free one GPU and leave a and b nowhere to go; a and b into r's
    two GPUs free two, one move each (best fit only, so pairing cannot make up for it)."""
    nodes = [node("a", 1), node("b", 1), node("r", 4)]
    for n, cpu in zip(nodes, ("4", "4", "64"), strict=True):
        n["status"]["allocatable"]["cpu"] = cpu
    pods = [pod("pa", "a", (0,), 47), pod("pb", "b", (0,), 47), pod("r0", "r", (0,), 47), pod("r1", "r", (1,), 47)]
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    s = state_of(nodes, pods)
    p = plan(s, PlanOptions(max_moves_per_gpu=1))
    assert p.gpus_freed == 2 and sorted(m.name for m in p.moves) == ["pa", "pb"]
    assert sorted(m.to_gpus for m in p.moves) == [(0,), (1,)] and {m.to_node for m in p.moves} == {"r"}
    replay(s, p.moves)


# ---- constraints ------------------------------------------------------------------------------------
def _two_node_case(target_node: dict[str, Any], mover: dict[str, Any]) -> ClusterState:
    devmem = ann.decode_register(target_node["metadata"]["annotations"][ann.NODE_REGISTER]).devices[0].devmem
    # t (half of dst's GPU) never moves: the question is only whether m may join it.
    return state_of([node("src", 1), target_node], [mover, pod("t", "dst", (0,), 50, devmem, owner=None)])


@pytest.mark.parametrize(
    ("target", "mover", "moves"),
    [
        (node("dst", 1), pod("m", "src", (0,), 30), 1),
        # nodeSelector
        (node("dst", 1, labels={"zone": "b"}), pod("m", "src", (0,), 30, spec={"nodeSelector": {"zone": "a"}}), 0),
        (node("dst", 1, labels={"zone": "a"}), pod("m", "src", (0,), 30, spec={"nodeSelector": {"zone": "a"}}), 1),
        # required node affinity, matchExpressions and matchFields
        (
            node("dst", 1, labels={"zone": "b"}),
            pod(
                "m",
                "src",
                (0,),
                30,
                spec={
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}
                                ]
                            }
                        }
                    }
                },
            ),
            0,
        ),
        (
            node("dst", 1),
            pod(
                "m",
                "src",
                (0,),
                30,
                spec={
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["src"]}]},
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dst"]}]},
                                ]
                            }
                        }
                    }
                },
            ),
            1,
        ),
        # taints and tolerations
        (node("dst", 1, taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]), pod("m", "src", (0,), 30), 0),
        (
            node("dst", 1, taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]),
            pod("m", "src", (0,), 30, spec={"tolerations": [{"key": "gpu", "operator": "Equal", "value": "x"}]}),
            1,
        ),
        (node("dst", 1, taints=[{"key": "gpu", "effect": "PreferNoSchedule"}]), pod("m", "src", (0,), 30), 1),
        (node("dst", 1, unschedulable=True), pod("m", "src", (0,), 30), 0),
        (node("dst", 1, ready=False), pod("m", "src", (0,), 30), 0),
        # required pod anti-affinity: only moves within its own node
        (
            node("dst", 1),
            pod(
                "m",
                "src",
                (0,),
                30,
                spec={
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}
                            ]
                        }
                    }
                },
            ),
            0,
        ),
        # GPU type and UUID selectors
        (node("dst", 1, model=T4), pod("m", "src", (0,), 30, annotations={ann.USE_GPU_TYPE: "A100"}), 0),
        (node("dst", 1, model=T4), pod("m", "src", (0,), 30, annotations={ann.NOUSE_GPU_TYPE: "T4"}), 0),
        (node("dst", 1, model=T4), pod("m", "src", (0,), 30, annotations={ann.USE_GPU_TYPE: "T4,A100"}), 1),
        (node("dst", 1), pod("m", "src", (0,), 30, annotations={ann.NOUSE_GPU_UUID: gpu_uuid("dst", 0)}), 0),
        (node("dst", 1), pod("m", "src", (0,), 30, annotations={ann.USE_GPU_UUID: gpu_uuid("src", 0)}), 0),
        # GPU health and cordon, share slots
        (node("dst", 1, unhealthy=(0,)), pod("m", "src", (0,), 30), 0),
        (node("dst", 1, cordoned=(0,)), pod("m", "src", (0,), 30), 0),
        (node("dst", 1, count=1), pod("m", "src", (0,), 30), 0),
        # absolute memory: 30% of cores but 60 GiB of an 80 GiB GPU that has 40 GiB left
        (node("dst", 1), pod("m", "src", (0,), 30, mem_mib=61440), 0),
        # movability
        (node("dst", 1), pod("m", "src", (0,), 30, namespace="kube-system"), 0),
        (node("dst", 1), pod("m", "src", (0,), 30, annotations={ann.POD_DEFRAG: "false"}), 0),
        (node("dst", 1), pod("m", "src", (0,), 30, annotations={ann.POD_DEFRAG: "true"}), 1),
        (node("dst", 1), pod("m", "src", (0,), 30, owner=None), 0),
        (node("dst", 1), pod("m", "src", (0,), 30, owner=("Job", "j")), 0),
        (node("dst", 1), pod("m", "src", (0,), 30, owner=("DaemonSet", "d")), 0),
        (node("dst", 1), pod("m", "src", (0,), 30, owner=("StatefulSet", "s")), 1),
        (node("dst", 1), pod("m", "src", (0,), 30, owner=("ReplicationController", "r")), 1),
    ],
)
def test_constraints(target: dict[str, Any], mover: dict[str, Any], moves: int) -> None:
    s = _two_node_case(target, mover)
    p = plan(s)
    assert len(p.moves) == moves, p.moves
    if moves:
        assert p.moves[0].pod == "ns/m" and p.moves[0].to_node == "dst"
        replay(s, p.moves)


def test_excluded_namespaces_are_configurable() -> None:
    s = _two_node_case(node("dst", 1), pod("m", "src", (0,), 30, namespace="batch"))
    assert plan(s).gpus_freed == 1
    assert plan(s, PlanOptions(excluded_namespaces=frozenset({"batch"}))).moves == ()
    s = _two_node_case(node("dst", 1), pod("m", "src", (0,), 30, namespace="kube-system"))
    assert len(plan(s, PlanOptions(excluded_namespaces=frozenset())).moves) == 1


def test_workload_disruption_limits() -> None:
    # Four GPUs with one 20% pod each, all of one ReplicaSet: one move per workload by default.
    pods = [pod(f"w{i}", "n1", (i,), 20, owner=("ReplicaSet", "web")) for i in range(4)]
    s = state_of([node("n1", 4)], pods)
    assert len(plan(s).moves) == 1
    p = plan(s, PlanOptions(workload_limits={"ns/ReplicaSet/web": 3}))
    assert len(p.moves) == 3 and p.gpus_freed == 3
    assert len(plan(s, PlanOptions(max_moves_per_workload=2)).moves) == 2
    # budget already spent by an apply loop
    assert plan(s, PlanOptions(workload_moves_used={"ns/ReplicaSet/web": 1})).moves == ()
    bad = check_moves(s, list(p.moves))
    assert any("limit 1" in e for e in bad)


def test_max_moves() -> None:
    s = state_of([node("n1", 6)], [pod(f"p{i}", "n1", (i,), 15) for i in range(6)])
    assert len(plan(s).moves) == 5
    assert plan(s, PlanOptions(max_moves=0)).moves == ()
    p = plan(s, PlanOptions(max_moves=2))
    assert len(p.moves) == 2 and p.gpus_freed == 2
    with pytest.raises(ValueError, match="max_moves"):
        plan(s, PlanOptions(max_moves=-1))
    with pytest.raises(ValueError, match="objective"):
        plan(s, PlanOptions(objective="fast"))  # type: ignore[arg-type]


def test_multi_gpu_sharing_pod_moves_as_one() -> None:
    # d holds 30% of GPU0 and GPU1 of n1; n2's two GPUs have 60% each: d moves there in one move.
    s = state_of(
        [node("n1", 2), node("n2", 2)],
        [pod("d", "n1", (0, 1), 30), pod("a", "n2", (0,), 60), pod("b", "n2", (1,), 60)],
    )
    p = plan(s)
    assert [(m.pod, m.from_gpus, m.to_node, m.to_gpus) for m in p.moves] == [("ns/d", (0, 1), "n2", (0, 1))]
    assert p.gpus_freed == 2
    replay(s, p.moves)


def test_fragmentation_objective_lowers_fgd() -> None:
    pods = [pod(f"p{i}", f"n{i // 2}", (i % 2,), pct) for i, pct in enumerate((30, 20, 50, 10, 70, 25))]
    s = state_of([node(f"n{i}", 2) for i in range(3)], pods)
    p = plan(s, PlanOptions(objective="fragmentation"))
    assert p.moves and p.after.fgd < p.before.fgd
    replay(s, p.moves)
    assert plan(s, PlanOptions(objective="fragmentation", min_fgd_gain=100.0)).moves == ()


def test_check_moves_reports_broken_plans() -> None:
    s = state_of([node("n1", 2)], [pod("a", "n1", (0,), 70), pod("b", "n1", (1,), 40)])
    bad = Move("ns/b", "ns/ReplicaSet/b-rs", "n1", (1,), "n1", (0,), (gpu_uuid("n1", 0),), "test")
    errors = check_moves(s, [bad])
    assert any("does not fit" in e for e in errors) and any("oversubscribed" in e for e in errors)
    assert any("not in the state" in e for e in check_moves(s, [Move("ns/x", None, "n1", (0,), "n1", (1,), (), "")]))
    assert any("no GPUs" in e for e in check_moves(s, [Move("ns/b", None, "n1", (1,), "n1", (7,), (), "")]))
    assert any("twice" in e for e in check_moves(s, [Move("ns/b", None, "n1", (1,), "n1", (0,), (), "")] * 2))


def test_constraint_helpers() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert tolerates({"operator": "Exists"}, taint)
    assert tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "k", "value": "w"}, taint)
    assert not tolerates({"key": "k", "value": "v", "effect": "NoSchedule"}, taint)
    assert untolerated_taint([], [taint]) == "k=v:NoExecute"
    s = state_of([node("n1", 1, labels={"rank": "5"})], [pod("a", "n1", (0,), 10)])
    a = s.pods["ns/a"]
    gt = {"key": "rank", "operator": "Gt", "values": ["3"]}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    from dataclasses import replace

    assert node_refusal(replace(a, affinity=aff), s.nodes["n1"]) is not None  # an empty term matches nothing
    aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
        {"matchExpressions": [gt]}
    ]
    assert node_refusal(replace(a, affinity=aff), s.nodes["n1"]) is None


def test_l2_bound_values() -> None:
    assert l2([], 100) == 0
    assert l2([60, 60, 60], 100) == 3
    assert l2([50, 50, 50, 50], 100) == 2
    assert l2([81, 81, 19], 100) == 2
    assert l2([81, 81, 20], 100) == 3  # 20 fits next to neither 81
    assert l2([30] * 10, 100) == 3


def test_deterministic_and_independent_of_input_order() -> None:
    nodes = [node(f"n{i}", 4) for i in range(4)]
    sizes = (47, 23, 32, 47, 81, 16, 65, 22, 47, 5, 35, 59, 11, 46)
    pods = [pod(f"p{i}", f"n{i % 4}", (i // 4,), s) for i, s in enumerate(sizes)]
    first = plan(state_of(nodes, pods))
    again = plan(state_of(list(reversed(nodes)), list(reversed(pods))))
    assert first.moves == again.moves and first.moves
    assert json.dumps(first.as_dict()["moves"]) == json.dumps(again.as_dict()["moves"])


def test_the_shipped_example_plans_valid() -> None:
    nodes, pods, _ = load_snapshot(resolve_snapshot("example"))
    s = build_state(nodes, pods)
    p = plan(s)
    # Its time is measured by bench/planner_bench.py (docs/benchmarks.md), not asserted here.
    # Half the moves of a plan that ignored node CPU and memory did not fit (test below); 235 do
    # (194 before the node-room exchanges, with 1.7 moves per GPU: an exchange frees one GPU and
    # takes one, so it is a move that frees nothing by itself; 2.25 per GPU now).
    assert p.gpus_freed >= 230 and len(p.moves) <= 2.5 * p.gpus_freed
    assert not check_moves(s, list(p.moves))
    frees, takes = {f for m in p.moves for f in m.frees}, {t for m in p.moves for t in m.takes}
    assert p.gpus_freed == len(frees) - len(takes) and not frees & takes
    assert p.immovable == ()
    # Cheapest frees first: the plan cut after its first 150 moves has freed 111 GPUs (117 before
    # the node-room exchanges). In the order the places were chosen, moves that made room came
    # early and 150 moves freed 85.
    assert sum(len(m.frees) - len(m.takes) for m in p.moves[:150]) >= 110


def _pinned(manifest: dict[str, Any], node_name: str, gpus: tuple[int, ...]) -> dict[str, Any]:
    """`manifest` as the agent's mutation leaves it: pin_patch applied (the real JSONPatch ops)."""
    import copy

    from hami_place_core import placement as hp
    from hami_place_core.targets import parse_targets

    out = copy.deepcopy(manifest)
    link = {hp.POD_PLACEMENT: "p", hp.POD_REQ_ID: "req-1", hp.POD_CLAIM: "c", hp.POD_NODE: node_name}
    ops = hp.pin_patch(
        out, node_name, [gpu_uuid(node_name, i) for i in gpus], parse_targets([f"gpu-{i}" for i in gpus]), link
    )
    for op in ops:  # "add" on a path: set the value there (what the API server does for these ops)
        *parents, leaf = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[leaf] = op["value"]
    assert (
        ops
        and hp.pin_patch(
            out, node_name, [gpu_uuid(node_name, i) for i in gpus], parse_targets([f"gpu-{i}" for i in gpus]), link
        )
        == []
    )  # idempotent once applied
    return out


def test_a_pod_a_placement_pinned_can_be_moved_again() -> None:
    """The pin lives on the pod, not on its template: a pod hami-place moved before (required
    affinity to its node, use-gpuuuid of its GPU) is planned as its replacement will be."""
    b = _pinned(pod("b", "n1", (1,), 30), "n1", (1,))
    terms = b["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    s = state_of([node("n1", 2), node("n2", 2)], [pod("a", "n2", (0,), 40), b])
    p = plan(s)
    assert [(m.pod, m.to_node, m.to_gpus) for m in p.moves] == [("ns/b", "n2", (0,))]  # off its pinned node
    assert not check_moves(s, list(p.moves))
    # the workload's own constraints stay: a use-gpuuuid it had before the pin, and its own affinity
    own = pod(
        "c",
        "n1",
        (1,),
        30,
        annotations={ann.USE_GPU_UUID: gpu_uuid("n1", 1)},
        spec={
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            }
        },
    )
    c = _pinned(own, "n1", (1,))
    from hami_place_core import placement as hp

    assert c["metadata"]["annotations"][hp.POD_ORIGINAL_USE_GPU_UUID] == gpu_uuid("n1", 1)
    s2 = state_of(
        [node("n1", 2, labels={"pool": "a"}), node("n2", 2, labels={"pool": "a"})], [pod("a", "n2", (0,), 40), c]
    )
    # still held to GPU 1 of n1 by its own use-gpuuuid: a comes to it instead
    assert [(m.pod, m.to_node, m.to_gpus) for m in plan(s2).moves] == [("ns/a", "n1", (1,))]
    without = {k: v for k, v in own["metadata"]["annotations"].items() if k != ann.USE_GPU_UUID}
    c2 = _pinned({**own, "metadata": {**own["metadata"], "annotations": without}}, "n1", (1,))
    assert hp.POD_ORIGINAL_USE_GPU_UUID not in c2["metadata"]["annotations"]
    s3 = state_of([node("n1", 2, labels={"pool": "a"}), node("n2", 2)], [pod("a", "n2", (0,), 40), c2])
    # its own affinity (pool=a) keeps it off n2, the pin aside: a comes to it instead
    assert [(m.pod, m.to_node) for m in plan(s3).moves] == [("ns/a", "n1")]
    s4 = state_of(
        [node("n1", 2, labels={"pool": "a"}), node("n2", 2, labels={"pool": "a"})], [pod("a", "n2", (0,), 40), c2]
    )
    assert [(m.pod, m.to_node) for m in plan(s4).moves] == [("ns/c", "n2")]


def test_stopping_points_are_the_shortest_prefixes_for_each_share_of_the_gain() -> None:
    from hami_place_core.planning import Plan, PlanMetrics

    def mv(i: int, frees: int = 0, takes: int = 0) -> Move:
        return Move(
            f"ns/p{i}",
            None,
            "n1",
            (0,),
            "n2",
            (0,),
            (),
            "t",
            tuple(f"n1/gpu-{i}-{k}" for k in range(frees)),
            tuple(f"n3/gpu-{i}-{k}" for k in range(takes)),
        )

    metrics = PlanMetrics(0, 0, 0.0, 0.0, 0.0)
    # 10 GPUs freed by 16 moves: one move takes an empty GPU (the gain dips), the last three free nothing
    moves = [mv(0, 1), mv(1, 1), mv(2, takes=1), mv(3, 2), mv(4, 1), mv(5), mv(6, 1), mv(7, 1), mv(8), mv(9, 1)]
    moves += [mv(10, 1), mv(11, 1), mv(12, 1), mv(13), mv(14), mv(15)]
    p = Plan("free-gpus", tuple(moves), metrics, metrics, (), 0.0)
    # 25% of 10 = 3 GPUs first after move 4 (1+1-1+2), 50% = 5 after 7, 75% = 8 after 11, 90% = 9 after 12
    assert p.stopping_points() == [(4, 3), (7, 5), (11, 8), (12, 9), (16, 10)]
    assert p.as_dict()["stoppingPoints"][0] == {"moves": 4, "gpusFreed": 3}
    assert p.stopping_points((0.5,)) == [(7, 5), (16, 10)]
    # A plan that frees nothing has no stopping points; one whose last move completes it, no repeat.
    assert Plan("free-gpus", (mv(0),), metrics, metrics, (), 0.0).stopping_points() == []
    assert Plan("free-gpus", (mv(0, 1),), metrics, metrics, (), 0.0).stopping_points() == [(1, 1)]


def test_the_shipped_example_front_loads_its_gain() -> None:
    nodes, pods, _ = load_snapshot(resolve_snapshot("example"))
    p = plan(build_state(nodes, pods))
    points = p.stopping_points()
    assert points[-1] == (len(p.moves), p.gpus_freed)
    # Cheapest frees first: half the gain in under a third of the moves (49 frees 49 on 2026-12-03).
    half = next(n for n, k in points if k >= p.gpus_freed / 2)
    assert half <= len(p.moves) / 3
