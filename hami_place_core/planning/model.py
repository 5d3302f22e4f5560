"""The plan model: what the planner is asked (:class:`PlanOptions`) and what it answers (:class:`Plan`
of :class:`Move`), and the replay of moves on a state (:func:`apply_moves`, :func:`check_moves`).

The bottom of the planning package but for :mod:`~hami_place_core.planning.constraints`: a move is
checked with the same kube-scheduler rules the planner plans with.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hami_place_core.annotations import GpuDevice
from hami_place_core.capacity import Demand, Room
from hami_place_core.fit import GpuUsage, fit_pod
from hami_place_core.fragmentation import ClusterMetrics, WorkloadMix
from hami_place_core.planning.constraints import (
    DEFAULT_EXCLUDED_NAMESPACES,
    immovable_reason,
    node_refusal,
    replacement_state,
)
from hami_place_core.state import ClusterState, NodeState, PodAllocation, add_pod, remove_pod, set_pod_requests

Solver = Literal["auto", "greedy", "exact"]
SOLVERS: tuple[Solver, ...] = ("auto", "greedy", "exact")
Objective = Literal["free-gpus", "fragmentation", "demand"]
OBJECTIVES: tuple[Objective, ...] = ("free-gpus", "fragmentation", "demand")


@dataclass(frozen=True)
class PlanOptions:
    objective: Objective = "free-gpus"
    max_moves: int | None = None  # the whole plan; None = no limit
    excluded_namespaces: frozenset[str] = frozenset(DEFAULT_EXCLUDED_NAMESPACES)
    # PodDisruptionBudget-style limit: moves per workload (namespace/Kind/name of the controller)
    max_moves_per_workload: int = 1
    workload_limits: Mapping[str, int] = field(default_factory=dict)  # per-workload overrides
    workload_moves_used: Mapping[str, int] = field(default_factory=dict)  # already spent (apply loops)
    # Pods (namespace/name) the caller keeps where they are, with why: the autopilot's policy
    # selector leaves them out, or their last move failed. Shown in the plan's immovable list.
    kept_pods: Mapping[str, str] = field(default_factory=dict)
    # One freed GPU may cost at most this many moves (its own pods plus the moves making room).
    max_moves_per_gpu: int = 8
    mix: WorkloadMix | None = None  # fragmentation: the workload mix; default: the pods' own
    min_fgd_gain: float = 0.02  # fragmentation: least FGD (in GPUs) a move must remove
    # free-gpus: "auto" adds the exact planner (a MILP, planning.exact) where HiGHS is installed and
    # the state is small enough; "exact" requires it; "greedy" never runs it.
    solver: Solver = "auto"
    # What waits (pod shapes and how many): the demand objective plans for it, and every plan
    # reports its room before and after. None: the running mix (capacity.running_demand).
    demand: Demand | None = None

    def limit_of(self, workload: str) -> int:
        return self.workload_limits.get(workload, self.max_moves_per_workload)


@dataclass(frozen=True)
class Move:
    """Evict `pod` and pin its replacement to `to_gpus` (NVML indices) on `to_node`."""

    pod: str  # namespace/name
    workload: str | None
    from_node: str
    from_gpus: tuple[int, ...]
    to_node: str
    to_gpus: tuple[int, ...]
    to_uuids: tuple[str, ...]
    reason: str
    frees: tuple[str, ...] = ()  # GPUs ("node/gpu-N") this move leaves empty
    # Whole free GPUs this move starts using (it opens one to share with others); the plan frees
    # as many GPUs as its moves free minus those they take.
    takes: tuple[str, ...] = ()

    @property
    def namespace(self) -> str:
        return self.pod.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.pod.split("/", 1)[1]

    @property
    def gpu_devices(self) -> list[str]:
        """The HamiPodPlacement ``gpuDevices``: whole entries, so the pod keeps its own request."""
        return [f"gpu-{i}" for i in self.to_gpus]

    def as_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "workload": self.workload,
            "from": {"node": self.from_node, "gpus": list(self.from_gpus)},
            "to": {"node": self.to_node, "gpus": list(self.to_gpus), "uuids": list(self.to_uuids)},
            "reason": self.reason,
            "frees": list(self.frees),
            "takes": list(self.takes),
        }


@dataclass(frozen=True)
class PlanMetrics:
    whole_free: int
    in_use: int
    free: float
    stranded: float
    fgd: float

    @classmethod
    def of(cls, m: ClusterMetrics) -> PlanMetrics:
        t = m.total
        return cls(t.whole_free, t.in_use, round(t.free, 4), round(t.stranded, 4), round(t.fgd, 4))

    def as_dict(self) -> dict[str, Any]:
        return {
            "wholeGpusFree": self.whole_free,
            "gpusInUse": self.in_use,
            "free": self.free,
            "stranded": self.stranded,
            "fgd": self.fgd,
        }


STOP_SHARES = (0.25, 0.5, 0.75, 0.9)  # Plan.stopping_points: shares of the plan's gain


@dataclass(frozen=True)
class Plan:
    objective: Objective
    moves: tuple[Move, ...]
    before: PlanMetrics
    after: PlanMetrics
    immovable: tuple[tuple[str, int], ...]  # reason -> number of pods, most common first
    seconds: float
    solver: str = "greedy"  # which planner's moves these are: "greedy" or "exact"
    solver_note: str = ""  # why (the exact planner's outcome, when it ran)
    # Whole GPUs free after each move, less before (prefix.prefix_totals): what stopping_points
    # reads. Empty: counted from the moves' own `frees` and `takes`.
    freed_by_prefix: tuple[int, ...] = ()
    # The demand's room (free nodes, pods of each shape that fit at once) before and after.
    demand: Demand | None = None
    room_before: Room | None = None
    room_after: Room | None = None

    @property
    def gpus_freed(self) -> int:
        return self.after.whole_free - self.before.whole_free

    def stopping_points(self, shares: Sequence[float] = STOP_SHARES) -> list[tuple[int, int]]:
        """(moves, GPUs freed) of the shortest prefix freeing each share of what the whole plan's
        moves free, ending with the whole plan. Every prefix of a plan is a valid plan, and the
        cheapest frees come first, so the last moves buy the least: this is where to set
        --max-moves, or stop a running defrag, for most of the gain."""
        running = self.freed_by_prefix or tuple(itertools.accumulate(len(m.frees) - len(m.takes) for m in self.moves))
        total = running[-1] if running else 0
        if total <= 0:
            return []
        points: list[tuple[int, int]] = []
        freed = 0
        wanted = sorted({math.ceil(share * total) for share in shares if 0 < share < 1})
        for i, freed in enumerate(running, start=1):
            while wanted and freed >= wanted[0]:
                wanted.pop(0)
                if not points or points[-1][1] < freed:
                    points.append((i, freed))
        if not points or points[-1][0] < len(self.moves):
            points.append((len(self.moves), freed))
        return points

    def as_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "moves": [m.as_dict() for m in self.moves],
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "gpusFreed": self.gpus_freed,
            "stoppingPoints": [{"moves": n, "gpusFreed": k} for n, k in self.stopping_points()],
            "immovablePods": dict(self.immovable),
            "solver": self.solver,
            "solverNote": self.solver_note,
            **self._demand_dict(),
            "seconds": round(self.seconds, 3),
        }

    def _demand_dict(self) -> dict[str, Any]:
        if self.demand is None or self.room_before is None or self.room_after is None:
            return {}
        return {
            "demand": {
                "source": self.demand.source,
                "before": self.room_before.as_dict(self.demand),
                "after": self.room_after.as_dict(self.demand),
            }
        }


def copy_state(state: ClusterState) -> ClusterState:
    """An independent copy: usage, pod lists and allocations can be changed without touching `state`."""
    nodes = {
        name: dataclasses.replace(
            n, usage={u: v.copy() for u, v in n.usage.items()}, pods={u: list(v) for u, v in n.pods.items()}
        )
        for name, n in state.nodes.items()
    }
    return ClusterState(
        nodes=nodes,
        pods=dict(state.pods),
        problems=dict(state.problems),
        by_node={n: set(k) for n, k in state.by_node.items()},
        pod_requests=dict(state.pod_requests),
        requested=dict(state.requested),
    )


def moved_allocation(alloc: PodAllocation, node: NodeState, indices: Sequence[int]) -> PodAllocation:
    """The pod's allocation once its replacement runs on GPUs `indices` of `node` (same request)."""
    req = alloc.request.gpu_containers[0]
    per_gpu: dict[str, tuple[int, int, int]] = {}
    for i in indices:
        d = node.gpu(i)
        if d is None:
            raise ValueError(f"node {node.name} has no GPU with index {i}")
        per_gpu[d.uuid] = (1, req.memory_on(d.devmem), req.coresreq)
    containers = tuple(tuple(per_gpu) if r is not None else () for r in alloc.request.containers)
    return dataclasses.replace(alloc, node=node.name, per_gpu=per_gpu, containers=containers)


def apply_moves(state: ClusterState, moves: Iterable[Move]) -> ClusterState:
    """A copy of `state` with the moves applied (no checks: see :func:`check_moves`)."""
    out = copy_state(state)
    for m in moves:
        apply_move(out, m)
    return out


def apply_move(state: ClusterState, m: Move) -> None:
    """Make one move in `state` itself: the pod's GPU shares and its CPU, memory and slot move."""
    alloc = remove_pod(state, m.pod)
    if alloc is None:
        raise ValueError(f"pod {m.pod} is not in the state")
    add_pod(state, moved_allocation(alloc, state.nodes[m.to_node], m.to_gpus))
    _move_requests(state, m.pod, m.to_node)


def _move_requests(state: ClusterState, key: str, node: str) -> None:
    held = state.pod_requests.get(key)
    if held is not None and held[0] != node:
        set_pod_requests(state, key, node, held[1])


def check_moves(state: ClusterState, moves: Sequence[Move], options: PlanOptions | None = None) -> list[str]:
    """Replay `moves` on a copy of `state`; one message per broken rule (empty: the plan is valid).

    Each move must name a movable pod where it is, a node kube-scheduler accepts for it, and GPUs
    where HAMi's Fit takes the pod's request (all of them, as a pin does) once the pod has left;
    after it, no GPU may hold more slots, memory or cores than it has. Limits: max_moves and the
    per-workload budget.
    """
    options = options or PlanOptions()
    errors: list[str] = []
    if options.max_moves is not None and len(moves) > options.max_moves:
        errors.append(f"{len(moves)} moves, more than max_moves {options.max_moves}")
    out = copy_state(replacement_state(state))
    used: dict[str, int] = dict(options.workload_moves_used)
    moved: set[str] = set()
    for i, m in enumerate(moves, start=1):
        where = f"move {i} ({m.pod})"
        alloc = out.pods.get(m.pod)
        if alloc is None:
            errors.append(f"{where}: pod not in the state")
            continue
        errors.extend(f"{where}: {e}" for e in _pod_errors(out, m, alloc, options, used, moved))
        node = out.nodes.get(m.to_node)
        if node is None:
            errors.append(f"{where}: unknown node {m.to_node}")
            continue
        refusal = node_refusal(alloc, node)
        if refusal is not None:
            errors.append(f"{where}: node {m.to_node}: {refusal}")
        gpus = [node.gpu(j) for j in m.to_gpus]
        if any(g is None for g in gpus) or len(set(m.to_gpus)) != len(m.to_gpus):
            errors.append(f"{where}: node {m.to_node} has no GPUs {list(m.to_gpus)}")
            continue
        errors.extend(f"{where}: {e}" for e in _replay_move(out, m, alloc, node, [g for g in gpus if g is not None]))
    return errors


def _pod_errors(
    out: ClusterState, m: Move, alloc: PodAllocation, options: PlanOptions, used: dict[str, int], moved: set[str]
) -> list[str]:
    """What is wrong with moving this pod now: it may not move, it moved before, its workload's
    budget is spent (counted in `used`), or it is not where the move says."""
    errors: list[str] = []
    why = immovable_reason(alloc, options.excluded_namespaces, out.problems)
    if why is not None:
        errors.append(f"pod may not be moved: {why}")
    if m.pod in moved:
        errors.append("pod moved twice")
    moved.add(m.pod)
    wl = f"{alloc.namespace}/{alloc.owner_kind}/{alloc.owner_name}" if alloc.owner_kind else None
    if wl is not None:
        used[wl] = used.get(wl, 0) + 1
        if used[wl] > options.limit_of(wl):
            errors.append(f"workload {wl} moved {used[wl]} times (limit {options.limit_of(wl)})")
    if alloc.node != m.from_node or out.nodes.get(alloc.node) is None:
        errors.append(f"pod is on {alloc.node}, not {m.from_node}")
    return errors


def _replay_move(out: ClusterState, m: Move, alloc: PodAllocation, node: NodeState, gpus: list[GpuDevice]) -> list[str]:
    """Make the move in `out`: what it breaks (node room, HAMi's Fit, GPUs oversubscribed after it)."""
    errors: list[str] = []
    held = out.pod_requests.get(m.pod)
    room = out.free_resources(m.to_node)
    if held is not None and room is not None and held[0] != m.to_node:
        short = room.shortfall(held[1])
        if short is not None:
            errors.append(f"node {m.to_node}: {short}")
    _move_requests(out, m.pod, m.to_node)
    remove_pod(out, m.pod)
    result = fit_pod(alloc.request, gpus, node.usage, node.cordoned, exact=True)
    if not result.ok:
        errors.append(f"does not fit on {m.to_node} {m.gpu_devices}: {result.message()}")
    add_pod(out, moved_allocation(alloc, node, m.to_gpus))
    for n in {m.to_node, m.from_node}:
        s = out.nodes.get(n)
        for d in s.devices if s else ():
            u = s.usage[d.uuid] if s else GpuUsage()
            if u.used > d.count or u.usedmem > d.devmem or u.usedcores > d.devcore:
                errors.append(f"{n} gpu-{d.index} oversubscribed ({u})")
    return errors
