"""The HAMi placement simulator: GPU and node policies, Fit, selectors, pods as HAMi leaves them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_place_core import annotations as ann
from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import GpuUsage
from hami_place_core.requests import GpuRequest, pod_request
from hami_place_core.state import build_state
from testbed.hami.simulate import (
    Placement,
    Simulator,
    apply,
    bind,
    evict,
    f32,
    fit_on_node,
    gpu_score,
    gpu_uuid,
    node_manifest,
    node_score,
    place,
    pod_manifest,
    schedulable,
)

A100 = ("NVIDIA A100-SXM4-80GB", 81920)
T4 = ("NVIDIA-Tesla T4", 15360)


def devices(node: str, n: int, model: tuple[str, int] = A100, numa_split: bool = False) -> list[GpuDevice]:
    return [
        GpuDevice(gpu_uuid(node, i), i, 10, model[1], 100, model[0], int(numa_split and i >= n // 2), health=True)
        for i in range(n)
    ]


def node(name: str, n: int = 4, model: tuple[str, int] = A100, **kw) -> dict:
    return node_manifest(name, devices(name, n, model, kw.pop("numa_split", False)), **kw)


def share(pct: int) -> dict[str, str]:
    return {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": str(pct), "nvidia.com/gpucores": str(pct)}


def whole(n: int = 1) -> dict[str, str]:
    return {"nvidia.com/gpu": str(n), "nvidia.com/gpucores": "100"}  # as HAMi's webhook leaves it


def pod(name: str, limits: dict[str, str], **kw) -> dict:
    return pod_manifest(name, "ns", limits, owner=("ReplicaSet", f"{name}-rs"), **kw)


def run(state, pods, node_policy="binpack", gpu_policy="spread"):
    """Place and apply each pod in turn; the bound pods (None where nothing fits)."""
    sim = Simulator(state, node_policy, gpu_policy)
    out = []
    for p in pods:
        placement = sim.place(pod_request(p))
        if placement is None:
            out.append(None)
            continue
        bound = bind(p, placement)
        sim.apply(bound)
        out.append(bound)
    return out


def usage_of(state) -> dict[str, tuple[int, int, int]]:
    return {u: (g.used, g.usedmem, g.usedcores) for n in state.nodes.values() for u, g in n.usage.items()}


# ---- GPU policy --------------------------------------------------------------------------------
def test_spread_takes_the_least_used_gpu_binpack_the_most_used() -> None:
    nodes = [node("n1", 4)]
    first = pod("a", share(30))
    for policy, expected in (("spread", {2, 3}), ("binpack", {1})):
        state = build_state(nodes, [])
        sim = Simulator(state, gpu_policy=policy)
        # Put a 30% share on GPU 1 by pinning it there.
        pinned = pod("pinned", share(30), annotations={ann.USE_GPU_UUID: gpu_uuid("n1", 1)})
        sim.apply(bind(pinned, sim.place(pod_request(pinned))))
        placement = sim.place(pod_request(first))
        (gpu,) = placement.uuids[0]
        index = state.nodes["n1"].by_uuid(gpu).index
        if policy == "spread":
            # Equal scores among the unused GPUs: HAMi's Fit walks its sorted list from the end,
            # so the highest index comes first.
            assert index == 3
        assert index in expected


def test_spread_fills_every_gpu_once_before_sharing() -> None:
    state = build_state([node("n1", 4)], [])
    bound = run(state, [pod(f"p{i}", share(20)) for i in range(4)])
    gpus = [b["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED].split(",")[0] for b in bound]
    assert len(set(gpus)) == 4
    assert gpus == [gpu_uuid("n1", i) for i in (3, 2, 1, 0)]


def test_binpack_gpu_policy_stacks_shares_on_one_gpu() -> None:
    state = build_state([node("n1", 4)], [])
    bound = run(state, [pod(f"p{i}", share(30)) for i in range(3)], gpu_policy="binpack")
    gpus = {b["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED].split(",")[0] for b in bound}
    assert len(gpus) == 1


def test_score_comes_first_and_numa_only_breaks_ties() -> None:
    # HAMi gpu_policy.go DeviceUsageList.Less (#1806): without numa-bind the score is the primary key
    # and NUMA (lower first) only breaks ties; Fit walks the sorted list from the end. The expectation
    # changed with the #1806 order: binpack no longer prefers NUMA 0 among equal scores.
    state = build_state([node("n1", 4, numa_split=True)], [])
    n = state.nodes["n1"]
    req = pod_request(pod("a", share(10)))
    for policy in ("spread", "binpack"):
        (first,) = fit_on_node(req, n, policy)[0]
        assert n.by_uuid(first.uuid).index == 3  # equal scores: higher NUMA, then the last registered
    used = {g.uuid: GpuUsage() for g in n.devices}
    used[gpu_uuid("n1", 0)] = GpuUsage(1, 8192, 10)  # a share on GPU 0, NUMA 0
    (spread,) = fit_on_node(req, n, "spread", used)[0]
    (binpack,) = fit_on_node(req, n, "binpack", used)[0]
    assert n.by_uuid(spread.uuid).index == 3
    assert n.by_uuid(binpack.uuid).index == 0  # the most used GPU, whatever its NUMA node


def test_the_sorted_order_carries_over_between_containers() -> None:
    # score.go fitInDevices sorts node.Devices in place per container; the next container's stable
    # sort starts from that order, not from the registration order.
    state = build_state([node("n1", 4, numa_split=True)], [])
    p = pod("x", share(10))
    p["spec"]["containers"] = [{"name": f"c{i}", "resources": {"limits": share(10)}} for i in range(3)]
    placement = fit_on_node(pod_request(p), state.nodes["n1"], "spread")
    indices = [state.nodes["n1"].by_uuid(c[0].uuid).index for c in placement]
    assert indices == [3, 2, 1]


def test_registration_order_breaks_remaining_ties() -> None:
    devs = devices("n1", 4)
    state = build_state([node_manifest("n1", [devs[2], devs[0], devs[3], devs[1]])], [])
    (first,) = fit_on_node(pod_request(pod("a", share(10))), state.nodes["n1"], "spread")[0]
    assert first.uuid == devs[1].uuid  # the last one registered, not the highest index


def test_only_nvidia_typed_gpus_are_offered_to_the_nvidia_fit() -> None:
    # score.go getNodeResources: devices whose type contains "nvidia" (any case)
    devs = [
        GpuDevice(gpu_uuid("n1", i), i, 10, 16384, 100, t, health=True) for i, t in enumerate(["Tesla T4", "nvidia-t4"])
    ]
    state = build_state([node_manifest("n1", devs)], [])
    assert fit_on_node(pod_request(pod("a", whole(2))), state.nodes["n1"]) is None
    ((only,),) = fit_on_node(pod_request(pod("a", whole(1))), state.nodes["n1"])
    assert only.uuid == devs[1].uuid


def test_gpu_score_is_hamis_formula() -> None:
    # gpu_policy.go ComputeScore: float32; the request counts only on a GPU registered with the
    # request's type "NVIDIA" (container.Type != ds.Device.Type skips it otherwise).
    gpu = GpuDevice("g", 0, 10, 1000, 100, "NVIDIA A100")
    used = GpuUsage(2, 400, 40)
    for req in (GpuRequest(1, 0, 30, 30), GpuRequest(2, 0, 100, 100), GpuRequest(1, 200, 101, 0)):
        assert gpu_score(req, gpu, used) == f32(10 * f32(f32(f32(0.2) + f32(0.4)) + f32(0.4)))
    exact = GpuDevice("g", 0, 10, 1000, 100, "NVIDIA")
    # one slot (not nums), cores, and the percentage of the GPU's memory (int64 division)
    assert gpu_score(GpuRequest(2, 0, 30, 30), exact, used) == pytest.approx(10 * (0.3 + 0.7 + 0.7), rel=1e-6)
    assert gpu_score(GpuRequest(1, 200, 101, 0), exact, used) == pytest.approx(10 * (0.3 + 0.4 + 0.6), rel=1e-6)
    assert gpu_score(GpuRequest(1, 0, 30, 30), GpuDevice("g", 0, 0, 1000, 100, "NVIDIA"), used) == 0.0


def test_scores_are_float32() -> None:
    gpu = GpuDevice("g", 0, 3, 3000, 100, "NVIDIA A100")
    score = gpu_score(GpuRequest(1, 0, 30, 30), gpu, GpuUsage(1, 1000, 33))
    assert score == f32(score) and score != 10 * (1 / 3 + 0.33 + 1 / 3)
    state = build_state([node("n1", 3)], [])
    state.nodes["n1"].usage[gpu_uuid("n1", 0)] = GpuUsage(1, 27306, 33)
    assert node_score(state.nodes["n1"]) == f32(node_score(state.nodes["n1"]))


# ---- node policy -------------------------------------------------------------------------------
def test_binpack_picks_the_most_used_node_spread_the_least() -> None:
    nodes = [node("a", 2), node("b", 2), node("c", 2)]
    base = build_state(nodes, [])
    busy = pod("busy", share(50), annotations={ann.USE_GPU_UUID: gpu_uuid("b", 0)})
    busy_bound = bind(busy, place(base, pod_request(busy)))
    state = build_state(nodes, [busy_bound])
    req = pod_request(pod("x", share(20)))
    assert place(state, req, node_policy="binpack").node == "b"
    assert place(state, req, node_policy="spread").node == "a"  # a and c tie: by name
    assert node_score(state.nodes["b"]) == pytest.approx(10 * (1 / 20 + 50 / 200 + 81920 * 0.5 / (2 * 81920)))


def test_binpack_skips_a_fuller_node_where_the_pod_does_not_fit() -> None:
    nodes = [node("a", 1), node("b", 1)]
    state = build_state(nodes, [])
    run(state, [pod("big", share(90), annotations={ann.USE_GPU_UUID: gpu_uuid("b", 0)})])
    assert place(state, pod_request(pod("x", share(20)))).node == "a"


def test_ties_are_broken_by_node_name_whatever_the_order() -> None:
    names = [f"n{i}" for i in range(6)]
    for order in itertools.islice(itertools.permutations(names), 0, 720, 97):
        shuffled = list(order)
        state = build_state([node(n, 2) for n in shuffled], [])
        assert place(state, pod_request(pod("x", whole()))).node == "n0"


def test_allowed_nodes_restrict_the_choice() -> None:
    state = build_state([node("a"), node("b")], [])
    assert place(state, pod_request(pod("x", whole())), allowed_nodes=["b"]).node == "b"
    assert place(state, pod_request(pod("x", whole())), allowed_nodes=["zzz"]) is None


def test_unschedulable_and_not_ready_nodes_are_skipped() -> None:
    cordoned = node("a")
    cordoned["spec"]["unschedulable"] = True
    state = build_state([cordoned, node("b", ready=False), node("c")], [])
    assert not schedulable(state.nodes["a"]) and not schedulable(state.nodes["b"])
    assert place(state, pod_request(pod("x", whole()))).node == "c"


# ---- Fit ---------------------------------------------------------------------------------------
def test_a_pod_that_fits_nowhere_gets_none() -> None:
    state = build_state([node("a", 2), node("b", 2)], [])
    assert place(state, pod_request(pod("x", whole(3)))) is None  # NodeInsufficientDevice
    run(state, [pod(f"s{i}", share(10)) for i in range(4)], node_policy="spread")  # one share on every GPU
    assert all(u.used == 1 for n in state.nodes.values() for u in n.usage.values())
    assert place(state, pod_request(pod("x", whole()))) is None  # exclusive needs an unshared GPU
    assert place(state, pod_request(pod("y", share(95)))) is None  # not enough memory left anywhere
    assert place(state, pod_request(pod("z", share(80)))) is not None


def test_whole_gpu_requests_are_exclusive_and_multi_gpu_takes_distinct_gpus() -> None:
    state = build_state([node("a", 4)], [])
    (b,) = run(state, [pod("x", whole(3))])
    uuids = [e.split(",")[0] for e in b["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED].rstrip(":;").split(":")]
    assert len(set(uuids)) == 3
    assert all(state.nodes["a"].usage[u] == GpuUsage(1, 81920, 100) for u in uuids)
    assert place(state, pod_request(pod("y", whole(2)))) is None
    assert place(state, pod_request(pod("y", whole(1)))) is not None


def test_type_selectors_are_respected() -> None:
    nodes = [node("a100", 2, A100), node("t4", 2, T4)]
    state = build_state(nodes, [])
    run(state, [pod("busy", share(50), annotations={ann.USE_GPU_TYPE: "A100"})])  # binpack now prefers a100
    only_t4 = pod("x", share(20), annotations={ann.USE_GPU_TYPE: "NVIDIA-Tesla T4"})
    assert place(state, pod_request(only_t4)).node == "t4"
    no_a100 = pod("y", share(20), annotations={ann.NOUSE_GPU_TYPE: "a100"})
    assert place(state, pod_request(no_a100)).node == "t4"
    assert place(state, pod_request(pod("z", share(20)))).node == "a100"
    nothing = pod("w", share(20), annotations={ann.USE_GPU_TYPE: "H100"})
    assert place(state, pod_request(nothing)) is None


def test_containers_accumulate_usage_and_keep_their_positions() -> None:
    state = build_state([node("a", 2)], [])
    p = pod("x", share(60))
    p["spec"]["containers"] = [
        {"name": "c1", "resources": {"limits": share(60)}},
        {"name": "sidecar"},
        {"name": "c2", "resources": {"limits": share(60)}},
    ]
    placement = place(state, pod_request(p))
    assert [len(c) for c in placement.containers] == [1, 0, 1]
    assert placement.uuids[0] != placement.uuids[2]  # 60% + 60% do not fit on one GPU
    bound = bind(p, placement)
    # HAMi v2.10 writes segments only for the containers that got GPUs (the expectation was 3
    # segments, with an empty one for the sidecar, which HAMi does not write)
    assert bound["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED].count(";") == 2
    alloc = apply(state, bound)
    assert state.nodes["a"].usage[placement.uuids[0][0]].usedcores == 60
    assert alloc.containers == placement.uuids and state.problems == {}


def test_unsupported_inputs_are_refused() -> None:
    state = build_state([node("a")], [])
    with pytest.raises(ValueError, match="node_policy"):
        place(state, pod_request(pod("x", whole())), node_policy="topology")  # type: ignore[arg-type]
    p = pod("x", whole())
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": whole()}}]
    with pytest.raises(NotImplementedError):
        place(state, pod_request(p))
    assert place(state, pod_request(pod("cpu", {"cpu": "1"}))) is None
    other = Placement("a", ((), ()), 0.0)
    with pytest.raises(ValueError, match="containers"):
        bind(pod("x", whole()), other)


# ---- pods as HAMi leaves them, round trips -----------------------------------------------------
def test_bound_pod_looks_like_hamis() -> None:
    state = build_state([node("a", 2)], [])
    p = pod("x", share(25), requests={"cpu": "2", "memory": "4Gi"}, labels={"app": "web"})
    assert p["status"]["phase"] == "Pending" and "nodeName" not in p["spec"]
    placement = place(state, pod_request(p))
    bound = bind(p, placement, vgpu_time=1700000000)
    a = bound["metadata"]["annotations"]
    assert a[ann.POD_VGPU_NODE] == "a" == bound["spec"]["nodeName"]
    assert a[ann.POD_DEVICES_ALLOCATED] == a[ann.POD_DEVICES_TO_ALLOCATE] == placement.encoded
    assert a[ann.POD_DEVICES_ALLOCATED] == f"{placement.uuids[0][0]},NVIDIA,20480,25:;"
    assert a[ann.POD_BIND_PHASE] == "success" and a[ann.POD_VGPU_TIME] == "1700000000"
    assert bound["status"]["phase"] == "Running"
    assert bound["spec"]["containers"][0]["resources"]["limits"] == share(25)
    assert p["status"]["phase"] == "Pending"  # bind copies
    alloc = apply(state, bound)
    assert (alloc.owner_kind, alloc.owner_name, alloc.labels) == ("ReplicaSet", "x-rs", {"app": "web"})
    with pytest.raises(ValueError, match="already"):
        apply(state, bound)
    with pytest.raises(ValueError, match="not bound"):
        apply(state, p)


def test_usage_after_n_pods_equals_build_state_of_the_pods() -> None:
    nodes = [node("a", 4), node("b", 2, T4), node("c", 8)]
    pods = []
    for i in range(60):
        limits = whole((1, 2, 1, 4)[i % 4]) if i % 10 < 2 else share((10, 25, 30, 47, 50, 81)[(i * 7) % 6])
        annotations = {ann.USE_GPU_TYPE: "T4"} if i % 10 == 9 else None
        pods.append(pod(f"p{i}", limits, annotations=annotations))
    for node_policy in ("binpack", "spread"):
        for gpu_policy in ("binpack", "spread"):
            state = build_state(nodes, [])
            bound = [b for b in run(state, pods, node_policy, gpu_policy) if b is not None]
            assert 15 < len(bound) < len(pods), len(bound)  # some fit, the cluster fills up
            rebuilt = build_state(nodes, bound)
            assert usage_of(rebuilt) == usage_of(state)
            assert not rebuilt.problems
            for n in state.nodes.values():
                for g in n.devices:
                    u = n.usage[g.uuid]
                    assert u.used <= g.count and u.usedmem <= g.devmem and u.usedcores <= g.devcore


def test_evict_gives_the_shares_back() -> None:
    state = build_state([node("a", 2)], [])
    before = usage_of(state)
    sim = Simulator(state)
    bound = run(state, [pod("x", share(40)), pod("y", whole())])
    sim.invalidate()
    assert usage_of(state) != before
    for b in bound:
        assert sim.evict(f"ns/{b['metadata']['name']}") is not None
    assert usage_of(state) == before
    assert evict(state, "ns/x") is None


def test_same_input_same_output() -> None:
    nodes = [node(f"n{i}", 4) for i in range(5)] + [node(f"t{i}", 2, T4) for i in range(3)]
    pods = [pod(f"p{i}", share(10 + (i * 37) % 80) if i % 3 else whole(1 + i % 2)) for i in range(40)]
    first = run(build_state(nodes, []), pods)
    second = run(build_state(list(reversed(nodes)), []), pods)
    assert first == second


# ---- the incremental simulator picks what an exhaustive search picks ---------------------------
def _exhaustive(state, request, node_policy, gpu_policy):
    best = None
    for name, n in state.nodes.items():
        if not schedulable(n):
            continue
        devs = fit_on_node(request, n, gpu_policy)
        if devs is None:
            continue
        key = (-node_score(n) if node_policy == "binpack" else node_score(n), name)
        if best is None or key < best[0]:
            best = (key, name, devs)
    return None if best is None else (best[1], best[2])


ops = st.lists(
    st.tuples(
        st.sampled_from(["place", "place", "place", "evict"]),
        st.sampled_from([share(10), share(33), share(50), share(81), whole(1), whole(2)]),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops, st.sampled_from(["binpack", "spread"]), st.sampled_from(["binpack", "spread"]))
def test_simulator_matches_exhaustive_search(ops, node_policy, gpu_policy) -> None:
    nodes = [node("a", 2), node("b", 4), node("c", 2, T4), node("d", 1)]
    state = build_state(nodes, [])
    sim = Simulator(state, node_policy, gpu_policy)
    bound: dict[str, dict] = {}
    for i, (op, limits, r) in enumerate(ops):
        if op == "evict":
            if bound:
                keys = sorted(bound)
                key = keys[r % len(keys)]
                sim.evict(key)
                del bound[key]
            continue
        p = pod(f"p{i}", limits)
        req = pod_request(p)
        got = sim.place(req)
        expected = _exhaustive(state, req, node_policy, gpu_policy)
        assert (None if got is None else (got.node, got.containers)) == expected
        if got is not None:
            bound[f"ns/p{i}"] = bind(p, got)
            sim.apply(bound[f"ns/p{i}"])
    assert usage_of(state) == usage_of(build_state(nodes, list(bound.values())))
