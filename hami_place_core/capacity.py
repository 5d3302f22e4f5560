"""Capacity as the demand sees it: completely free nodes, and room for the pods that wait.

A count of free GPUs says little to a job that needs several GPUs on one node: 736 whole GPUs
free over 1,213 nodes left room for 56 eight-GPU pods on the shipped example. What counts is
how many pods of each shape in the *demand* fit at once, and how many nodes are completely free
(room for anything a node can hold). This module measures both, for any state, so a plan (before
and after), ``inspect``, the metrics and a policy's status report the same figures.

The demand is a list of pod shapes (:class:`DemandItem`: k GPUs of some request, with the
pod's GPU-type selectors and, when it is known, what it asks of its node) and how many of each
are wanted. It comes from what waits (pending GPU pods), else from ``--demand 8x2,4x4,1x50``
(k GPUs x N pods, whole GPUs), else from the running mix.

**Room for one shape** on one node, exactly: for each GPU g, c_g is how many copies of the
shape's per-GPU request fit on g (HAMi's Fit, applied again after each copy:
:func:`hami_place_core.fit.gpu_fit_reason` and ``add_usage``). t pods of k GPUs each, each pod
on k *distinct* GPUs, fit iff sum_g min(c_g, t) >= k*t (each GPU serves at most one share of a
pod, at most c_g pods; a greedy round-robin fills any t that passes the test). The node's CPU,
memory and pod slots bound t too (kube-scheduler's NodeResourcesFit, :mod:`node_resources`),
when the shape states them. A node that is not ready, is cordoned or has no readable register
holds nothing. Room is counted for each shape alone ("how many such pods fit at once"), not for
the whole demand together: the shapes compete for the same GPUs, and the sum would overstate it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import NO_SELECTORS, GpuUsage, add_usage, gpu_fit_reason
from hami_place_core.fragmentation import WHOLE_GPU, schedulable, task_of
from hami_place_core.node_resources import Resources, pod_requests
from hami_place_core.requests import DeviceSelectors, GpuRequest, PodRequest, pod_request
from hami_place_core.state import ClusterState, NodeState

# A GPU that holds more copies of one request than this is counted as holding this many: a
# shape asking 0 memory and 0 cores would otherwise fit forever (HAMi bounds it by the GPU's
# share slots, which a register may state as large as it likes).
MAX_COPIES_PER_GPU = 64


class DemandError(ValueError):
    """A demand that cannot be read, with what is wrong in its words."""


@dataclass(frozen=True)
class DemandItem:
    """One pod shape the demand asks for, and how many such pods."""

    gpus: int  # k: GPUs on one node
    count: int  # pods of this shape wanted (the demand's own figure; room is reported beside it)
    request: GpuRequest = WHOLE_GPU  # what the pod takes of each of its GPUs (nums is ignored)
    selectors: DeviceSelectors = NO_SELECTORS
    node_request: Resources | None = None  # CPU, memory and a pod slot, when known

    @property
    def shape(self) -> str:
        """`8`: a pod of 8 whole GPUs; a shared request names its share (`1 (mem 30%, cores 30%)`)."""
        if (self.request.mem_percentage, self.request.coresreq) == (100, 100) and not self.request.memreq:
            return str(self.gpus)
        return f"{self.gpus} {self.request.describe().partition('x')[2]}"

    @property
    def label(self) -> str:
        """`8x2`: two pods of 8 GPUs (`1x3 (mem 30%, cores 30%)` for three shared ones)."""
        k, _, share = self.shape.partition(" ")
        return f"{k}x{self.count}" + (f" {share}" if share else "")


@dataclass(frozen=True)
class Demand:
    items: tuple[DemandItem, ...]
    source: str  # "pending pods", "--demand", "the running mix", a policy's field

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted({i.gpus for i in self.items}))


def parse_demand(text: str, source: str = "--demand") -> Demand:
    """``8x2,4x4,1x50``: k GPUs x N pods, whole GPUs, comma separated; the same k twice adds up."""
    if not text.strip():
        raise DemandError(f"{source}: no pod shape given (for example 8x2,1x10)")
    counts: Counter[int] = Counter()
    for raw in text.split(","):
        part = raw.strip()
        k, sep, n = part.partition("x")
        if not sep or not k.strip().isdigit() or not n.strip().isdigit():
            raise DemandError(f"{source}: {part!r} is not GPUSxPODS (for example 8x2: two pods of 8 GPUs)")
        gpus, pods = int(k), int(n)
        if not 1 <= gpus <= 64 or not 1 <= pods <= 100_000:
            raise DemandError(f"{source}: {part!r}: GPUs per pod must be 1 to 64 and pods 1 to 100000")
        counts[gpus] += pods
    return Demand(tuple(DemandItem(gpus=k, count=n) for k, n in sorted(counts.items(), reverse=True)), source)


def item_of(request: PodRequest, node_request: Resources | None = None) -> DemandItem | None:
    """The shape of one pod (its task type, as FGD reads it); None without GPUs."""
    task = task_of(request)
    if task is None:
        return None
    return DemandItem(task.request.nums, 1, task.request, task.selectors, node_request)


def demand_of(requests: Iterable[DemandItem | None], source: str) -> Demand | None:
    """Pods' shapes counted by shape, largest first; None when no pod asks for a GPU."""
    counts: Counter[DemandItem] = Counter(
        DemandItem(i.gpus, 1, i.request, i.selectors, i.node_request) for i in requests if i is not None
    )
    if not counts:
        return None
    items = [DemandItem(i.gpus, n, i.request, i.selectors, i.node_request) for i, n in counts.items()]
    items.sort(key=lambda i: (-i.gpus, -i.count, repr(i)))
    return Demand(tuple(items), source)


def pending_demand(pods: Iterable[Mapping[str, Any]]) -> Demand | None:
    """What waits: the shapes of these pending GPU pods (their GPU request and type selectors as
    HAMi's webhook left them, and what they ask of a node), counted; None if none asks for a GPU."""
    # As pending.py reads them (webhook=True): the request HAMi's admission makes of the pod.
    return demand_of((item_of(pod_request(p, webhook=True), pod_requests(p)) for p in pods), "pending pods")


def running_demand(state: ClusterState) -> Demand | None:
    """The running mix as whole-GPU shapes: one per GPU count k the running pods use, with how
    many pods use it. Shares are left out on purpose: a pod of k shares is placed wherever k GPUs
    have room for it, which whole GPUs always have, and twenty share sizes would say less than
    the three or four k that decide whether the next multi-GPU job starts."""
    counts = Counter(i.gpus for a in state.pods.values() if (i := item_of(a.request)) is not None)
    if not counts:
        return None
    return Demand(
        tuple(DemandItem(gpus=k, count=n) for k, n in sorted(counts.items(), reverse=True)), "the running mix"
    )


NOTHING = Demand((DemandItem(gpus=1, count=0),), "no GPU pods")


def choose_demand(
    state: ClusterState, pending: Iterable[Mapping[str, Any]] = (), given: Demand | None = None
) -> Demand:
    """The demand to plan and report for: the one given (``--demand``, asked for by name), else
    what waits, else the running mix, else room for one whole GPU."""
    return given or pending_demand(pending) or running_demand(state) or NOTHING


# ---- room ---------------------------------------------------------------------------------------------
def node_is_free(node: NodeState) -> bool:
    """Completely free: schedulable, with GPUs, every one healthy, uncordoned and unused."""
    return (
        schedulable(node)
        and bool(node.devices)
        and all(g.health and g.uuid not in node.cordoned and node.usage[g.uuid].used == 0 for g in node.devices)
    )


def copies_on_gpu(item: DemandItem, gpu: GpuDevice, usage: GpuUsage, cordoned: frozenset[str]) -> int:
    """How many of the shape's per-GPU shares fit on `gpu` together (HAMi's Fit after each one)."""
    scratch = usage.copy()
    n = 0
    while n < MAX_COPIES_PER_GPU and gpu_fit_reason(item.request, gpu, scratch, item.selectors, cordoned) is None:
        add_usage(scratch, item.request, gpu)
        n += 1
    return n


def pods_fitting(copies: Iterable[int], k: int) -> int:
    """The most pods of k distinct GPUs each that GPUs holding `copies` shares can take together:
    the largest t with sum(min(c, t)) >= k*t."""
    caps = [c for c in copies if c > 0]
    if k <= 0 or len(caps) < k:
        return 0
    lo, hi = 0, sum(caps) // k
    while lo < hi:  # the test is monotone in t: min(c, t) grows by at most 1 per step, k*t by k
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in caps) >= k * mid:
            lo = mid
        else:
            hi = mid - 1
    return lo


def node_room(state: ClusterState, node: NodeState, item: DemandItem) -> int:
    """Pods of this shape that fit on `node` at once."""
    if not schedulable(node):
        return 0
    fits = pods_fitting((copies_on_gpu(item, g, node.usage[g.uuid], node.cordoned) for g in node.devices), item.gpus)
    need, free = item.node_request, state.free_resources(node.name)
    if fits and need is not None and free is not None:
        fits = min(fits, _times(free, need))
    return fits


def _times(free: Resources, need: Resources) -> int:
    """How many times `need` fits in `free` (kube-scheduler's CPU, memory and pod-count check)."""
    bounds = [free.pods // max(need.pods, 1)]
    bounds += [free.cpu // need.cpu] if need.cpu > 0 else []
    bounds += [free.memory // need.memory] if need.memory > 0 else []
    return max(0, min(bounds))


@dataclass(frozen=True)
class Room:
    """What the demand can use in one state, in total and per group (GPU model, node pool)."""

    free_nodes: int
    whole_gpus: int  # GPUs that take a whole-GPU request now (the old headline figure)
    pods: tuple[int, ...]  # per demand item: pods of that shape that fit at once
    groups: Mapping[str, tuple[int, int, tuple[int, ...]]] = field(default_factory=dict)

    def as_dict(self, demand: Demand) -> dict[str, object]:
        """camelCase, as in Kubernetes JSON: {"freeNodes", "wholeGpus", "room": [{shape, wanted, fit}]}."""
        return {
            "freeNodes": self.free_nodes,
            "wholeGpus": self.whole_gpus,
            "room": [
                {"shape": i.label, "gpus": i.gpus, "wanted": i.count, "fit": n}
                for i, n in zip(demand.items, self.pods, strict=True)
            ],
            "groups": {
                name: {"freeNodes": f, "wholeGpus": w, "fit": list(p)}
                for name, (f, w, p) in sorted(self.groups.items())
            },
        }


def gpu_model(node: NodeState) -> str:
    """A node's GPU model: its most common GPU type (a node mixes models only by mistake)."""
    types = Counter(g.type for g in node.devices)
    return types.most_common(1)[0][0] if types else ""


def room(
    state: ClusterState,
    demand: Demand,
    group_of: Callable[[NodeState], str] | None = gpu_model,
    nodes: Iterable[str] | None = None,
) -> Room:
    """The room `demand` has in `state` (on `nodes`, default all), grouped by `group_of`."""
    free_nodes, whole = 0, 0
    pods = [0] * len(demand.items)
    groups: dict[str, list[int]] = {}
    whole_item = DemandItem(gpus=1, count=1)
    for name in state.nodes if nodes is None else nodes:
        node = state.nodes[name]
        if not node.devices:
            continue
        here = [node_room(state, node, item) for item in demand.items]
        row = [int(node_is_free(node)), node_room(state, node, whole_item), *here]
        free_nodes, whole = free_nodes + row[0], whole + row[1]
        pods = [a + b for a, b in zip(pods, here, strict=True)]
        if group_of is not None:
            acc = groups.setdefault(group_of(node), [0] * len(row))
            acc[:] = [a + b for a, b in zip(acc, row, strict=True)]
    return Room(
        free_nodes=free_nodes,
        whole_gpus=whole,
        pods=tuple(pods),
        groups={g: (r[0], r[1], tuple(r[2:])) for g, r in groups.items()},
    )


MAX_SHAPES_SHOWN = 16  # a status or a metric shows at most this many shapes of a demand


def change_view(demand: Demand, before: Room, after: Room) -> dict[str, Any]:
    """The demand's room before and after a plan, compact (a policy's status.plan.room)."""
    shown = list(zip(demand.items, before.pods, after.pods, strict=True))[:MAX_SHAPES_SHOWN]
    return {
        "source": demand.source,
        "freeNodes": {"before": before.free_nodes, "after": after.free_nodes},
        "pods": [{"shape": i.shape, "wanted": i.count, "before": b, "after": a} for i, b, a in shown],
    }
