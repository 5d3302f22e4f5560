"""The simulator checked against the real HAMi scheduler, pod by pod, on a slice of an openb trace.

    HAMI_SCHEDULER_BIN=/path/to/scheduler .venv/bin/python -m bench.hami_simulator_check \\
        --record /tmp/simcheck.json --judge /tmp/simcheck.json

``--record`` puts ~20 openb nodes on the test bed (``testbed.data.openb.node_spec``: the same GPU
registration, CPU and memory as the replay's nodes) with the real HAMi scheduler as the
``hami-scheduler`` extender (docs/testing.md, HAMi mode), submits N GPU tasks of a trace list one at
a time as the replay does (``pod_object``: HAMi's webhook then admits them) and records where HAMi
put each one, or that it could place it nowhere (the pod is then deleted, as the replay drops it).

``--judge`` replays the record through ``testbed/hami/simulate.py`` step by step from HAMi's own
state: before pod k the simulator's cluster holds exactly the pods HAMi bound before it, where HAMi
bound them. It compares the node and, on HAMi's node, the GPUs. Tie-aware: HAMi scores nodes in
goroutines and sorts them, so among nodes of equal score its choice is arbitrary
(``pkg/scheduler/scheduler.go`` ``Filter`` / ``pkg/scheduler/score.go`` ``calcScore``); a simulator
node counts as agreeing when its score equals that of HAMi's node. GPUs are judged on HAMi's node
(whatever node the simulator chose), exactly, and tie-aware by the model's GPU score.

``--probe-float32`` judges a record twice, with the model's float32 scores (as HAMi's Go code
computes them) and with the same formulas in float64, and lists the choices float32 decides.

``--order shuffled`` submits the same tasks in a seeded random order (other states than the trace's
arrival order). ``--numa split`` registers each node's GPUs on two NUMA nodes (first half 0, the
rest 1, as a two-socket host) instead of the trace's none, so HAMi's NUMA tie-break is exercised.

The record holds the test bed's nodes, each submitted pod and HAMi's bound pod, so a judge needs no
test bed and can be re-run after a model change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.node_resources import pod_requests
from hami_place_core.requests import pod_request
from hami_place_core.state import ClusterState, build_state
from testbed.controlplane.cluster import TestBed
from testbed.data import openb as ob
from testbed.hami import simulate
from testbed.hami.allocation import real_hami
from testbed.hami.scheduler import NODE_LOCK, scheduler_binary
from testbed.hami.simulate import Simulator, apply, fit_on_node, gpu_score

POD_TIMEOUT = 60.0


# ---- the slice of the trace ------------------------------------------------------------------------
def pick_nodes(nodes: Sequence[ob.TraceNode], count: int) -> list[ob.TraceNode]:
    """Every k-th node of the list: the list is grouped by model, so a stride keeps its mix."""
    step = max(1, len(nodes) // count)
    return list(nodes[step // 2 :: step])[:count]


def pick_pods(pods: Sequence[ob.TracePod], count: int, order: str, seed: int) -> list[ob.TracePod]:
    """The first `count` GPU tasks in arrival order (they never leave, as in the shipped example)."""
    gpu = sorted((p for p in pods if p.num_gpu > 0), key=lambda p: (p.creation, p.row))[:count]
    if order == "shuffled":
        random.Random(seed).shuffle(gpu)
    return gpu


def submitted(pod: ob.TracePod) -> dict[str, Any]:
    """The replay's pod as a client submits it: no owner (the garbage collector would delete a pod
    whose ReplicaSet does not exist), no uid, no timestamps, no status."""
    manifest = ob.pod_object(pod)
    meta = manifest["metadata"]
    for key in ("ownerReferences", "uid", "creationTimestamp"):
        meta.pop(key, None)
    manifest.pop("status", None)
    return manifest


# ---- recording HAMi's choices ----------------------------------------------------------------------
@dataclass
class Recorder:
    core: Any
    namespace: str = ob.NAMESPACE
    records: list[dict[str, Any]] = field(default_factory=list)

    def place(self, pod: ob.TracePod) -> dict[str, Any]:
        manifest = submitted(pod)
        self.core.create_namespaced_pod(self.namespace, manifest)
        outcome = self._wait_outcome(pod.name)
        entry = {"name": pod.name, "submitted": manifest, **outcome}
        self.records.append(entry)
        return entry

    def _wait_outcome(self, name: str) -> dict[str, Any]:
        deadline = time.monotonic() + POD_TIMEOUT
        while time.monotonic() < deadline:
            pod = self.core.read_namespaced_pod(name, self.namespace)
            if self._bound(pod):
                return {"bound": self.core.api_client.sanitize_for_serialization(pod)}
            reason = _unschedulable(pod)
            if reason is not None:
                # The replay drops a task that fits nowhere; leaving it would keep it in the queue.
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
                return {"bound": None, "reason": reason}
            time.sleep(0.05)
        raise RuntimeError(f"pod {name}: neither bound nor unschedulable after {POD_TIMEOUT:.0f}s")

    def _bound(self, pod: Any) -> bool:
        annotations = pod.metadata.annotations or {}
        if not pod.spec.node_name or annotations.get(ann.POD_BIND_PHASE) != "success":
            return False
        # The post-bind step releases HAMi's node lock after bind-phase=success: the next pod must
        # not find the node locked (HAMi's Bind would fail and kube-scheduler retry it later).
        node = self.core.read_node(pod.spec.node_name)
        return NODE_LOCK not in (node.metadata.annotations or {})


def _unschedulable(pod: Any) -> str | None:
    for c in (pod.status.conditions if pod.status else None) or ():
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return str(c.message or c.reason)
    return None


def wait_hami_sees_nodes(core: Any, names: Sequence[str], timeout: float = 60) -> None:
    """HAMi's node loop writes its handshake annotation on every node it has read
    (``pkg/device/devices.go`` ``CheckHealth``): after that, Filter knows the node's GPUs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {
            n.metadata.name
            for n in core.list_node().items
            if "hami.io/node-handshake" in (n.metadata.annotations or {})
        }
        if set(names) <= seen:
            return
        time.sleep(0.5)
    raise RuntimeError(f"HAMi did not read every node within {timeout:.0f}s")


def record(args: argparse.Namespace) -> dict[str, Any]:
    if not real_hami():
        raise SystemExit("--record needs the real HAMi scheduler: set HAMI_SCHEDULER_BIN (docs/testing.md)")
    from kubernetes import client

    nodes = pick_nodes(ob.load_nodes(ob.DATA_DIR / ob.NODE_LIST), args.nodes)
    pods = pick_pods(ob.load_pods(ob.pod_list_path(args.pods)), args.count, args.order, args.seed)
    specs = [ob.node_spec(n) for n in nodes]
    if args.numa == "split":
        for spec in specs:
            spec.numa = None  # NodeSpec's default: the first half of the GPUs on NUMA 0, the rest on 1
    bed = TestBed(workdir=Path(tempfile.mkdtemp(prefix="hami-simcheck-")) / "bed", nodes=specs)
    bed.start()
    started = time.monotonic()
    try:
        core: Any = client.CoreV1Api(bed.api_client())  # untyped: the client takes plain dicts
        core.create_namespace({"metadata": {"name": ob.NAMESPACE}})
        wait_hami_sees_nodes(core, [s.name for s in specs])
        # The nodes as HAMi read them (Ready, as kwok keeps them): the judge builds its state from these.
        nodes_seen = [core.api_client.sanitize_for_serialization(core.read_node(s.name)) for s in specs]
        recorder = Recorder(core)
        for i, pod in enumerate(pods):
            entry = recorder.place(pod)
            if i % 50 == 49:
                print(f"  {i + 1}/{len(pods)} pods (last: {pod.name} -> {_where(entry)})", flush=True)
        version = bed.hami.version if bed.hami else "?"
    finally:
        bed.stop()
    return {
        "podList": args.pods,
        "order": args.order,
        "numa": args.numa,
        "seed": args.seed,
        "hami": f"{scheduler_binary()} {version}",
        "seconds": round(time.monotonic() - started, 1),
        "nodes": nodes_seen,
        "pods": recorder.records,
    }


def _where(entry: dict[str, Any]) -> str:
    bound = entry.get("bound")
    return bound["spec"]["nodeName"] if bound else "unschedulable"


# ---- judging the simulator against the record ------------------------------------------------------
@dataclass
class Verdict:
    name: str
    hami_node: str | None
    sim_node: str | None
    node: str  # "same", "tie", "both-none", "differ"
    gpus: str  # "same", "tie", "n/a", "differ"
    detail: str = ""


def allowed_nodes(state: ClusterState, pod: dict[str, Any]) -> list[str]:
    """What kube-scheduler's NodeResourcesFit leaves (CPU, memory, pod slots), as the replay does."""
    need = pod_requests(pod)
    return [n for n in state.nodes if (free := state.free_resources(n)) is None or free.covers(need)]


def _hami_gpus(bound: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    raw = (bound["metadata"].get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED)
    return tuple(tuple(d.uuid for d in c) for c in ann.decode_pod_devices(raw).containers if c)


def _gpu_scores(state: ClusterState, node: str, pod: dict[str, Any], uuids: Sequence[str]) -> list[float]:
    n = state.nodes[node]
    req = next(r for r in pod_request(pod).containers if r is not None)
    by_uuid = {g.uuid: g for g in n.devices}
    return sorted(gpu_score(req, by_uuid[u], n.usage[u]) for u in uuids)


def judge_gpus(
    state: ClusterState, node: str, pod: dict[str, Any], hami: tuple[tuple[str, ...], ...]
) -> tuple[str, str]:
    """The simulator's GPUs on HAMi's node against HAMi's: same, tie (same model scores), differ."""
    devices = fit_on_node(pod_request(pod), state.nodes[node], "spread")
    if devices is None:
        return "differ", f"the model finds no fit on HAMi's node {node}"
    sim = tuple(tuple(d.uuid for d in c) for c in devices if c)
    if tuple(map(sorted, sim)) == tuple(map(sorted, hami)):
        return "same", ""
    flat_sim = [u for c in sim for u in c]
    flat_hami = [u for c in hami for u in c]
    detail = f"GPUs on {node}: HAMi {_indices(state, node, flat_hami)}, model {_indices(state, node, flat_sim)}"
    if _gpu_scores(state, node, pod, flat_sim) == _gpu_scores(state, node, pod, flat_hami):
        return "tie", detail
    return "differ", detail


def _indices(state: ClusterState, node: str, uuids: Sequence[str]) -> list[int]:
    index = {g.uuid: g.index for g in state.nodes[node].devices}
    return [index[u] for u in uuids]


def judge_one(sim: Simulator, entry: dict[str, Any]) -> Verdict:
    pod, bound = entry["submitted"], entry.get("bound")
    placement = sim.place(pod_request(pod), allowed_nodes(sim.state, pod))
    sim_node = placement.node if placement else None
    if bound is None:
        node = "both-none" if placement is None else "differ"
        return Verdict(entry["name"], None, sim_node, node, "n/a", "" if placement is None else entry.get("reason", ""))
    hami_node = bound["spec"]["nodeName"]
    hami_score = sim.score(hami_node)
    if sim_node == hami_node:
        node = "same"
    elif placement is not None and placement.score == hami_score:
        node = "tie"
    else:
        node = "differ"
    gpus, detail = judge_gpus(sim.state, hami_node, pod, _hami_gpus(bound))
    if node == "differ":
        sim_score = placement.score if placement else None
        detail = f"node: HAMi {hami_node} (model score {hami_score}), model {sim_node} (score {sim_score}); {detail}"
    return Verdict(entry["name"], hami_node, sim_node, node, gpus, detail)


def judge(doc: dict[str, Any]) -> list[Verdict]:
    sim = Simulator(build_state(doc["nodes"], ()), "binpack", "spread")  # HAMi's chart defaults
    verdicts = []
    for entry in doc["pods"]:
        verdicts.append(judge_one(sim, entry))
        if entry.get("bound"):
            # The next step starts from HAMi's state, not the model's: each choice is judged alone.
            apply(sim.state, entry["bound"])
            sim.invalidate(entry["bound"]["spec"]["nodeName"])
    return verdicts


@contextlib.contextmanager
def float64_scores() -> Iterator[None]:
    """The model's score formulas without the float32 rounding (a probe, never the model)."""
    saved = simulate.f32
    simulate.f32 = float  # type: ignore[assignment]  # the probe swaps the rounding out for a while
    try:
        yield
    finally:
        simulate.f32 = saved


def probe_float32(doc: dict[str, Any]) -> list[str]:
    """Pods whose verdict changes when the scores are float64: the choices float32 decides."""
    as_hami = judge(doc)
    with float64_scores():
        as_float64 = judge(doc)
    return [
        f"{a.name}: float32 node {a.node}/gpus {a.gpus}, float64 node {b.node}/gpus {b.gpus} {b.detail}"
        for a, b in zip(as_hami, as_float64, strict=True)
        if (a.node, a.gpus, a.sim_node) != (b.node, b.gpus, b.sim_node)
    ]


def summarize(doc: dict[str, Any], verdicts: Sequence[Verdict]) -> dict[str, Any]:
    bound = [v for v in verdicts if v.hami_node]
    agree = [v for v in bound if v.node in ("same", "tie") and v.gpus in ("same", "tie")]
    count = {k: sum(1 for v in verdicts if v.node == k) for k in ("same", "tie", "both-none", "differ")}
    return {
        "podList": doc["podList"],
        "order": doc["order"],
        "numa": doc.get("numa", "trace"),
        "hami": doc.get("hami"),
        "nodes": len(doc["nodes"]),
        "pods": len(verdicts),
        "boundByHami": len(bound),
        "unschedulableBoth": count["both-none"],
        "nodeSame": count["same"],
        "nodeTie": count["tie"],
        "gpusSame": sum(1 for v in bound if v.gpus == "same"),
        "gpusTie": sum(1 for v in bound if v.gpus == "tie"),
        "agreeTieAware": len(agree) + count["both-none"],
        "agreement": round((len(agree) + count["both-none"]) / len(verdicts), 4) if verdicts else 1.0,
        "disagreements": [v.__dict__ for v in verdicts if v.node == "differ" or v.gpus == "differ"],
    }


# ---- command line -----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", type=Path, metavar="FILE", help="run HAMi on the test bed and write its choices")
    ap.add_argument("--judge", type=Path, metavar="FILE", help="judge the simulator against a record")
    ap.add_argument("--pods", default="gpushare40", help=f"trace list: {', '.join(ob.POD_LISTS)} or a CSV path")
    ap.add_argument("--count", type=int, default=300, help="GPU tasks submitted (default %(default)s)")
    ap.add_argument("--nodes", type=int, default=20, help="trace nodes on the test bed (default %(default)s)")
    ap.add_argument("--order", choices=("arrival", "shuffled"), default="arrival")
    ap.add_argument("--seed", type=int, default=1, help="for --order shuffled")
    ap.add_argument(
        "--numa", choices=("trace", "split"), default="trace", help="GPU NUMA nodes: trace (all 0) or split"
    )
    ap.add_argument("--json", action="store_true", help="print the judge's summary as JSON")
    ap.add_argument("--probe-float32", action="store_true", help="with --judge: what float64 scores would change")
    args = ap.parse_args(argv)
    if not args.record and not args.judge:
        ap.error("give --record FILE, --judge FILE or both")
    if args.record:
        doc = record(args)
        args.record.write_text(json.dumps(doc))
        bound = sum(1 for p in doc["pods"] if p.get("bound"))
        print(f"recorded {len(doc['pods'])} pods ({bound} bound by HAMi) in {doc['seconds']}s: {args.record}")
    if args.judge:
        doc = json.loads(args.judge.read_text())
        summary = summarize(doc, judge(doc))
        print(json.dumps(summary, indent=2) if args.json else _text(summary))
        if args.probe_float32:
            changed = probe_float32(doc)
            print(f"float32 decides {len(changed)} of {len(doc['pods'])} choices", *changed, sep="\n  ")
        return 0 if not summary["disagreements"] else 1
    return 0


def _text(summary: dict[str, Any]) -> str:
    lines = [f"{k}: {v}" for k, v in summary.items() if k != "disagreements"]
    lines += [
        f"DIFFER {d['name']}: node {d['node']}, gpus {d['gpus']}: {d['detail']}" for d in summary["disagreements"]
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
