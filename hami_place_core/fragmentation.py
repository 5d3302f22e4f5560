"""How fragmented the GPUs are, per node and for the cluster.

Two measures, both in units of GPUs (1.0 = one whole GPU's worth of free capacity):

* **Stranded**: free capacity that no whole-GPU request can use. A whole-GPU request is what
  HAMi's webhook makes of ``nvidia.com/gpu: 1`` (memory 100%, cores 100: exclusive), so it fits only
  an unshared, healthy GPU; every free bit of a partly used GPU is stranded for it.
* **FGD** (Weng et al., "Beware of Fragmentation", USENIX ATC '23; hkust-adsl
  kubernetes-scheduler-simulator ``pkg/utils/frag.go``): the expected free capacity a task drawn
  from the workload mix M cannot use. For node n and task m, F_n(m) is all of n's free capacity if
  m cannot run on n at all, else the free capacity of the GPUs m does not fit on. F_n(M) is
  Σ_m p_m·F_n(m); the cluster's value is the sum over nodes. "Fits" is HAMi's own Fit
  (:mod:`hami_place_core.fit`), so slots, memory, cores, exclusivity and type selectors all count.

A GPU's free capacity is min(free memory share, free core share), 0 when its slots are exhausted or
it is unhealthy, since nothing can then be placed on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import NO_SELECTORS, GpuUsage, gpu_fit_reason
from hami_place_core.requests import DeviceSelectors, GpuRequest, PodRequest
from hami_place_core.state import ClusterState, NodeState, gc_paused

WHOLE_GPU = GpuRequest(nums=1, mem_percentage=100, coresreq=100)


@dataclass(frozen=True)
class TaskType:
    request: GpuRequest
    selectors: DeviceSelectors = NO_SELECTORS

    def describe(self) -> str:
        extra = ""
        if self.selectors.use_types:
            extra = f" on {'|'.join(self.selectors.use_types)}"
        return self.request.describe() + extra


@dataclass(frozen=True)
class WorkloadMix:
    """Typical tasks with their probabilities (summing to 1)."""

    tasks: tuple[tuple[TaskType, float], ...]

    @classmethod
    def from_tasks(cls, tasks: Iterable[TaskType], coverage: float = 0.95, max_types: int = 32) -> WorkloadMix:
        """The most popular task types covering `coverage` of all tasks, renormalised (FGD §4)."""
        counts = Counter(tasks)
        total = sum(counts.values())
        if total == 0:
            return cls(((TaskType(WHOLE_GPU), 1.0),))
        # Ties broken by the request itself, so the mix (and every metric) is deterministic.
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], repr(kv[0])))
        kept, covered = [], 0
        for task, n in ranked:
            kept.append((task, n))
            covered += n
            if covered >= coverage * total or len(kept) >= max_types:
                break
        norm = sum(n for _, n in kept)
        return cls(tuple((t, n / norm) for t, n in kept))


def free_share(gpu: GpuDevice, usage: GpuUsage) -> float:
    if not gpu.health or usage.used >= gpu.count or gpu.devmem <= 0:
        return 0.0
    mem = (gpu.devmem - usage.usedmem) / gpu.devmem
    cores = (gpu.devcore - usage.usedcores) / gpu.devcore if gpu.devcore > 0 else 0.0
    return max(0.0, min(mem, cores, 1.0))


def schedulable(node: NodeState) -> bool:
    """Ready, not cordoned, with a readable register: a node anything can be placed on."""
    return node.ready and not node.unschedulable and node.parseable


def task_fragment(node: NodeState, task: TaskType) -> float:
    """F_n(m): free capacity on `node` that `task` cannot use."""
    total = 0.0
    unusable = 0.0
    usable_count = 0
    for g in node.devices:
        u = node.usage[g.uuid]
        share = free_share(g, u)
        total += share
        if gpu_fit_reason(task.request, g, u, task.selectors, node.cordoned) is None:
            usable_count += 1
        else:
            unusable += share
    if not schedulable(node) or usable_count < task.request.nums:
        return total
    return unusable


@dataclass
class NodeMetrics:
    gpus: int = 0
    healthy: int = 0
    whole_free: int = 0  # GPUs that can take a whole-GPU request now
    in_use: int = 0  # healthy GPUs with at least one pod on them
    free: float = 0.0
    stranded: float = 0.0
    fgd: float = 0.0
    mem_used: int = 0
    mem_total: int = 0
    cores_used: int = 0
    cores_total: int = 0
    slots_used: int = 0
    slots_total: int = 0

    def add(self, other: NodeMetrics) -> None:
        for f in self.__dataclass_fields__:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def as_dict(self) -> dict[str, float | int]:
        """camelCase keys, as in Kubernetes JSON."""
        out: dict[str, float | int] = {}
        for f in self.__dataclass_fields__:
            v = getattr(self, f)
            head, *rest = f.split("_")
            out[head + "".join(w.title() for w in rest)] = round(v, 4) if isinstance(v, float) else v
        return out


class FitTable:
    """Fit outcomes cached across nodes. On a real cluster most GPUs share a model and a handful of
    usage levels, so each GPU state gets a small integer id and each task a table indexed by it."""

    def __init__(self, mix: WorkloadMix) -> None:
        self.tasks = [WHOLE, *(t for t, _ in mix.tasks)]
        self.ids: dict[tuple[Any, ...], int] = {}
        self.table: list[list[bool]] = [[] for _ in self.tasks]

    def state_id(self, g: GpuDevice, u: GpuUsage, cordoned: frozenset[str]) -> int:
        sig = (g.type, g.devmem, g.devcore, g.count, g.health, g.uuid in cordoned, u.used, u.usedmem, u.usedcores)
        sid = self.ids.get(sig)
        if sid is None:
            sid = self.ids[sig] = len(self.ids)
            for t, row in zip(self.tasks, self.table, strict=True):
                row.append(gpu_fit_reason(t.request, g, u, t.selectors, cordoned) is None)
        return sid


def node_metrics(node: NodeState, mix: WorkloadMix, fits: FitTable | None = None) -> NodeMetrics:
    fits = fits or FitTable(mix)
    m = NodeMetrics(gpus=len(node.devices))
    usable = schedulable(node)
    shares: list[float] = []
    ids: list[int] = []
    whole = fits.table[0]
    for g in node.devices:
        u = node.usage[g.uuid]
        m.mem_total += g.devmem
        m.mem_used += u.usedmem
        m.cores_total += g.devcore
        m.cores_used += u.usedcores
        m.slots_total += g.count
        m.slots_used += u.used
        share = free_share(g, u)
        shares.append(share)
        sid = fits.state_id(g, u, node.cordoned)
        ids.append(sid)
        if not g.health:
            continue
        m.healthy += 1
        m.free += share
        if u.used > 0:
            m.in_use += 1
        if usable and whole[sid]:
            m.whole_free += 1
        else:
            m.stranded += share
    m.fgd = node_fgd(mix, fits, ids, shares, usable)
    return m


def node_fgd(mix: WorkloadMix, fits: FitTable, ids: Sequence[int], shares: Sequence[float], schedulable: bool) -> float:
    """F_n(M) = Σ_m p_m·F_n(m) of a node whose GPUs have fit-state ids `ids` (in `fits`, a table
    for `mix`) and free capacities `shares` (:func:`free_share`): the one place the formula lives,
    for the cluster metrics and for the planner, which keeps the ids and shares of its own GPU
    usage as it changes (:mod:`hami_place_core.planning.fgd`). A node nothing can be scheduled on
    strands all its free capacity."""
    total = sum(shares)
    fgd = 0.0
    for (task, p), row in zip(mix.tasks, fits.table[1:], strict=True):
        if not schedulable:
            fgd += p * total
            continue
        usable, unusable = 0, 0.0
        for sid, share in zip(ids, shares, strict=True):
            if row[sid]:
                usable += 1
            else:
                unusable += share
        fgd += p * (total if usable < task.request.nums else unusable)
    return fgd


WHOLE = TaskType(WHOLE_GPU)


@dataclass
class ClusterMetrics:
    nodes: dict[str, NodeMetrics]
    total: NodeMetrics
    mix: WorkloadMix
    unparseable_nodes: list[str] = field(default_factory=list)

    @property
    def fragmentation_rate(self) -> float:
        """FGD as a share of all free capacity (0 = none of it is fragmented)."""
        return self.total.fgd / self.total.free if self.total.free > 0 else 0.0


def task_of(request: PodRequest) -> TaskType | None:
    """A pod's task type: its first GPU container's request and its GPU-type selectors."""
    gpu = request.gpu_containers
    if not gpu:
        return None
    sel = request.selectors
    return TaskType(gpu[0], DeviceSelectors(use_types=sel.use_types, nouse_types=sel.nouse_types))


def mix_from_state(state: ClusterState) -> WorkloadMix:
    """The default mix: the task types of the pods currently holding GPUs."""
    return WorkloadMix.from_tasks(t for a in state.pods.values() if (t := task_of(a.request)) is not None)


def cluster_metrics(
    state: ClusterState, mix: WorkloadMix, same: ClusterMetrics | None = None, changed: Collection[str] = ()
) -> ClusterMetrics:
    """Metrics of every node and their total. With `same` (metrics of a state that differs from
    this one only on the nodes in `changed`, for the same mix), other nodes' metrics are reused:
    the planner's after-metrics touch a few hundred of 1,213 nodes."""
    total = NodeMetrics()
    per: dict[str, NodeMetrics] = {}
    bad = []
    fits = FitTable(mix)
    reuse = same.nodes if same is not None and same.mix == mix else {}
    with gc_paused():
        for name, node in state.nodes.items():
            if not node.parseable:
                if node.register.format == "invalid":
                    bad.append(name)
                if not node.devices:
                    continue
            old = reuse.get(name)
            nm = old if old is not None and name not in changed else node_metrics(node, mix, fits)
            per[name] = nm
            total.add(nm)
    return ClusterMetrics(nodes=per, total=total, mix=mix, unparseable_nodes=bad)
