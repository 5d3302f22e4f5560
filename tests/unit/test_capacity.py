"""Capacity as the demand sees it (issue 36 item 1): free nodes and room for k-GPU pods."""

from __future__ import annotations

import itertools

import pytest

from hami_place_core import capacity as cap
from hami_place_core.examples import resolve_snapshot
from hami_place_core.node_resources import Resources
from hami_place_core.requests import DeviceSelectors, GpuRequest
from hami_place_core.snapshot import state_from_snapshot
from hami_place_core.state import build_state
from tests.planner_fixtures import T4, node, pod


def _state(nodes, pods=()):
    return build_state(list(nodes), list(pods))


def test_the_example_before_any_plan_matches_the_figures_counted_by_hand() -> None:
    # Issue 36's table, counted from the snapshot's registers: 736 whole GPUs, 168 free nodes,
    # room for 352 2-GPU, 117 4-GPU and 56 8-GPU pods.
    state = state_from_snapshot(resolve_snapshot("example"))
    room = cap.room(state, cap.parse_demand("8x1,4x1,2x1,1x1"))
    assert (room.free_nodes, room.whole_gpus, room.pods) == (168, 736, (56, 117, 352, 736))
    assert sum(f for f, _, _ in room.groups.values()) == 168
    assert sum(w for _, w, _ in room.groups.values()) == 736


def test_a_free_node_is_one_whose_every_gpu_is_healthy_uncordoned_and_unused() -> None:
    nodes = [
        node("free", n=4),
        node("used", n=4),
        node("sick", n=4, unhealthy=(2,)),
        node("cordoned-gpu", n=4, cordoned=(0,)),
        node("cordoned", n=4, unschedulable=True),
        node("not-ready", n=4, ready=False),
    ]
    state = _state(nodes, [pod("p", "used", (3,), 30)])
    room = cap.room(state, cap.parse_demand("4x1"))
    assert room.free_nodes == 1
    assert room.pods == (1,)  # only "free" has 4 whole GPUs; the others lose one or are unschedulable
    assert room.whole_gpus == 4 + 3 + 3 + 3


def test_room_for_k_gpu_pods_counts_whole_blocks_on_one_node() -> None:
    # 8 GPUs with 3 used: five whole ones left hold one 4-GPU pod, two 2-GPU pods.
    state = _state([node("n", n=8)], [pod(f"p{i}", "n", (i,), 100) for i in range(3)])
    room = cap.room(state, cap.parse_demand("4x1,2x1,1x1,5x1,6x1"))
    assert dict(zip((i.gpus for i in cap.parse_demand("4x1,2x1,1x1,5x1,6x1").items), room.pods, strict=True)) == {
        6: 0,
        5: 1,
        4: 1,
        2: 2,
        1: 5,
    }


def test_shared_shapes_fit_on_partly_used_gpus_each_pod_on_distinct_gpus() -> None:
    # Two GPUs, one at 50%: a 2-GPU pod of 25% each fits twice (each pod on both GPUs), and a
    # 1-GPU 25% pod six times (2 + 4 copies).
    state = _state([node("n", n=2)], [pod("p", "n", (0,), 50)])
    quarter = GpuRequest(nums=1, mem_percentage=25, coresreq=25)
    two = cap.DemandItem(gpus=2, count=1, request=quarter)
    one = cap.DemandItem(gpus=1, count=1, request=quarter)
    room = cap.room(state, cap.Demand((two, one), "test"))
    assert room.pods == (2, 6)
    assert one.label == "1x1 (mem 25%, cores 25%)"


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_pods_fitting_is_the_largest_t_a_round_robin_places(k: int) -> None:
    # Brute force on small capacities: t pods fit iff some assignment puts each on k distinct GPUs.
    for caps in itertools.product(range(4), repeat=4):
        best = 0
        for t in range(1, 13):
            if _greedy_places(list(caps), k, t):
                best = t
        assert cap.pods_fitting(caps, k) == best, (caps, k)


def _greedy_places(caps: list[int], k: int, t: int) -> bool:
    left = list(caps)
    for _ in range(t):  # each pod takes the k GPUs with the most room left (optimal for equal pods)
        order = sorted(range(len(left)), key=lambda i: -left[i])[:k]
        if len(order) < k or any(left[i] <= 0 for i in order):
            return False
        for i in order:
            left[i] -= 1
    return True


def test_type_selectors_and_node_resources_bound_the_room() -> None:
    state = _state([node("a100", n=4), node("t4", n=4, model=T4)])
    t4_only = cap.DemandItem(gpus=1, count=1, selectors=DeviceSelectors(use_types=("T4",)))
    assert cap.room(state, cap.Demand((t4_only,), "test")).pods == (4,)
    state.nodes["a100"].allocatable = Resources(cpu=4000, memory=64 << 30, pods=110)
    heavy = cap.DemandItem(gpus=1, count=1, node_request=Resources(cpu=3000, memory=1 << 30, pods=1))
    room = cap.room(state, cap.Demand((heavy,), "test"))
    assert room.groups["NVIDIA A100-SXM4-80GB"][2] == (1,)  # CPU for one pod, GPUs for four
    assert room.groups["NVIDIA-Tesla T4"][2] == (4,)  # no allocatable stated: never refuses


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no pod shape"),
        ("8", "is not GPUSxPODS"),
        ("8x", "is not GPUSxPODS"),
        ("x2", "is not GPUSxPODS"),
        ("8x2,,4x1", "'' is not GPUSxPODS"),
        ("0x2", "1 to 64"),
        ("8x0", "1 to 64"),
        ("65x1", "1 to 64"),
        ("-1x2", "is not GPUSxPODS"),
        ("8x2;4x4", "is not GPUSxPODS"),
    ],
)
def test_a_demand_that_cannot_be_read_is_refused_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(cap.DemandError, match=message):
        cap.parse_demand(text)


def test_a_demand_reads_shapes_largest_first_and_adds_up_a_repeated_size() -> None:
    d = cap.parse_demand(" 1x50, 8x2 ,4x4,8x1")
    assert [(i.gpus, i.count) for i in d.items] == [(8, 3), (4, 4), (1, 50)]
    assert [i.label for i in d.items] == ["8x3", "4x4", "1x50"]


def test_the_running_mix_counts_the_gpu_sizes_pods_use() -> None:
    pods = [pod("a", "n", (0, 1), 100), pod("b", "n", (2,), 30), pod("c", "n", (3,), 100)]
    d = cap.running_demand(_state([node("n", n=4)], pods))
    assert d is not None and [(i.gpus, i.count) for i in d.items] == [(2, 1), (1, 2)]
    assert cap.running_demand(_state([node("n", n=4)])) is None


def test_as_dict_names_each_shape_with_what_is_wanted_and_what_fits() -> None:
    d = cap.parse_demand("2x3")
    out = cap.room(_state([node("n", n=4)]), d).as_dict(d)
    assert out["freeNodes"] == 1 and out["wholeGpus"] == 4
    assert out["room"] == [{"shape": "2x3", "gpus": 2, "wanted": 3, "fit": 2}]


def test_pending_pods_make_a_demand_of_their_own_shapes_counted() -> None:
    state = _state([node("n", n=4)], [pod("a", "n", (0, 1), 100), pod("b", "n", (2,), 30), pod("c", "n", (3,), 30)])
    shapes = [cap.item_of(a.request, Resources(cpu=1000, pods=1)) for a in state.pods.values()]
    d = cap.demand_of(shapes, "pending pods")
    assert d is not None and d.source == "pending pods"
    assert [(i.label, i.node_request) for i in d.items] == [
        ("2x1", Resources(cpu=1000, pods=1)),
        ("1x2 (mem 30%, cores 30%)", Resources(cpu=1000, pods=1)),
    ]
    assert cap.demand_of([None], "pending pods") is None


def test_pending_pods_are_read_from_their_manifests() -> None:
    waiting = [pod(f"w{i}", "", (0, 1), 100) for i in range(3)] + [pod("s", "", (0,), 30)]
    for p in waiting:
        p["spec"].pop("nodeName", None)
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2", "memory": "1Gi"}
    d = cap.pending_demand(waiting)
    assert d is not None and [(i.gpus, i.count) for i in d.items] == [(2, 3), (1, 1)]
    assert d.items[0].node_request == Resources(cpu=2000, memory=1 << 30, pods=1)
    assert cap.pending_demand([{"metadata": {"name": "cpu-only"}, "spec": {"containers": [{}]}}]) is None


def test_the_demand_is_the_one_given_else_what_waits_else_what_runs_else_one_gpu() -> None:
    running = _state([node("n", n=4)], [pod("a", "n", (0, 1), 100)])
    waiting = pod("w", "", (0, 1, 2, 3), 100)
    waiting["spec"].pop("nodeName", None)
    given = cap.parse_demand("8x1")
    assert cap.choose_demand(running, [waiting], given) is given
    assert cap.choose_demand(running, [waiting]).source == "pending pods"
    assert [i.gpus for i in cap.choose_demand(running, [waiting]).items] == [4]
    assert cap.choose_demand(running).source == "the running mix"
    assert cap.choose_demand(_state([node("n", n=4)])) is cap.NOTHING
