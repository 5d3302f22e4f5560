"""Cluster state (getNodesUsage), gpuDevices targets, fragmentation metrics and snapshots."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_place_core import annotations as ann
from hami_place_core.fragmentation import (
    TaskType,
    WorkloadMix,
    cluster_metrics,
    free_share,
    mix_from_state,
    task_fragment,
)
from hami_place_core.requests import GpuRequest
from hami_place_core.snapshot import SnapshotError, load_snapshot, make_snapshot, state_from_snapshot
from hami_place_core.state import build_state, delete_node, remove_pod, upsert_node, upsert_pod
from hami_place_core.targets import TargetError, parse_targets, resolve
from testbed.data.gpu_nodes import V100_32G, NodeSpec
from testbed.hami.hami_pods import allocation_annotations, hami_pod

N1 = NodeSpec("n1", gpus=4)
N2 = NodeSpec("n2", gpus=2, model=V100_32G)


def ready(manifest: dict) -> dict:
    manifest["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return manifest


def u(spec: NodeSpec, i: int) -> str:
    return spec.gpu_uuid(i)


def sample_cluster():
    nodes = [ready(N1.manifest()), ready(N2.manifest())]
    pods = [
        hami_pod("a", "ns", "n1", [(u(N1, 0), 20480, 25)]),
        hami_pod("b", "ns", "n1", [(u(N1, 0), 20480, 25)]),
        hami_pod("c", "ns", "n1", [(u(N1, 1), 81920, 100)]),
        hami_pod("d", "ns", "n2", [(u(N2, 0), 8192, 0), (u(N2, 1), 8192, 0)]),
        hami_pod("done", "ns", "n1", [(u(N1, 2), 81920, 100)], phase="Succeeded"),  # HAMi ignores finished pods
        {"metadata": {"name": "plain", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}},
    ]
    return nodes, pods


def test_usage_is_rebuilt_like_get_nodes_usage() -> None:
    state = build_state(*sample_cluster())
    n1 = state.nodes["n1"]
    assert [g.index for g in n1.devices] == [0, 1, 2, 3]
    assert (n1.usage[u(N1, 0)].used, n1.usage[u(N1, 0)].usedmem, n1.usage[u(N1, 0)].usedcores) == (2, 40960, 50)
    assert n1.usage[u(N1, 1)].used == 1 and n1.usage[u(N1, 2)].used == 0
    assert sorted(n1.pods[u(N1, 0)]) == ["ns/a", "ns/b"]
    assert set(state.pods) == {"ns/a", "ns/b", "ns/c", "ns/d"}
    assert state.problems == {}
    removed = remove_pod(state, "ns/a")
    assert removed is not None and n1.usage[u(N1, 0)].used == 1 and n1.pods[u(N1, 0)] == ["ns/b"]


def test_init_containers_are_collapsed_v210() -> None:
    node = ready(N1.manifest())
    g = u(N1, 0)
    pod = hami_pod("p", "ns", "n1", [])
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    pod["spec"]["containers"].append({"name": "side"})
    # v2.9+: init segment first; app containers 3000+2000 on the same GPU; init peak 6000
    pod["metadata"]["annotations"].update(
        allocation_annotations("n1", [[(g, 6000, 50)], [(g, 3000, 10)], [(g, 2000, 10)]])
    )
    state = build_state([node], [pod])
    usage = state.nodes["n1"].usage[g]
    assert (usage.used, usage.usedmem, usage.usedcores) == (2, 6000, 50)


def test_segments_of_gpu_containers_only_line_up_with_their_containers() -> None:
    # HAMi v2.10 writes a segment only for containers that got GPUs (pkg/scheduler/score.go
    # allocateAppContainers, pkg/device/nvidia/device.go PatchAnnotations): [GPU, sidecar, GPU]
    # gets two segments, and an init container without GPUs none.
    node = ready(N1.manifest())
    g0, g1 = u(N1, 0), u(N1, 1)
    pod = hami_pod("p", "ns", "n1", [])
    gpu = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}}
    pod["spec"]["initContainers"] = [{"name": "init"}]
    pod["spec"]["containers"] = [{"name": "a", "resources": gpu}, {"name": "side"}, {"name": "b", "resources": gpu}]
    pod["metadata"]["annotations"].update(allocation_annotations("n1", [[(g0, 1000, 10)], [(g1, 1000, 10)]]))
    state = build_state([node], [pod])
    assert state.problems == {}
    assert state.pods["ns/p"].containers == ((g0,), (), (g1,))
    # the older form, one segment per container (empty ones included), still reads the same
    pod["metadata"]["annotations"].update(allocation_annotations("n1", [[], [(g0, 1000, 10)], [], [(g1, 1000, 10)]]))
    again = build_state([node], [pod])
    assert again.problems == {} and again.pods["ns/p"].containers == ((g0,), (), (g1,))


def test_bad_pod_annotations_are_problems_not_crashes() -> None:
    nodes = [ready(N1.manifest())]
    bad = hami_pod("bad", "ns", "n1", [])
    bad["metadata"]["annotations"][ann.POD_DEVICES_ALLOCATED] = "GPU-x,NVIDIA,zz,0:;"
    ghost = hami_pod("ghost", "ns", "n1", [("GPU-not-there", 1, 0)])
    elsewhere = hami_pod("elsewhere", "ns", "n9", [("GPU-y", 1, 0)])
    state = build_state(nodes, [bad, ghost, elsewhere])
    assert state.problem_lines() == [
        "pod ns/bad: container 0: device entry 'GPU-x,NVIDIA,zz,0': memory or cores: strconv.ParseInt: "
        "parsing 'zz': invalid syntax",
        "pod ns/elsewhere: allocated on unknown node n9",
        "pod ns/ghost: GPU GPU-not-there is not registered on node n1",
    ]


def test_garbage_node_is_unparseable_and_others_still_work() -> None:
    garbage = ready(NodeSpec("broken").manifest())
    garbage["metadata"]["annotations"][ann.NODE_REGISTER] = "[{{"
    state = build_state([garbage, ready(N1.manifest())], [])
    assert not state.nodes["broken"].parseable
    assert state.nodes["broken"].error.startswith("register annotation is not valid JSON")
    assert len(state.nodes["n1"].devices) == 4
    metrics = cluster_metrics(state, WorkloadMix.from_tasks([]))
    assert metrics.unparseable_nodes == ["broken"] and metrics.total.gpus == 4


# ---- targets --------------------------------------------------------------------------------------
def test_targets_parse_and_resolve_by_index_not_position() -> None:
    spec = NodeSpec("n", gpus=3)
    manifest = ready(spec.manifest())
    devices = list(reversed(spec.devices()))  # arbitrary order, as the device plugin writes it
    manifest["metadata"]["annotations"][ann.NODE_REGISTER] = ann.encode_register_json(devices)
    node = build_state([manifest], []).nodes["n"]
    t = parse_targets(["gpu-2/40", "gpu-0/40"])
    assert [g.uuid for g in resolve(t, node)] == [spec.gpu_uuid(2), spec.gpu_uuid(0)]
    assert t.resources() == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem-percentage": "40",
        "nvidia.com/gpucores": "40",
    }
    assert parse_targets(["gpu-1"]).resources() == {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "gpuDevices must list 1 to 16 entries"),
        (["gpu-0"] * 17, "gpuDevices has 17 entries; at most 16 are allowed"),
        (["gpu-x"], "gpuDevices entry 'gpu-x' is not gpu-N or gpu-N/P"),
        (["gpu-0/0"], "is not gpu-N or gpu-N/P"),
        (["gpu-0/101"], "is not gpu-N or gpu-N/P"),
        (["gpu-01"], "is not gpu-N or gpu-N/P"),
        ([5], "gpuDevices entry 5 must be a string"),
        (["gpu-1", "gpu-1"], "gpuDevices names gpu-1 twice"),
        (["gpu-0/50", "gpu-1/30"], "must all share one percentage"),
        (["gpu-0", "gpu-1/30"], "must all share one percentage"),
    ],
)
def test_bad_targets(entries, message) -> None:
    with pytest.raises(TargetError, match=re.escape(message)):
        parse_targets(entries)


def test_resolve_errors_are_specific() -> None:
    node = build_state([ready(N2.manifest())], []).nodes["n2"]
    with pytest.raises(TargetError, match=r"node n2 has no GPU with index 7 \(it has: 0, 1\)"):
        resolve(parse_targets(["gpu-7"]), node)
    legacy = ready(NodeSpec("old").manifest())
    legacy["metadata"]["annotations"][ann.NODE_REGISTER] = ann.encode_register_legacy(NodeSpec("old").devices(), 7)
    with pytest.raises(TargetError, match=r"≤v2.4 format, which has no GPU index"):
        resolve(parse_targets(["gpu-0"]), build_state([legacy], []).nodes["old"])


# ---- fragmentation -------------------------------------------------------------------------------
def test_free_and_stranded_capacity() -> None:
    state = build_state(*sample_cluster())
    mix = WorkloadMix.from_tasks([TaskType(GpuRequest(1, 0, 100, 100))])
    m = cluster_metrics(state, mix)
    n1 = m.nodes["n1"]
    # GPU0: 2 pods with 25%+25% (memory and cores) -> 0.5 free, stranded; GPU1: full; GPU2, GPU3: whole
    assert (n1.whole_free, n1.in_use) == (2, 2)
    assert n1.free == pytest.approx(2.5) and n1.stranded == pytest.approx(0.5)
    # whole-GPU tasks fit n1 (2 free GPUs): only the half-used GPU0 is fragment
    assert n1.fgd == pytest.approx(0.5)
    n2 = m.nodes["n2"]
    # pod d shares both V100s (8 GiB of 32 each, no cores): nothing whole is free, all 1.5 GPUs are fragment
    assert n2.whole_free == 0 and n2.stranded == pytest.approx(1.5) and n2.fgd == pytest.approx(1.5)
    assert m.total.whole_free == 2 and m.fragmentation_rate == pytest.approx(2.0 / 4.0)


def test_fgd_uses_the_running_mix_by_default() -> None:
    state = build_state(*sample_cluster())
    mix = mix_from_state(state)
    assert abs(sum(p for _, p in mix.tasks) - 1) < 1e-9
    # a,b (20480MiB,25) are the most popular task type
    top, p = mix.tasks[0]
    assert top.request == GpuRequest(1, 20480, 101, 25) and p == pytest.approx(0.5)


def test_task_that_cannot_run_makes_all_free_capacity_fragment() -> None:
    state = build_state(*sample_cluster())
    four_gpus = TaskType(GpuRequest(4, 0, 100, 100))
    assert task_fragment(state.nodes["n1"], four_gpus) == pytest.approx(2.5)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 100), st.integers(0, 100)), max_size=12))
def test_metrics_are_bounded_and_consistent(placements) -> None:
    spec = NodeSpec("p", gpus=4)
    pods = [
        hami_pod(f"p{i}", "ns", "p", [(spec.gpu_uuid(g), 819 * pct, cores)])
        for i, (g, pct, cores) in enumerate(placements)
    ]
    state = build_state([ready(spec.manifest())], pods)
    m = cluster_metrics(state, mix_from_state(state))
    t = m.total
    assert 0 <= t.stranded <= t.free + 1e-9 and 0 <= t.fgd <= t.free + 1e-9
    assert t.whole_free <= t.healthy and t.free <= t.healthy + 1e-9
    n = state.nodes["p"]
    assert t.free == pytest.approx(sum(free_share(g, n.usage[g.uuid]) for g in n.devices))


# ---- snapshot ---------------------------------------------------------------------------------
def test_snapshot_round_trip(tmp_path) -> None:
    nodes, pods = sample_cluster()
    state = build_state(nodes, pods)
    metrics = cluster_metrics(state, mix_from_state(state))
    snap = make_snapshot(nodes, pods, state, metrics, source="unit")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    again = state_from_snapshot(path)
    assert set(again.pods) == set(state.pods)
    for name, node in state.nodes.items():
        assert again.nodes[name].usage == node.usage
    assert snap["summary"]["cluster"]["wholeFree"] == 2
    gpu0 = snap["summary"]["nodes"][0]["gpus"][0]
    assert gpu0["pods"] == ["ns/a", "ns/b"] and gpu0["memory"] == {"used": 40960, "total": 81920}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ('{"kind": "Other"}', "is not a hami-place snapshot"),
        ('{"kind": "ClusterSnapshot", "apiVersion": "v0"}', "has apiVersion 'v0'"),
        ('{"kind": "ClusterSnapshot", "apiVersion": "hami-place.io/v1alpha1", "nodes": 1, "pods": []}', "must have"),
        (
            '{"kind": "ClusterSnapshot", "apiVersion": "hami-place.io/v1alpha1", "nodes": [1], "pods": []}',
            "every node and pod must be a JSON object",
        ),
    ],
)
def test_bad_snapshots(tmp_path, content, message) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=message):
        load_snapshot(path)
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        load_snapshot(tmp_path / "missing.json")


# ---- incremental maintenance (the agent's watch cache path) ------------------------------------------
def _usage_view(state):
    return {
        name: {
            g.uuid: (n.usage[g.uuid].used, n.usage[g.uuid].usedmem, n.usage[g.uuid].usedcores, sorted(n.pods[g.uuid]))
            for g in n.devices
        }
        for name, n in state.nodes.items()
    }


def test_node_arriving_after_its_pods_counts_them() -> None:
    state = build_state([], [hami_pod("a", "ns", "n1", [(u(N1, 0), 100, 10)])])
    assert state.problems == {"ns/a": "allocated on unknown node n1"}
    upsert_node(state, ready(N1.manifest()))
    assert state.problems == {} and state.nodes["n1"].usage[u(N1, 0)].usedmem == 100
    delete_node(state, "n1")
    assert "n1" not in state.nodes and state.problems == {"ns/a": "allocated on unknown node n1"}


@settings(max_examples=80)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["pod", "delpod", "node", "delnode"]),
            st.integers(0, 5),
            st.integers(0, 3),
            st.integers(1, 50),
        ),
        max_size=30,
    )
)
def test_incremental_updates_equal_a_fresh_build(ops) -> None:
    specs = {0: N1, 1: N2}
    state = build_state([], [])
    live_nodes: dict[str, dict] = {}
    live_pods: dict[str, dict] = {}
    for op, i, gpu, pct in ops:
        spec = specs[i % 2]
        if op == "pod":
            pod = hami_pod(f"p{i}", "ns", spec.name, [(spec.gpu_uuid(gpu % spec.gpus), 100 * pct, pct)])
            live_pods[f"ns/p{i}"] = pod
            upsert_pod(state, pod)
        elif op == "delpod":
            live_pods.pop(f"ns/p{i}", None)
            remove_pod(state, f"ns/p{i}")
        elif op == "node":
            node = ready(spec.manifest())
            if pct % 3 == 0:  # a heartbeat-like change that keeps the inventory
                node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            live_nodes[spec.name] = node
            upsert_node(state, node)
        else:
            live_nodes.pop(spec.name, None)
            delete_node(state, spec.name)
    fresh = build_state(list(live_nodes.values()), list(live_pods.values()))
    assert _usage_view(state) == _usage_view(fresh)
    assert state.problems == fresh.problems
    assert {n: s.ready for n, s in state.nodes.items()} == {n: s.ready for n, s in fresh.nodes.items()}
