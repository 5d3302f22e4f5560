"""Making room for one pod (planning/room/): fewest moves, the GPUs named, every constraint,
the binding constraint when impossible, limits, and the --for-request parser. Pure logic."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from hami_place_core import annotations as ann
from hami_place_core.node_resources import Resources
from hami_place_core.planning import PlanOptions, check_moves
from hami_place_core.planning.room import RoomPlan, RoomRequest, make_room, parse_room_request
from hami_place_core.state import ClusterState, build_state
from testbed.hami.simulate import gpu_uuid, pod_manifest
from tests.planner_fixtures import T4, node, pod, replay


def state_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> ClusterState:
    return build_state(nodes, pods)


def with_cpu(manifest: dict[str, Any], cpu: str) -> dict[str, Any]:
    manifest["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return manifest


def assert_fits_after(state: ClusterState, plan: RoomPlan) -> None:
    """The moves replay valid step by step, and afterwards the pod's GPUs pass HAMi's Fit."""
    from hami_place_core.fit import gpu_fit_reason
    from hami_place_core.planning import apply_moves

    assert plan.ok, plan.reason
    replay(state, plan.moves)
    after = apply_moves(state, plan.moves)
    n = after.nodes[plan.node or ""]
    assert len(plan.gpus) == plan.request.gpus
    for i, uuid in zip(plan.gpus, plan.uuids, strict=True):
        d = n.gpu(i)
        assert d is not None and d.uuid == uuid
        assert gpu_fit_reason(plan.request.gpu, d, n.usage[uuid], plan.request.selectors, n.cordoned) is None
    free = after.free_resources(n.name)
    assert free is None or free.covers(plan.request.resources)


def scattered() -> ClusterState:
    # n1: 20%, 30%, 60%, empty. n2: 50%, 50%. Nowhere are two GPUs free for a 2-GPU pod.
    # Each node needs one move; n1 comes first by name, and there the largest pod that can go
    # (the 60%, next to the 30%: best fit) goes first, leaving GPUs 2 and 3 free.
    return state_of(
        [node("n1", 4), node("n2", 2)],
        [
            pod("a", "n1", (0,), 20),
            pod("b", "n1", (1,), 30),
            pod("c", "n1", (2,), 60),
            pod("d", "n2", (0,), 50),
            pod("e", "n2", (1,), 50),
        ],
    )


def test_a_two_gpu_pod_with_scattered_free_capacity_gets_the_fewest_moves_and_named_gpus() -> None:
    s = scattered()
    r = make_room(s, parse_room_request("gpus=2"))
    assert [(m.pod, m.from_node, m.from_gpus, m.to_node, m.to_gpus) for m in r.moves] == [
        ("ns/c", "n1", (2,), "n1", (1,))
    ]
    assert (r.node, r.gpus, r.uuids) == ("n1", (2, 3), (gpu_uuid("n1", 2), gpu_uuid("n1", 3)))
    assert r.moves[0].reason == "make room for request on n1" and r.reason == ""
    assert_fits_after(s, r)
    assert r.as_dict()["gpus"] == [2, 3] and r.as_dict()["fits"] is True


def test_two_moves_when_no_node_can_do_it_with_one() -> None:
    s = state_of(
        [node("n1", 2), node("n2", 2)],
        [pod("a", "n1", (0,), 30), pod("c", "n1", (1,), 50), pod("d", "n2", (0,), 40), pod("b", "n2", (1,), 30)],
    )
    r = make_room(s, parse_room_request("gpus=2"))
    # both nodes need both pods out (2 moves); n2's pods are 70% of compute against n1's 80%
    assert (len(r.moves), r.node, r.gpus) == (2, "n2", (0, 1))
    assert sorted(m.pod for m in r.moves) == ["ns/b", "ns/d"]
    assert_fits_after(s, r)


def test_a_pod_that_already_fits_needs_no_move() -> None:
    s = state_of([node("n1", 2), node("n2", 2)], [pod("a", "n1", (0,), 30)])
    r = make_room(s, parse_room_request("gpus=2"))
    assert (r.moves, r.node, r.gpus) == ((), "n2", (0, 1))
    # a sharing request fits next to a: the first node by name
    r = make_room(s, parse_room_request("gpus=2,gpumem-percentage=50,gpucores=50"))
    assert (r.moves, r.node, r.gpus) == ((), "n1", (0, 1))


def test_partial_room_moves_only_some_pods_of_a_gpu() -> None:
    # GPU0 holds 40% + 30% + 20%: a 50% request needs only the 40% (or 30% + 20%) gone: one move.
    s = state_of(
        [node("n1", 2)],
        [pod("a", "n1", (0,), 40), pod("b", "n1", (0,), 30), pod("c", "n1", (0,), 20), pod("d", "n1", (1,), 55)],
    )
    r = make_room(s, parse_room_request("gpus=1,gpumem-percentage=50,gpucores=50"))
    assert len(r.moves) == 1 and r.gpus == (0,) and r.node == "n1"
    assert r.moves[0].pod == "ns/a" and r.moves[0].to_gpus == (1,)
    assert_fits_after(s, r)


def test_node_selector_is_honoured_and_a_selector_no_node_matches_is_the_reason() -> None:
    s = state_of(
        [node("n1", 2, labels={"zone": "a"}), node("n2", 3, labels={"zone": "b"})],
        [pod("a", "n2", (0,), 30), pod("b", "n2", (1,), 30)],
    )
    assert make_room(s, parse_room_request("gpus=2")).moves == ()
    r = make_room(s, parse_room_request("gpus=2,node-selector=zone=b"))
    assert (len(r.moves), r.node) == (1, "n2")
    assert_fits_after(s, r)
    r = make_room(s, parse_room_request("gpus=2,node-selector=zone=c"))
    assert not r.ok and r.moves == ()
    assert r.reason == "no node matches the pod's node selector (zone=c) among the schedulable GPU nodes"


def test_required_node_affinity_is_honoured() -> None:
    s = state_of([node("n1", 2), node("n2", 3)], [pod("a", "n2", (0,), 30), pod("b", "n2", (1,), 30)])
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]
    req = replace(
        parse_room_request("gpus=2"),
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
    )
    r = make_room(s, req)
    assert (len(r.moves), r.node) == (1, "n2")


def test_taints_keep_the_pod_off_unless_tolerated() -> None:
    taint = [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]
    s = state_of(
        [node("n1", 2, taints=taint), node("n2", 3)],
        [pod("a", "n2", (0,), 30), pod("b", "n2", (1,), 30)],
    )
    r = make_room(s, parse_room_request("gpus=2"))
    assert (len(r.moves), r.node) == (1, "n2")
    r = make_room(s, parse_room_request("gpus=2,toleration=gpu=x:NoSchedule"))
    assert (r.moves, r.node) == ((), "n1")
    only = state_of([node("n1", 2, taints=taint)], [])
    r = make_room(only, parse_room_request("gpus=2"))
    assert not r.ok and r.reason == "no node accepts the pod: taint gpu=x:NoSchedule is not tolerated (1 node)"


def test_gpu_type_and_uuid_selectors_are_honoured() -> None:
    s = state_of(
        [node("a100", 2), node("t4", 3, model=T4)],
        [pod("a", "t4", (0,), 30, T4[1]), pod("b", "t4", (1,), 30, T4[1])],
    )
    assert make_room(s, parse_room_request("gpus=2")).node == "a100"
    r = make_room(s, parse_room_request("gpus=2,type=T4"))
    assert (len(r.moves), r.node) == (1, "t4")
    assert_fits_after(s, r)
    r = make_room(s, parse_room_request("gpus=2,nouse-type=A100"))
    assert r.node == "t4"
    r = make_room(s, parse_room_request("gpus=4,type=T4"))
    assert r.reason == "GPU type T4 has only 3 usable GPUs on any eligible node (node t4); the pod asks for 4"
    # A type no GPU has: the types the cluster has are named (issue 40: `type=A100` on the example)
    r = make_room(s, parse_room_request("gpus=1,type=H100"))
    assert r.reason.startswith("GPU type H100 has only 0 usable GPUs on any eligible node; the pod asks for 1 ")
    assert r.reason.endswith(f"(GPU types here: {T4[0]} (3), NVIDIA A100-SXM4-80GB (2))"), r.reason
    r = make_room(s, parse_room_request(f"gpus=1,uuid={gpu_uuid('t4', 1)}"))
    assert (r.node, r.gpus, [m.pod for m in r.moves]) == ("t4", (1,), ["ns/b"])
    r = make_room(s, parse_room_request(f"gpus=2,nouse-uuid={gpu_uuid('a100', 0)}"))
    assert r.node == "t4"


def test_pods_that_may_not_move_are_the_binding_constraint() -> None:
    s = state_of(
        [node("n1", 2), node("n2", 2)],
        [
            pod("a", "n1", (0,), 30, owner=None),
            pod("b", "n1", (1,), 30),
            pod("c", "n2", (0,), 30, owner=("Job", "j")),
            pod("d", "n2", (1,), 30, namespace="kube-system"),
        ],
    )
    r = make_room(s, parse_room_request("gpus=2"))
    assert not r.ok and r.moves == ()
    assert r.reason.startswith("pods that may not move hold the GPUs: at most 1 GPUs of the 2 asked")
    assert "bare pod" in r.reason


def test_node_cpu_is_the_binding_constraint() -> None:
    s = state_of([node("n1", 2), node("n2", 2)], [pod("a", "n1", (0,), 30)])
    r = make_room(s, parse_room_request("gpus=2,cpu=100"))
    assert r.reason == "node CPU: the pod asks 100 cores, the most free after moves is 64 on node n1"


def test_node_cpu_room_is_made_by_moving_pods_off_the_node() -> None:
    # n1 has two free GPUs but 60 of its 64 cores go to pod a (on GPU 2); the pod asks 20 cores.
    # n2 has the room for a. One move: a leaves n1.
    s = state_of(
        [node("n1", 3), node("n2", 2)],
        [with_cpu(pod("a", "n1", (2,), 30), "60"), pod("b", "n2", (0,), 60), pod("c", "n2", (1,), 60)],
    )
    r = make_room(s, parse_room_request("gpus=2,cpu=20"))
    assert (r.node, r.gpus) == ("n1", (0, 1))
    assert [(m.pod, m.to_node) for m in r.moves] == [("ns/a", "n2")]
    assert_fits_after(s, r)


def test_max_moves_and_workload_budgets_are_limits_with_their_reason() -> None:
    s = state_of(
        [node("n1", 2), node("n2", 2)],
        [pod("a", "n1", (0,), 30), pod("c", "n1", (1,), 50), pod("d", "n2", (0,), 40), pod("b", "n2", (1,), 30)],
    )
    req = parse_room_request("gpus=2")
    r = make_room(s, req, PlanOptions(max_moves=1))
    assert not r.ok and r.reason == "node n2 has room for 2 GPUs only after 2 moves, over --max-moves 1"
    assert len(make_room(s, req, PlanOptions(max_moves=2)).moves) == 2
    with pytest.raises(ValueError, match="max_moves"):
        make_room(s, req, PlanOptions(max_moves=-1))
    # every pod in one ReplicaSet: one move per workload by default
    one = state_of(
        [node("n1", 2), node("n2", 2)],
        [
            pod(n, node_name, (g,), pct, owner=("ReplicaSet", "web"))
            for n, node_name, g, pct in (("a", "n1", 0, 30), ("c", "n1", 1, 50), ("d", "n2", 0, 40), ("b", "n2", 1, 30))
        ],
    )
    r = make_room(one, req)
    assert not r.ok and "over the workloads' disruption budgets" in r.reason
    assert "ns/ReplicaSet/web (2 moves, budget 1)" in r.reason
    r = make_room(one, req, PlanOptions(workload_limits={"ns/ReplicaSet/web": 2}))
    assert len(r.moves) == 2
    assert not check_moves(one, list(r.moves), PlanOptions(workload_limits={"ns/ReplicaSet/web": 2}))


def test_ejection_chain_makes_room_when_a_pod_fits_nowhere_directly() -> None:
    # Only n1 (zone=a) may take the pod, and its one GPU holds a 65% pod that fits nowhere: n2's
    # GPUs have 40% and 60% free. A chain: the 40% pod joins the 60% one, then the 65% takes its
    # GPU. Two moves, in that order.
    s = state_of(
        [node("n1", 1, labels={"zone": "a"}), node("n2", 2)],
        [pod("a", "n1", (0,), 65), pod("b", "n2", (0,), 60), pod("c", "n2", (1,), 40)],
    )
    r = make_room(s, parse_room_request("gpus=1,node-selector=zone=a"))
    assert (r.node, r.gpus) == ("n1", (0,))
    assert [(m.pod, m.to_node, m.to_gpus) for m in r.moves] == [("ns/c", "n2", (0,)), ("ns/a", "n2", (1,))]
    assert_fits_after(s, r)
    # without the chain's second move there is no room
    r = make_room(s, parse_room_request("gpus=1,node-selector=zone=a"), PlanOptions(max_moves=1))
    assert r.reason == "node n1 has room for 1 GPU only after 2 moves, over --max-moves 1"


def test_a_pod_that_fits_nowhere_bumps_a_larger_one_with_fewer_cpus() -> None:
    # p (40%, 8 CPUs) must leave n1's one GPU. n2's GPU has room only without q (70%, 2 CPUs);
    # n3 has an empty GPU but 4 CPUs, enough for q, not for p. An ejection chain moves only pods
    # smaller than the one placed; a bump moves q (larger) first.
    small = node("n3", 1)
    small["status"]["allocatable"]["cpu"] = "4"
    s = state_of(
        [node("n1", 1, labels={"zone": "a"}), node("n2", 1), small],
        [with_cpu(pod("p", "n1", (0,), 40), "8"), with_cpu(pod("q", "n2", (0,), 70), "2")],
    )
    r = make_room(s, parse_room_request("gpus=1,node-selector=zone=a"))
    assert (r.node, r.gpus) == ("n1", (0,))
    assert [(m.pod, m.to_node, m.to_gpus) for m in r.moves] == [("ns/q", "n3", (0,)), ("ns/p", "n2", (0,))]
    assert_fits_after(s, r)


def test_deterministic_and_independent_of_input_order() -> None:
    nodes = [node(f"n{i}", 4) for i in range(4)]
    rng = random.Random(3)  # noqa: S311 (test data)
    pods = [
        pod(f"p{i}-{g}", f"n{i}", (g,), rng.choice((20, 30, 45, 60)))
        for i in range(4)
        for g in range(4)
        if rng.random() < 0.8
    ]
    first = make_room(state_of(nodes, pods), parse_room_request("gpus=3"))
    assert first.ok
    for seed in range(3):
        rng = random.Random(seed)  # noqa: S311 (test data)
        n2, p2 = nodes[:], pods[:]
        rng.shuffle(n2)
        rng.shuffle(p2)
        again = make_room(state_of(n2, p2), parse_room_request("gpus=3"))
        assert (again.moves, again.node, again.gpus) == (first.moves, first.node, first.gpus)
    assert_fits_after(state_of(nodes, pods), first)


def test_matches_the_milp_fewest_moves_on_a_small_state() -> None:
    pytest.importorskip("highspy")
    from testbed.reference.room_milp import fewest_moves

    rng = random.Random(7)  # noqa: S311 (test data)
    nodes = [node(f"n{i}", 4) for i in range(5)]
    pods = [
        pod(f"p{i}-{g}-{k}", f"n{i}", (g,), pct)
        for i in range(5)
        for g in range(4)
        for k, pct in enumerate(rng.sample((10, 15, 20, 25, 30), rng.randint(1, 3)))
    ]
    s = state_of(nodes, pods)
    for n in (1, 2, 3):
        req = parse_room_request(f"gpus={n}")
        r = make_room(s, req)
        best = fewest_moves(s, req)
        assert best.proven and best.moves is not None
        assert r.ok and len(r.moves) == best.moves, (n, r.moves, best)
        assert_fits_after(s, r)


def test_the_state_is_not_modified() -> None:
    s = scattered()
    before = {u: (v.used, v.usedmem, v.usedcores) for n in s.nodes.values() for u, v in n.usage.items()}
    make_room(s, parse_room_request("gpus=2"))
    after = {u: (v.used, v.usedmem, v.usedcores) for n in s.nodes.values() for u, v in n.usage.items()}
    assert before == after


# ---- the request --------------------------------------------------------------------------------
def test_a_request_from_a_pending_pod() -> None:
    manifest = pod_manifest(
        "job",
        "team",
        {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "50"},
        requests={"cpu": "8", "memory": "32Gi"},
        annotations={ann.USE_GPU_TYPE: "A100", ann.NOUSE_GPU_UUID: "GPU-x"},
    )
    manifest["spec"]["nodeSelector"] = {"zone": "a"}
    manifest["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    manifest["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "x"}]}
    }
    req = RoomRequest.from_pod(manifest)
    assert req.name == "team/job"
    assert (req.gpu.nums, req.gpu.memreq, req.gpu.coresreq) == (2, 20000, 50)
    assert req.selectors.use_types == ("A100",) and req.selectors.nouse_uuids == ("GPU-x",)
    assert req.node_selector == {"zone": "a"} and req.tolerations == ({"key": "gpu", "operator": "Exists"},)
    assert req.resources == Resources(8000, 32 * 2**30, 1)
    assert req.affinity == {} and req.notes == ("required podAntiAffinity is not checked",)
    s = state_of([node("n1", 2, labels={"zone": "a"}), node("n2", 2)], [])
    assert make_room(s, req).node == "n1"


def test_a_pod_without_gpus_or_with_two_gpu_containers_is_refused() -> None:
    plain = pod_manifest("p", "ns", {"cpu": "1"})
    with pytest.raises(ValueError, match="asks for no GPU"):
        RoomRequest.from_pod(plain)
    two = pod_manifest("p", "ns", {"nvidia.com/gpu": "1"})
    two["spec"]["containers"].append(dict(two["spec"]["containers"][0], name="second"))
    with pytest.raises(ValueError, match="2 GPU containers"):
        RoomRequest.from_pod(two)


def test_the_request_string() -> None:
    r = parse_room_request("gpus=4,gpumem=20000,gpucores=50,type=A100,node-selector=k=v")
    assert (r.gpu.nums, r.gpu.memreq, r.gpu.coresreq) == (4, 20000, 50)
    assert r.selectors.use_types == ("A100",) and r.node_selector == {"k": "v"}
    # HAMi's defaults through its webhook: no memory means all of it, and then all the cores
    whole = parse_room_request("gpus=2")
    assert (whole.gpu.mem_percentage, whole.gpu.coresreq, whole.gpu.memreq) == (100, 100, 0)
    assert parse_room_request("gpus=1,gpumem-percentage=30").gpu.coresreq == 0
    many = parse_room_request(
        "gpus=1, type=A100, type=H800, nouse-uuid=GPU-a, node-selector=a=1, node-selector=b=2, "
        "toleration=gpu:NoSchedule, toleration=k=v, cpu=500m, memory=2Gi"
    )
    assert many.selectors.use_types == ("A100", "H800") and many.selectors.nouse_uuids == ("GPU-a",)
    assert many.node_selector == {"a": "1", "b": "2"}
    assert many.tolerations == (
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "k", "operator": "Equal", "value": "v"},
    )
    assert many.resources == Resources(500, 2 * 2**30, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty request: give at least gpus=N"),
        ("gpumem=100", "gpus=N is required (the number of GPUs the pod asks for)"),
        ("gpus=0", "gpus must be between 1 and 1024, got 0"),
        ("gpus=two", "gpus must be a whole number, got 'two'"),
        ("gpus=-1", "gpus must be a whole number, got '-1'"),
        ("gpus=2,gpus=3", "gpus given twice"),
        ("gpus=2,,type=A100", "empty item in 'gpus=2,,type=A100' (two commas in a row, or a trailing comma)"),
        ("gpus=2,", "empty item in 'gpus=2,' (two commas in a row, or a trailing comma)"),
        ("gpus", "item 'gpus' needs key=value"),
        ("gpus=2,type=", "item 'type=' needs key=value"),
        (
            "gpus=2,gpu=1",
            "unknown key 'gpu' (known: gpus, gpumem, gpumem-percentage, gpucores, type, nouse-type, "
            "uuid, nouse-uuid, node-selector, toleration, cpu, memory)",
        ),
        ("gpus=2,gpumem=100,gpumem-percentage=10", "give gpumem (MiB) or gpumem-percentage, not both"),
        ("gpus=2,gpumem-percentage=101", "gpumem-percentage must be between 1 and 100, got 101"),
        ("gpus=2,gpucores=150", "gpucores must be between 0 and 100, got 150"),
        ("gpus=2,node-selector=zone", "node-selector must be label=value, got 'zone'"),
        ("gpus=2,node-selector=a=1,node-selector=a=2", "node-selector asks a to equal both '1' and '2'"),
        (
            "gpus=2,toleration=k=v:Sometimes",
            "toleration must be key[=value][:NoSchedule|NoExecute|PreferNoSchedule], got 'k=v:Sometimes'",
        ),
        ("gpus=2,cpu=lots", "cpu must be a Kubernetes quantity (such as 8, 500m, 64Gi), got 'lots'"),
        ("gpus=2,memory=-1Gi", "memory must not be negative, got '-1Gi'"),
        ("gpus=2,cpu=1,cpu=2", "cpu given twice"),
    ],
)
def test_bad_request_strings_are_refused_precisely(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_room_request(text)
    assert str(err.value) == message
