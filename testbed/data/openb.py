"""Replay the openb GPU-cluster trace with HAMi's default placement, to get a realistically
fragmented cluster.

    .venv/bin/python bench/openb_replay.py --pods gpushare40 --cut 0.99 --no-departures --out snap.json.gz

The replay lives in the test harness: it made the shipped example (docs/openb.md) and the tests
replay small traces with it. bench/openb_replay.py is its command line.

Data: Alibaba ``clusterdata`` cluster-trace-gpu-v2023 ("openb"; Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX
ATC '23), licensed CC BY 4.0. Read from ``$OPENB_DIR`` (default ``/work/shared/data/openb``).

Mapping (docs/openb.md has the full table and the reasoning):
- each trace node becomes a HAMi node whose GPUs register with the NVML name and memory of its
  model (``MODELS``; G1/G2/G3 are undisclosed in the trace, their values are assumptions),
  deviceSplitCount 10, devcore 100, NUMA 0, UUIDs uuid5(node, index);
- a sharing task (one GPU, gpu_milli < 1000) asks ``nvidia.com/gpu: 1`` with
  ``gpumem-percentage`` = ``gpucores`` = gpu_milli / 10; a whole-GPU task (gpu_milli 1000 or
  several GPUs) asks ``nvidia.com/gpu: num_gpu``, which HAMi's webhook makes exclusive
  (``gpucores: 100``, memory 100%); ``gpu_spec`` becomes ``nvidia.com/use-gputype``;
  CPU-only tasks are skipped (they hold no GPU);
- a task is present at time T when creation_time <= T < deletion_time. Arrivals are placed by
  :func:`testbed.hami.simulate.place` (HAMi's binpack node policy and spread GPU policy by
  default) among the nodes with enough free CPU and memory (kube-scheduler's NodeResourcesFit);
  a task that fits nowhere waits (Pending) and is retried, oldest first, whenever a departure
  frees room, until it fits or its deletion_time comes;
- with ``--no-departures`` (``departures=False``) tasks never leave: the FGD paper's method, and
  the one the shipped example uses, because with their own lifetimes the openb lists keep at most
  ~50 GPU tasks on the cluster at any instant (docs/openb.md);
- with ``--departure-seed S`` (``departure_seed=S``, S >= 1) each task keeps its trace departure
  with probability ``departure_share`` (default ``DEPARTURE_SHARE``), drawn from S and the task's
  name alone, and otherwise never leaves: a crowded cluster that still churns, one per seed.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import os
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.annotations import GpuDevice
from hami_place_core.fragmentation import ClusterMetrics, cluster_metrics, mix_from_state
from hami_place_core.requests import RES_CORES, RES_GPU, RES_MEM_PCT, pod_request
from hami_place_core.snapshot import make_snapshot
from hami_place_core.state import ClusterState, build_state
from testbed.data.gpu_nodes import GpuModel as TestbedGpuModel
from testbed.data.gpu_nodes import NodeSpec
from testbed.hami.simulate import (
    POLICIES,
    Policy,
    Simulator,
    bind,
    gpu_uuid,
    node_manifest,
    pod_manifest,
)

DATA_DIR = Path(os.environ.get("OPENB_DIR", "/work/shared/data/openb"))
NODE_LIST = "openb_node_list_gpu_node.csv"
POD_LISTS = {
    "gpushare40": "openb_pod_list_gpushare40.csv",
    "gpuspec10": "openb_pod_list_gpuspec10.csv",
    "gpuspec20": "openb_pod_list_gpuspec20.csv",
    "gpuspec25": "openb_pod_list_gpuspec25.csv",
    "multigpu30": "openb_pod_list_multigpu30.csv",
    "multigpu50": "openb_pod_list_multigpu50.csv",
}
NAMESPACE = "openb"
SPLIT_COUNT = 10  # HAMi chart default deviceSplitCount
DEVCORE = 100  # deviceCoreScaling 1
# The trace's times are seconds from an undisclosed origin; pods get creationTimestamps counted
# from this arbitrary instant (2023-07-01T00:00:00Z) so that ages are meaningful.
TRACE_EPOCH = 1688169600
SOURCE = "Alibaba clusterdata cluster-trace-gpu-v2023 (openb), CC BY 4.0"
# Under a departure seed, the share of tasks that keep their trace departure. Measured in
# docs/openb.md ("Seeded departures"): at 0.1 cut 1.0 is about as crowded as cut 0.99 without
# departures (the shipped example), while one task in ten still leaves and makes room behind it;
# 0.2 and 0.3 leave hundreds more whole GPUs free, where defragmentation matters less.
DEPARTURE_SHARE = 0.1


@dataclass(frozen=True)
class GpuModel:
    nvml_name: str  # what NVML's nvmlDeviceGetName returns
    memory_mib: int  # NVML total memory, what HAMi registers as devmem (deviceMemoryScaling 1)
    assumed: bool = False  # True where the trace does not disclose the model

    @property
    def hami_type(self) -> str:
        """The ``type`` HAMi's device plugin registers: the NVML name, prefixed "NVIDIA-" unless it
        already starts with NVIDIA (pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go)."""
        return self.nvml_name if self.nvml_name.upper().startswith("NVIDIA") else f"NVIDIA-{self.nvml_name}"


# Trace model code -> GPU. Disclosed models use the NVML name and total memory of that card
# (nvidia-smi's "Total" memory in MiB). G1/G2/G3 are undisclosed in the trace: we ASSUME the
# China-market data-centre parts a 2023 Alibaba cluster would run: G2 (the bulk of the cluster:
# 8 GPUs, 96 cores, 384 GiB per node) as A800 SXM4 80GB, G3 (larger 128-core/768 GiB hosts) as
# H800, G1 (absent from the node list) as A800 80GB PCIe. Not A100: HAMi matches
# nvidia.com/use-gputype by case-insensitive substring, so a task allowed only on "NVIDIA A10"
# would also be allowed on any "NVIDIA A100-..." GPU. Every type string here is distinct and none
# is a substring of another, so use-gputype selects exactly the models gpu_spec allows. Sharing
# requests are percentages, so only absolute MiB figures depend on the assumed memory sizes.
MODELS: dict[str, GpuModel] = {
    "P100": GpuModel("Tesla P100-PCIE-16GB", 16280),
    "T4": GpuModel("Tesla T4", 15360),
    "V100M16": GpuModel("Tesla V100-SXM2-16GB", 16160),
    "V100M32": GpuModel("Tesla V100-SXM2-32GB", 32510),
    "A10": GpuModel("NVIDIA A10", 23028),
    "G1": GpuModel("NVIDIA A800 80GB PCIe", 81920, assumed=True),
    "G2": GpuModel("NVIDIA A800-SXM4-80GB", 81920, assumed=True),
    "G3": GpuModel("NVIDIA H800", 81559, assumed=True),
}


class TraceError(ValueError):
    """The CSV cannot be read as an openb node or pod list."""


# ---- the trace --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TracePod:
    row: int
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    creation: int
    deletion: int | None  # None: never leaves (lists without times)

    @property
    def sharing(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < 1000

    @property
    def gpu_demand(self) -> float:
        return self.gpu_milli / 1000 if self.sharing else float(max(self.num_gpu, 0))


def _int(row: Mapping[str, str], key: str, path: Path, line: int) -> int:
    try:
        return int(row[key])
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"{path}:{line}: column {key!r} is not an integer: {row.get(key)!r}") from None


def load_nodes(path: str | Path) -> list[TraceNode]:
    path = Path(path)
    out = []
    with path.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            model = row.get("model", "")
            if model not in MODELS:
                raise TraceError(f"{path}:{line}: unknown GPU model {model!r} (known: {', '.join(MODELS)})")
            out.append(
                TraceNode(
                    name=row["sn"],
                    cpu_milli=_int(row, "cpu_milli", path, line),
                    memory_mib=_int(row, "memory_mib", path, line),
                    gpus=_int(row, "gpu", path, line),
                    model=model,
                )
            )
    return out


def load_pods(path: str | Path) -> list[TracePod]:
    """Every task of a pod list. Lists without creation/deletion times (multigpu30 ships only the
    resource columns) are read as arrivals in row order (creation = row number) that never leave."""
    path = Path(path)
    out = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        timed = {"creation_time", "deletion_time"} <= set(reader.fieldnames or ())
        for row_no, row in enumerate(reader):
            line = row_no + 2
            spec = tuple(dict.fromkeys(s for s in (row.get("gpu_spec") or "").split("|") if s))
            for s in spec:
                if s not in MODELS:
                    raise TraceError(f"{path}:{line}: unknown GPU model {s!r} in gpu_spec")
            out.append(
                TracePod(
                    row=row_no,
                    name=row["name"],
                    cpu_milli=_int(row, "cpu_milli", path, line),
                    memory_mib=_int(row, "memory_mib", path, line),
                    num_gpu=_int(row, "num_gpu", path, line),
                    gpu_milli=_int(row, "gpu_milli", path, line),
                    gpu_spec=spec,
                    qos=row.get("qos") or "",
                    creation=_int(row, "creation_time", path, line) if timed else row_no,
                    deletion=_int(row, "deletion_time", path, line) if timed else None,
                )
            )
    return out


def time_span(pods: Sequence[TracePod]) -> tuple[int, int]:
    """(first creation, last event) of the trace; the last event is the last deletion if any."""
    if not pods:
        return 0, 0
    start = min(p.creation for p in pods)
    ends = [p.deletion for p in pods if p.deletion is not None]
    end = max([*ends, *(p.creation for p in pods)])
    return start, end


def resolve_cut(pods: Sequence[TracePod], cut: float) -> int:
    """`cut` <= 1 is a fraction of the trace's time span, anything larger is seconds."""
    if cut < 0:
        raise ValueError("--cut must not be negative")
    if cut <= 1:
        start, end = time_span(pods)
        return start + round((end - start) * cut)
    return int(cut)


# ---- Kubernetes objects -----------------------------------------------------------------------
def node_devices(node: TraceNode) -> list[GpuDevice]:
    model = MODELS[node.model]
    return [
        GpuDevice(
            uuid=gpu_uuid(node.name, i),
            index=i,
            count=SPLIT_COUNT,
            devmem=model.memory_mib,
            devcore=DEVCORE,
            type=model.hami_type,
            numa=0,  # the trace has no topology
            mode="hami-core",
            health=True,
        )
        for i in range(node.gpus)
    ]


def node_object(node: TraceNode) -> dict[str, Any]:
    model = MODELS[node.model]
    return node_manifest(
        node.name,
        node_devices(node),
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        labels={"nvidia.com/gpu.product": model.nvml_name.replace(" ", "-"), "openb.alibaba/model": node.model},
    )


def node_spec(node: TraceNode) -> NodeSpec:
    """The trace node as a test-bed node (kwok), registered exactly as :func:`node_object` is:
    same GPU type, memory, NUMA 0 and UUIDs, and the trace's CPU and memory as allocatable."""
    model = MODELS[node.model]
    return NodeSpec(
        name=node.name,
        gpus=node.gpus,
        model=TestbedGpuModel(model.hami_type, model.memory_mib),
        split_count=SPLIT_COUNT,
        labels={"openb.alibaba/model": node.model},
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        numa=(0,) * node.gpus,  # the trace has no topology
    )


def gpu_limits(pod: TracePod) -> dict[str, str]:
    """The container limits after HAMi's admission webhook."""
    if pod.sharing:
        pct = str(-(-pod.gpu_milli // 10))  # gpu_milli is a multiple of 10 in openb; round up otherwise
        return {RES_GPU: "1", RES_MEM_PCT: pct, RES_CORES: pct}
    # Whole GPUs: no memory given means 100% memory, and the webhook (v2.7+) adds all the cores.
    return {RES_GPU: str(pod.num_gpu), RES_CORES: "100"}


def use_gputype(spec: Iterable[str]) -> str:
    return ann.join_list(list(dict.fromkeys(MODELS[s].hami_type for s in spec)))


def _timestamp(t: int) -> str:
    return dt.datetime.fromtimestamp(TRACE_EPOCH + t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_object(pod: TracePod) -> dict[str, Any]:
    """The task as a Pending pod, after admission, owned by a ReplicaSet (so it is movable)."""
    annotations = {ann.USE_GPU_TYPE: use_gputype(pod.gpu_spec)} if pod.gpu_spec else {}
    labels = {"app": pod.name}
    if pod.qos:
        labels["openb.alibaba/qos"] = pod.qos
    return pod_manifest(
        pod.name,
        NAMESPACE,
        gpu_limits(pod),
        requests={"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"},
        annotations=annotations,
        labels=labels,
        owner=("ReplicaSet", f"{pod.name}-rs"),
        creation_timestamp=_timestamp(pod.creation),
    )


# ---- the replay -------------------------------------------------------------------------------
@dataclass
class ReplayStats:
    cut_time: int = 0
    arrivals: int = 0  # GPU tasks created up to the cut
    requested_gpus: float = 0.0  # their GPU demand (gpu_milli / 1000 x num_gpu), in GPUs
    cpu_only_skipped: int = 0
    zero_length_skipped: int = 0  # deletion_time <= creation_time: never present
    departed: int = 0  # left after running
    placed_on_arrival: int = 0
    placed_after_waiting: int = 0
    waited: int = 0  # found no room on arrival
    expired_pending: int = 0  # deleted while still waiting
    running: int = 0  # at the cut
    pending: int = 0  # at the cut

    def as_dict(self) -> dict[str, Any]:
        """camelCase keys, like the snapshot's summary."""
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            head, *rest = k.split("_")
            out[head + "".join(w.title() for w in rest)] = round(v, 2) if isinstance(v, float) else v
        return out


def keeps_departure(seed: int, share: float, name: str) -> bool:
    """Whether task `name` leaves at its trace deletion time under departure seed `seed`: a draw
    from a generator seeded by the string "seed/name" (random seeds a str through SHA-512, so the
    draw is the same in every Python run, unlike hash()), independent of the list's order."""
    return random.Random(f"{seed}/{name}").random() < share  # noqa: S311 (a replay, not a secret)


class Replayer:
    """An arrival/departure replay that can be advanced step by step to several cut times.

    ``departures=False``: tasks never leave. ``departure_seed=s`` (s >= 1): each task leaves at its
    trace deletion time with probability ``departure_share`` (:func:`keeps_departure`), otherwise
    never. Neither: every task leaves at its deletion time."""

    def __init__(
        self,
        nodes: Sequence[TraceNode],
        pods: Sequence[TracePod],
        node_policy: Policy = "binpack",
        gpu_policy: Policy = "spread",
        *,
        check_cpu_memory: bool = True,
        retry_pending: bool = True,
        departures: bool = True,
        departure_seed: int | None = None,
        departure_share: float = DEPARTURE_SHARE,
    ) -> None:
        if node_policy not in POLICIES or gpu_policy not in POLICIES:
            raise ValueError(f"policies must be one of {', '.join(POLICIES)}")
        if departure_seed is not None and (departure_seed < 1 or not departures):
            raise ValueError("departure_seed must be >= 1, with departures on")
        if not 0 <= departure_share <= 1:
            raise ValueError("departure_share must be between 0 and 1")
        self.node_policy: Policy = node_policy
        self.gpu_policy: Policy = gpu_policy
        self.check_cpu_memory = check_cpu_memory
        self.retry_pending = retry_pending
        self.departures = departures
        self.departure_seed = departure_seed
        self.departure_share = departure_share
        self.trace_nodes = {n.name: n for n in nodes}
        self.node_objects = [node_object(n) for n in nodes]
        self.state: ClusterState = build_state(self.node_objects, ())
        self.sim = Simulator(self.state, node_policy, gpu_policy)
        self.cpu_free = {n.name: n.cpu_milli for n in nodes}
        self.mem_free = {n.name: n.memory_mib for n in nodes}
        self.stats = ReplayStats()
        self.running: dict[str, tuple[TracePod, dict[str, Any]]] = {}  # name -> (task, bound pod)
        self.pending: dict[str, TracePod] = {}  # insertion order = FIFO
        self.now = -1
        events: list[tuple[int, int, int, TracePod]] = []
        self.leaving: set[str] = set()  # tasks that leave at their deletion time
        for p in pods:
            if p.num_gpu <= 0:
                continue
            events.append((p.creation, 1, p.row, p))
            if self._leaves(p):
                self.leaving.add(p.name)
                events.append((p.deletion or 0, 0, p.row, p))  # departures first at equal times
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        self.events = deque(events)
        self.skipped_cpu = sorted((p.creation, p.row) for p in pods if p.num_gpu <= 0)
        self.templates: dict[str, dict[str, Any]] = {}

    # -- queries --
    def _leaves(self, pod: TracePod) -> bool:
        if not self.departures or pod.deletion is None:
            return False
        return self.departure_seed is None or keeps_departure(self.departure_seed, self.departure_share, pod.name)

    def _fits_host(self, pod: TracePod, node: str) -> bool:
        return self.cpu_free[node] >= pod.cpu_milli and self.mem_free[node] >= pod.memory_mib

    def _allowed(self, pod: TracePod, among: Iterable[str] | None = None) -> list[str] | None:
        if not self.check_cpu_memory:
            return None if among is None else list(among)
        names = self.trace_nodes if among is None else among
        return [n for n in names if self._fits_host(pod, n)]

    # -- transitions --
    def _try_place(self, pod: TracePod, among: Iterable[str] | None, now: int) -> bool:
        template = self.templates.get(pod.name)
        if template is None:
            template = self.templates[pod.name] = pod_object(pod)
        allowed = self._allowed(pod, among)
        if allowed is not None and not allowed:
            return False
        placement = self.sim.place(pod_request(template), allowed)
        if placement is None:
            return False
        bound = bind(template, placement, vgpu_time=TRACE_EPOCH + now)
        self.sim.apply(bound)
        self.cpu_free[placement.node] -= pod.cpu_milli
        self.mem_free[placement.node] -= pod.memory_mib
        self.running[pod.name] = (pod, bound)
        del self.templates[pod.name]
        return True

    def _depart(self, pod: TracePod) -> str | None:
        if pod.name in self.pending:
            del self.pending[pod.name]
            self.templates.pop(pod.name, None)
            self.stats.expired_pending += 1
            return None
        entry = self.running.pop(pod.name, None)
        if entry is None:
            return None  # zero-length task: never arrived
        node = entry[1]["spec"]["nodeName"]
        self.sim.evict(f"{NAMESPACE}/{pod.name}")
        self.cpu_free[node] += pod.cpu_milli
        self.mem_free[node] += pod.memory_mib
        self.stats.departed += 1
        return str(node)

    def _retry(self, freed: set[str], now: int) -> None:
        # A waiting task found no room anywhere when it last tried; since then only departures
        # made room, so it can only fit on a node something left. Oldest first, as kube-scheduler's
        # queue orders equal-priority pods.
        if not freed or not self.pending:
            return
        among = sorted(freed)
        for name, pod in list(self.pending.items()):
            if self._try_place(pod, among, now):
                del self.pending[name]
                self.stats.placed_after_waiting += 1

    def advance(self, until: int) -> None:
        """Process every event at times <= `until` (a task is present at T if creation <= T < deletion)."""
        if until < self.now:
            raise ValueError(f"cannot go back in time from {self.now} to {until}")
        while self.events and self.events[0][0] <= until:
            t = self.events[0][0]
            freed: set[str] = set()
            while self.events and self.events[0][0] == t and self.events[0][1] == 0:
                _, _, _, pod = self.events.popleft()
                node = self._depart(pod)
                if node is not None:
                    freed.add(node)
            if self.retry_pending:
                self._retry(freed, t)
            while self.events and self.events[0][0] == t and self.events[0][1] == 1:
                _, _, _, pod = self.events.popleft()
                if pod.name in self.leaving and pod.deletion is not None and pod.deletion <= pod.creation:
                    self.stats.zero_length_skipped += 1
                    continue
                self.stats.arrivals += 1
                self.stats.requested_gpus += pod.gpu_demand
                if self._try_place(pod, None, t):
                    self.stats.placed_on_arrival += 1
                else:
                    self.pending[pod.name] = pod
                    self.stats.waited += 1
        self.now = until
        self.stats.cut_time = until
        self.stats.cpu_only_skipped = sum(1 for c, _ in self.skipped_cpu if c <= until)
        self.stats.running = len(self.running)
        self.stats.pending = len(self.pending)

    # -- output --
    def pod_objects(self, include_pending: bool = True) -> list[dict[str, Any]]:
        """Running pods (bound by HAMi) in arrival order, then the waiting ones (Pending, unbound)."""
        pods = [bound for _, bound in sorted(self.running.values(), key=lambda e: (e[0].creation, e[0].row))]
        if include_pending:
            for pod in self.pending.values():
                pods.append(self.templates.get(pod.name) or pod_object(pod))
        return pods

    def metrics(self) -> ClusterMetrics:
        return cluster_metrics(self.state, mix_from_state(self.state))

    def summary(self, metrics: ClusterMetrics | None = None) -> dict[str, Any]:
        """Replay counters and the cluster's fragmentation at the current time."""
        return {
            "nodePolicy": self.node_policy,
            "gpuPolicy": self.gpu_policy,
            "departures": self.departures,
            "departureSeed": self.departure_seed,
            "departureShare": self.departure_share if self.departure_seed is not None else None,
            **self.stats.as_dict(),
            **cluster_stats(self.state, metrics or self.metrics()),
        }


def replay(
    nodes_csv: str | Path,
    pods_csv: str | Path,
    cut_time: float,
    node_policy: Policy = "binpack",
    gpu_policy: Policy = "spread",
    *,
    departures: bool = True,
    departure_seed: int | None = None,
    departure_share: float = DEPARTURE_SHARE,
    check_cpu_memory: bool = True,
    retry_pending: bool = True,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Replay the trace up to `cut_time`: (Node dicts, Pod dicts, stats).

    `cut_time` is in the trace's seconds, or a fraction of its time span when <= 1 (as ``--cut``).
    Pod dicts are the running pods as HAMi leaves them, in arrival order, followed by the pods
    still waiting (phase Pending, no HAMi annotations; :func:`build_state` and snapshots ignore
    them). With ``departures=False`` tasks never leave (the FGD paper's method); with
    ``departure_seed`` only a seeded share of them leaves (:class:`Replayer`). Deterministic:
    the same inputs give the same objects. To look at several cut times, advance one
    :class:`Replayer` instead of replaying from the start each time.
    """
    pods = load_pods(pods_csv)
    r = Replayer(
        load_nodes(nodes_csv),
        pods,
        node_policy,
        gpu_policy,
        departures=departures,
        departure_seed=departure_seed,
        departure_share=departure_share,
        check_cpu_memory=check_cpu_memory,
        retry_pending=retry_pending,
    )
    r.advance(resolve_cut(pods, cut_time))
    return r.node_objects, r.pod_objects(), r.summary()


def cluster_stats(state: ClusterState, metrics: ClusterMetrics) -> dict[str, Any]:
    t = metrics.total
    partial = full = 0
    for node in state.nodes.values():
        for g in node.devices:
            u = node.usage[g.uuid]
            if u.used == 0:
                continue
            if u.used >= g.count or u.usedmem >= g.devmem or u.usedcores >= g.devcore:
                full += 1
            else:
                partial += 1
    return {
        "nodes": len(state.nodes),
        "gpus": t.gpus,
        "gpusInUse": t.in_use,
        "gpusPartlyUsed": partial,
        "gpusFull": full,
        "wholeGpusFree": t.whole_free,
        "freeGpus": round(t.free, 2),
        "strandedGpus": round(t.stranded, 2),
        "fgdGpus": round(t.fgd, 2),
        "fragmentationRate": round(metrics.fragmentation_rate, 4),
        "memoryAllocated": round(t.mem_used / t.mem_total, 4) if t.mem_total else 0.0,
        "coresAllocated": round(t.cores_used / t.cores_total, 4) if t.cores_total else 0.0,
    }


def write_snapshot(doc: Mapping[str, Any], out: Path) -> None:
    data = json.dumps(doc, separators=(",", ":")).encode()
    if out.name.endswith(".gz"):
        # mtime=0 and no file name in the header: the same document gives the same bytes.
        with out.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(data)
    else:
        out.write_bytes(data)


def pod_list_path(arg: str) -> Path:
    """One of POD_LISTS by name (in DATA_DIR), or a CSV path."""
    return DATA_DIR / POD_LISTS[arg] if arg in POD_LISTS else Path(arg)


def departure_note(args: argparse.Namespace) -> str:
    if args.no_departures:
        return ", no departures"
    if args.departure_seed is not None:
        return f", departures of a {args.departure_share:g} share, seed {args.departure_seed}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pods", default="gpushare40", help=f"{', '.join(POD_LISTS)} (in $OPENB_DIR) or a CSV path")
    ap.add_argument("--nodes", default=str(DATA_DIR / NODE_LIST), help="node list CSV")
    ap.add_argument("--cut", type=float, default=0.99, help="fraction (<= 1) of the trace's time span, or seconds")
    ap.add_argument("--node-policy", choices=POLICIES, default="binpack")
    ap.add_argument("--gpu-policy", choices=POLICIES, default="spread")
    ap.add_argument("--no-cpu-memory", action="store_true", help="ignore node CPU and memory capacity")
    ap.add_argument("--no-retry", action="store_true", help="tasks that find no room on arrival never run")
    ap.add_argument(
        "--no-departures",
        action="store_true",
        help="tasks never leave (the FGD paper's method: the openb lists hold ~50 concurrent tasks otherwise)",
    )
    ap.add_argument(
        "--departure-seed",
        type=int,
        help="only a seeded share of tasks leave (the rest never do); a seed >= 1",
    )
    ap.add_argument(
        "--departure-share",
        type=float,
        default=DEPARTURE_SHARE,
        help=f"with --departure-seed, the share of tasks that leave (default {DEPARTURE_SHARE})",
    )
    ap.add_argument("--out", type=Path, help="write a snapshot (gzip if the name ends with .gz)")
    ap.add_argument("--json", action="store_true", help="print the stats as JSON")
    args = ap.parse_args(argv)
    if args.departure_seed is not None and (args.no_departures or args.departure_seed < 1):
        ap.error("--departure-seed needs a seed >= 1 and departures (not --no-departures)")

    started = time.perf_counter()
    pods_path = pod_list_path(args.pods)
    trace_pods = load_pods(pods_path)
    t = resolve_cut(trace_pods, args.cut)
    r = Replayer(
        load_nodes(args.nodes),
        trace_pods,
        args.node_policy,
        args.gpu_policy,
        check_cpu_memory=not args.no_cpu_memory,
        retry_pending=not args.no_retry,
        departures=not args.no_departures,
        departure_seed=args.departure_seed,
        departure_share=args.departure_share,
    )
    r.advance(t)
    metrics = r.metrics()
    stats: dict[str, Any] = {
        "podList": pods_path.name,
        "cut": args.cut,
        "traceSpan": list(time_span(trace_pods)),
        **r.summary(metrics),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        width = max(len(k) for k in stats)
        for k, v in stats.items():
            print(f"{k:<{width}}  {v}")
    if args.out:
        source = (
            f"openb {pods_path.stem.removeprefix('openb_pod_list_')} replayed to t={t}s "
            f"(cut {args.cut}{departure_note(args)}) with HAMi node policy {args.node_policy}, "
            f"GPU policy {args.gpu_policy}; "
            f"{SOURCE}"
        )
        doc = make_snapshot(r.node_objects, r.pod_objects(), r.state, metrics, source)
        write_snapshot(doc, args.out)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
