"""The openb trace replay: mapping, time semantics, invariants, snapshots, and the shipped example."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from hami_place_core import annotations as ann
from hami_place_core.examples import EXAMPLES, open_snapshot_text, resolve_snapshot
from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.requests import GpuRequest, pod_request
from hami_place_core.snapshot import load_snapshot, make_snapshot
from hami_place_core.state import build_state
from testbed.data import openb as ob
from tests.openb_fixtures import NODE_FIELDS, POD_FIELDS, synthetic, write_csv


def check_invariants(nodes: list[dict], pods: list[dict], trace_pods: dict[str, ob.TracePod]) -> None:
    state = build_state(nodes, pods)
    assert not state.problems
    for n in state.nodes.values():
        for g in n.devices:
            u = n.usage[g.uuid]
            assert 0 <= u.used <= g.count, (n.name, g.index, u)
            assert 0 <= u.usedmem <= g.devmem, (n.name, g.index, u)
            assert 0 <= u.usedcores <= g.devcore, (n.name, g.index, u)
            if any(state.pods[k].request.containers[0].coresreq == 100 for k in n.pods[g.uuid]):
                assert len(n.pods[g.uuid]) == 1  # exclusive
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    for alloc in state.pods.values():
        task = trace_pods[alloc.name]
        node = state.nodes[alloc.node]
        types = {node.by_uuid(u).type for c in alloc.containers for u in c}
        if task.gpu_spec:
            assert types <= {ob.MODELS[s].hami_type for s in task.gpu_spec}, (alloc.name, types)
        assert sum(len(c) for c in alloc.containers) == task.num_gpu
        cpu[alloc.node] = cpu.get(alloc.node, 0) + task.cpu_milli
        mem[alloc.node] = mem.get(alloc.node, 0) + task.memory_mib
    capacity = {n["metadata"]["name"]: n["status"]["allocatable"] for n in nodes}
    for name, used in cpu.items():
        assert used <= int(capacity[name]["cpu"]) * 1000
        assert mem[name] <= int(capacity[name]["memory"].removesuffix("Mi"))


# ---- mapping -----------------------------------------------------------------------------------
def test_model_table_and_hami_type_strings() -> None:
    assert ob.MODELS["T4"].hami_type == "NVIDIA-Tesla T4"
    assert ob.MODELS["A10"].hami_type == "NVIDIA A10"
    assert ob.MODELS["V100M32"].memory_mib == 32510
    assert {m for m, g in ob.MODELS.items() if g.assumed} == {"G1", "G2", "G3"}
    types = [g.hami_type for g in ob.MODELS.values()]
    # use-gputype matches by substring: no model's type may select another model
    for a in types:
        assert [b for b in types if a.upper() in b.upper()] == [a]


def test_tasks_map_to_hami_requests() -> None:
    base = dict(row=0, cpu_milli=1000, memory_mib=1024, qos="LS", creation=0, deletion=10)
    share = ob.TracePod(name="s", num_gpu=1, gpu_milli=470, gpu_spec=("V100M16", "V100M32"), **base)
    whole = ob.TracePod(name="w", num_gpu=1, gpu_milli=1000, gpu_spec=(), **base)
    multi = ob.TracePod(name="m", num_gpu=4, gpu_milli=1000, gpu_spec=(), **base)
    assert pod_request(ob.pod_object(share)).containers == (GpuRequest(1, 0, 47, 47),)
    assert pod_request(ob.pod_object(whole)).containers == (GpuRequest(1, 0, 100, 100),)
    assert pod_request(ob.pod_object(multi)).containers == (GpuRequest(4, 0, 100, 100),)
    p = ob.pod_object(share)
    assert p["metadata"]["annotations"][ann.USE_GPU_TYPE] == "NVIDIA-Tesla V100-SXM2-16GB,NVIDIA-Tesla V100-SXM2-32GB"
    assert p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert p["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1000m", "memory": "1024Mi"}
    assert ann.USE_GPU_TYPE not in ob.pod_object(whole)["metadata"]["annotations"]


def test_nodes_register_their_model() -> None:
    node = ob.TraceNode("n", 96000, 393216, 8, "G2")
    state = build_state([ob.node_object(node)], [])
    devs = state.nodes["n"].devices
    assert [d.index for d in devs] == list(range(8))
    assert {(d.type, d.devmem, d.count, d.devcore, d.health) for d in devs} == {
        ("NVIDIA A800-SXM4-80GB", 81920, 10, 100, True)
    }
    assert devs[0].uuid == ob.node_devices(node)[0].uuid  # deterministic


def test_a_trace_node_on_the_test_bed_registers_as_in_the_replay() -> None:
    # The simulator check (bench/hami_simulator_check.py) puts trace nodes on the test bed: HAMi
    # must read the same GPUs there as the replay's simulator, and kube-scheduler the same CPU/memory.
    node = ob.TraceNode("openb-node-0042", 96000, 393216, 8, "G2")
    on_bed, replayed = ob.node_spec(node).manifest(), ob.node_object(node)
    register = [n["metadata"]["annotations"][ann.NODE_REGISTER] for n in (on_bed, replayed)]
    assert register[0] == register[1]
    want, got = (build_state([n], ()).nodes[node.name] for n in (replayed, on_bed))
    assert (got.allocatable, got.devices) == (want.allocatable, want.devices)
    assert on_bed["status"]["allocatable"]["nvidia.com/gpu"] == replayed["status"]["allocatable"]["nvidia.com/gpu"]


def test_cut_is_a_fraction_or_seconds(tmp_path: Path) -> None:
    _, pods_csv = synthetic(tmp_path)
    pods = ob.load_pods(pods_csv)
    start, end = ob.time_span(pods)
    assert ob.resolve_cut(pods, 0.5) == start + round((end - start) * 0.5)
    assert ob.resolve_cut(pods, 1.0) == end
    assert ob.resolve_cut(pods, 700) == 700
    with pytest.raises(ValueError):
        ob.resolve_cut(pods, -1)


def test_lists_without_times_arrive_in_row_order_and_stay(tmp_path: Path) -> None:
    nodes = write_csv(tmp_path / "n.csv", NODE_FIELDS, [["n", 64000, 262144, 2, "T4"]])
    pods = write_csv(
        tmp_path / "p.csv",
        ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
        [["a", 1000, 1000, 1, 500], ["b", 1000, 1000, 1, 1000], ["c", 1000, 1000, 1, 1000]],
    )
    loaded = ob.load_pods(pods)
    assert [(p.creation, p.deletion) for p in loaded] == [(0, None), (1, None), (2, None)]
    _, out, stats = ob.replay(nodes, pods, 2)
    assert [p["status"]["phase"] for p in out] == ["Running", "Running", "Pending"]
    assert stats["pending"] == 1


def test_bad_csv_is_reported(tmp_path: Path) -> None:
    bad = write_csv(tmp_path / "n.csv", NODE_FIELDS, [["n", 1, 1, 1, "H100"]])
    with pytest.raises(ob.TraceError, match="unknown GPU model"):
        ob.load_nodes(bad)
    bad = write_csv(tmp_path / "p.csv", POD_FIELDS, [["p", "x", 1, 1, 1, "", "", "", 0, 1, 0]])
    with pytest.raises(ob.TraceError, match="cpu_milli"):
        ob.load_pods(bad)


# ---- replay semantics and invariants ------------------------------------------------------------
def test_presence_follows_creation_and_deletion(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    trace = {p.name: p for p in ob.load_pods(pods_csv)}
    r = ob.Replayer(ob.load_nodes(nodes_csv), list(trace.values()))
    for t in (0, 100, 300, 500, 700, 1000, 1400):
        r.advance(t)
        present = {p.name for p in trace.values() if p.num_gpu > 0 and p.creation <= t < (p.deletion or 0)}
        pods = r.pod_objects()
        assert {p["metadata"]["name"] for p in pods} == present, t
        assert r.stats.running + r.stats.pending == len(present)
        check_invariants(r.node_objects, pods, trace)
        assert usage(build_state(r.node_objects, pods)) == usage(r.state)
    assert r.stats.waited > 0 and r.stats.placed_after_waiting > 0  # the workload overflows at times
    assert r.stats.zero_length_skipped == 1
    with pytest.raises(ValueError, match="back in time"):
        r.advance(10)


def usage(state) -> dict[str, tuple[int, int, int]]:
    return {u: (g.used, g.usedmem, g.usedcores) for n in state.nodes.values() for u, g in n.usage.items()}


def test_waiting_task_runs_when_a_departure_frees_room(tmp_path: Path) -> None:
    nodes = write_csv(tmp_path / "n.csv", NODE_FIELDS, [["n", 64000, 262144, 1, "T4"]])
    pods = write_csv(
        tmp_path / "p.csv",
        POD_FIELDS,
        [
            ["a", 1000, 1024, 1, 1000, "", "LS", "Running", 0, 100, 0],
            ["b", 1000, 1024, 1, 1000, "", "LS", "Running", 10, 200, 10],
            ["c", 1000, 1024, 1, 300, "", "LS", "Running", 20, 50, 20],  # leaves while waiting
        ],
    )
    _, at50, s50 = ob.replay(nodes, pods, 50)
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in at50] == [("a", "Running"), ("b", "Pending")]
    assert s50["expiredPending"] == 1
    _, at150, s150 = ob.replay(nodes, pods, 150)
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in at150] == [("b", "Running")]
    assert at150[0]["metadata"]["annotations"][ann.POD_VGPU_TIME] == str(ob.TRACE_EPOCH + 100)
    assert s150["placedAfterWaiting"] == 1
    _, no_retry, _ = ob.replay(nodes, pods, 150, retry_pending=False)
    assert [p["status"]["phase"] for p in no_retry] == ["Pending"]


def test_cpu_and_memory_limit_the_nodes(tmp_path: Path) -> None:
    nodes = write_csv(tmp_path / "n.csv", NODE_FIELDS, [["n", 8000, 65536, 2, "T4"]])
    rows = [[f"p{i}", 5000, 1024, 1, 200, "", "LS", "Running", i, 100, i] for i in range(3)]
    pods = write_csv(tmp_path / "p.csv", POD_FIELDS, rows)
    _, _, stats = ob.replay(nodes, pods, 10)
    assert stats["running"] == 1 and stats["pending"] == 2
    _, _, stats = ob.replay(nodes, pods, 10, check_cpu_memory=False)
    assert stats["running"] == 3


def test_without_departures_everything_that_arrived_stays(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    _, pods, stats = ob.replay(nodes_csv, pods_csv, 1.0, departures=False)
    assert stats["departed"] == 0
    assert stats["running"] + stats["pending"] == stats["arrivals"] == len(pods)
    assert stats["arrivals"] == sum(1 for p in ob.load_pods(pods_csv) if p.num_gpu > 0)
    assert stats["pending"] > 0  # overflows: 120 tasks on 18 GPUs


def test_replay_is_deterministic(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    for kw in ({}, {"departures": False}, {"node_policy": "spread", "gpu_policy": "binpack"}):
        first = ob.replay(nodes_csv, pods_csv, 0.7, **kw)
        second = ob.replay(nodes_csv, pods_csv, 0.7, **kw)
        assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def replayed(nodes_csv: Path, pods_csv: Path, cut: float, **kw: object) -> tuple[list[dict], list[dict]]:
    nodes, pods, _ = ob.replay(nodes_csv, pods_csv, cut, **kw)  # type: ignore[arg-type]
    return nodes, pods


def test_seeded_departures_are_reproducible(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    first = replayed(nodes_csv, pods_csv, 0.8, departure_seed=1, departure_share=0.5)
    assert json.dumps(first, sort_keys=True) == json.dumps(
        replayed(nodes_csv, pods_csv, 0.8, departure_seed=1, departure_share=0.5), sort_keys=True
    )
    # The draw is per task name, not per list position or process (no hash()): fixed values.
    draws = [ob.keeps_departure(1, 0.5, f"pod-{i:04d}") for i in range(8)]
    assert draws == [ob.keeps_departure(1, 0.5, f"pod-{i:04d}") for i in range(8)]
    assert sum(ob.keeps_departure(7, 0.2, f"t{i}") for i in range(10_000)) in range(1_850, 2_150)


def test_different_departure_seeds_differ(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    one = ob.replay(nodes_csv, pods_csv, 0.8, departure_seed=1, departure_share=0.5)
    two = ob.replay(nodes_csv, pods_csv, 0.8, departure_seed=2, departure_share=0.5)
    assert {p["metadata"]["name"] for p in one[1]} != {p["metadata"]["name"] for p in two[1]}
    assert one[2]["departureSeed"] == 1 and one[2]["departureShare"] == 0.5
    # Somewhere between none and all of the tasks leave.
    everyone = ob.replay(nodes_csv, pods_csv, 0.8)[2]["departed"]
    assert 0 < one[2]["departed"] < everyone and 0 < two[2]["departed"] < everyone


def test_departure_share_bounds(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    stay = replayed(nodes_csv, pods_csv, 0.8, departures=False)
    leave = replayed(nodes_csv, pods_csv, 0.8)
    for seed in (1, 2):
        # Share 0: nobody leaves, exactly as departures=False; share 1: everyone, as the trace says.
        assert replayed(nodes_csv, pods_csv, 0.8, departure_seed=seed, departure_share=0.0) == stay
        assert replayed(nodes_csv, pods_csv, 0.8, departure_seed=seed, departure_share=1.0) == leave
    for bad in ({"departure_seed": 0}, {"departure_seed": 1, "departures": False}, {"departure_share": 1.5}):
        with pytest.raises(ValueError):
            ob.replay(nodes_csv, pods_csv, 0.8, **bad)


def test_cli_takes_a_departure_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    argv = ["--nodes", str(nodes_csv), "--pods", str(pods_csv), "--cut", "0.8", "--json"]
    assert ob.main([*argv, "--departure-seed", "2", "--departure-share", "0.5"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["departureSeed"], stats["departureShare"]) == (2, 0.5)
    with pytest.raises(SystemExit):
        ob.main([*argv, "--departure-seed", "1", "--no-departures"])


def test_snapshot_round_trip(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    nodes, pods, _ = ob.replay(nodes_csv, pods_csv, 0.6)
    state = build_state(nodes, pods)
    metrics = cluster_metrics(state, mix_from_state(state))
    for name in ("snap.json", "snap.json.gz"):
        out = tmp_path / name
        ob.write_snapshot(make_snapshot(nodes, pods, state, metrics, "test"), out)
        plain = tmp_path / "plain.json"
        plain.write_text(open_snapshot_text(out))
        raw_nodes, raw_pods, meta = load_snapshot(plain)
        assert meta["source"] == "test"
        assert len(raw_pods) == sum(1 for p in pods if p["status"]["phase"] == "Running")
        assert usage(build_state(raw_nodes, raw_pods)) == usage(state)
    first = (tmp_path / "snap.json.gz").read_bytes()
    ob.write_snapshot(make_snapshot(nodes, pods, state, metrics, "test"), tmp_path / "again.json.gz")
    assert gzip.decompress(first) != b"" and first[4:8] == b"\x00\x00\x00\x00"  # mtime 0


def test_cli_writes_a_loadable_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path)
    out = tmp_path / "x.json.gz"
    argv = ["--nodes", str(nodes_csv), "--pods", str(pods_csv), "--cut", "0.5", "--out", str(out), "--json"]
    assert ob.main(argv) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["gpus"] == 18 and stats["nodes"] == 5
    doc = json.loads(open_snapshot_text(out))
    assert doc["kind"] == "ClusterSnapshot" and "CC BY 4.0" in doc["metadata"]["source"]
    assert doc["summary"]["cluster"]["gpus"] == 18


# ---- the real trace (skipped where the data set is not mounted) ---------------------------------
needs_openb = pytest.mark.skipif(
    not (ob.DATA_DIR / ob.NODE_LIST).exists(), reason=f"openb trace not found in {ob.DATA_DIR} (set OPENB_DIR)"
)


@needs_openb
@pytest.mark.parametrize("pod_list", ["gpushare40", "gpuspec10"])
def test_real_trace_slice(tmp_path: Path, pod_list: str) -> None:
    # The first 50 nodes (P100, T4, ...) and the first 600 GPU tasks in arrival order.
    with (ob.DATA_DIR / ob.NODE_LIST).open() as f:
        node_rows = list(csv.reader(f))
    nodes_csv = write_csv(tmp_path / "nodes.csv", node_rows[0], node_rows[1:51])
    with (ob.DATA_DIR / ob.POD_LISTS[pod_list]).open() as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = sorted(reader, key=lambda r: int(r[header.index("creation_time")]))[:600]
    pods_csv = write_csv(tmp_path / "pods.csv", header, rows)
    trace = {p.name: p for p in ob.load_pods(pods_csv)}
    for departures in (True, False):
        r = ob.Replayer(ob.load_nodes(nodes_csv), list(trace.values()), departures=departures)
        for cut in (0.5, 0.9, 1.0):
            r.advance(ob.resolve_cut(list(trace.values()), cut))
            pods = r.pod_objects()
            check_invariants(r.node_objects, pods, trace)
            assert usage(build_state(r.node_objects, pods)) == usage(r.state)
        if not departures:
            assert r.stats.running > 100


def test_shipped_example_loads(tmp_path: Path) -> None:
    path = resolve_snapshot("example")
    assert path.name == EXAMPLES["example"] and path.exists()
    assert path.stat().st_size < 2_000_000
    plain = tmp_path / "example.json"
    plain.write_text(open_snapshot_text(path))
    nodes, pods, meta = load_snapshot(plain)
    assert "cluster-trace-gpu-v2023" in meta["source"] and "CC BY 4.0" in meta["source"]
    state = build_state(nodes, pods)
    assert len(state.nodes) > 1000 and not state.problems
    metrics = cluster_metrics(state, mix_from_state(state))
    assert metrics.total.fgd > 0 and metrics.total.whole_free > 0
    assert all(p.owner_kind == "ReplicaSet" for p in state.pods.values())
    partly = sum(1 for n in state.nodes.values() for g in n.devices if 0 < n.usage[g.uuid].usedcores < g.devcore)
    assert partly > 1000  # fragmented: many GPUs partly used


def test_resolve_and_read_snapshots(tmp_path: Path) -> None:
    assert resolve_snapshot("some/file.json") == Path("some/file.json")
    assert resolve_snapshot(tmp_path / "example") == tmp_path / "example"  # a path is never an example name
    text = '{"kind": "ClusterSnapshot"}'
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "gz-named-plain.json.gz").write_text(text)
    for name in ("a.json", "a.json.gz", "gz-named-plain.json.gz"):
        assert open_snapshot_text(tmp_path / name) == text
    (tmp_path / "broken.gz").write_bytes(gzip.compress(text.encode())[:-12])
    with pytest.raises(OSError, match="gzip"):
        open_snapshot_text(tmp_path / "broken.gz")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(OSError, match="UTF-8"):
        open_snapshot_text(tmp_path / "binary")
    with pytest.raises(OSError):
        open_snapshot_text(tmp_path / "missing.json")
