"""The defragmentation planner: an ordered list of pod moves that frees whole GPUs or lowers FGD.

Input is a :class:`~hami_place_core.state.ClusterState` (live, or read from a snapshot); output a
:class:`Plan` whose moves are valid one after another: each move evicts a pod and pins its
replacement (a HamiPodPlacement with ``evictPod``) to GPUs where HAMi's Fit
(:func:`hami_place_core.fit.gpu_fit_reason`) holds in the state left by the moves before it, with
the pod's own request, GPU-type and UUID selectors, on a node kube-scheduler would accept
(:mod:`hami_place_core.planner_constraints`). No GPU is ever oversubscribed, even between moves.

**Algorithm (objective ``free-gpus``).** A GPU counts as freed when every pod on it has left,
so emptying one costs at least one move per pod on it. Candidates (GPUs whose pods may all move;
never GPUs of exclusive pods, which would only trade one whole GPU for another) are taken
cheapest first: fewest pods, then the lightest GPU, then GPUs of nodes short of CPU or memory
(a roomy node's GPUs are worth more as targets), then the lightest node. A candidate's pods,
largest first, each go best-fit into a GPU that stays in use: the one left with the least free
compute that still passes Fit (among equals the pod's own node, then GPUs already receiving,
then the busiest). The evacuation is committed only if *all* its pods fit, else nothing moves.
Passes by cost: with budget B = 1, 2, ... ``max_moves_per_gpu`` moves, every candidate with at
most B pods to move is tried once; the moves beyond its own pods go to *ejection chains* (up to
MAX_DEPTH deep): a pod that fits nowhere takes the place of up to two smaller pods on a nearly
fitting GPU, and they move on first, recursively. So all one-move frees come before the two-move
ones, and so on. In these passes a pod moves once and a GPU that received a pod is never emptied.
Every target node must have the CPU, memory and pod slot the pod requests (kube-scheduler's
NodeResourcesFit). Where nodes are short of them, two steps follow: single moves of small pods into
other GPUs' free compute, kept only where they empty a GPU or make the room another free needs; and
GPUs of one or two pods that could not be emptied are emptied together into an empty GPU of a roomy
node, k of them freeing k - 1 GPUs (first fit decreasing; the first such move ``takes`` the GPU it
opens).
A last round repeats the passes with both allowed: a pod already moving may get another place at
no extra move (or go home, saving one). Then an empty GPU of a roomy node may be offered as a
target to a few more evacuations, kept where two GPUs or more empty (:func:`_seeded`). Finally
the moves are put in an order where each one fits when made, the cheapest frees first (each time
a GPU whose remaining pods can all move now, fewest first; else the first move, in the order the
places were chosen, that fits): every prefix of the plan is valid and frees about as much as its
moves can. If no such order exists, the plan of the first round is kept.

**Objective ``fragmentation``.** The same evacuations, committed only when they lower the FGD
fragmentation of the workload mix (:mod:`hami_place_core.fragmentation`) by at least
``min_fgd_gain`` GPU per move; then single moves of small pods into other GPUs' free compute
where that alone lowers FGD by at least as much.

Deterministic: GPUs and pods are visited in sorted order, ties broken by node name and GPU index.
A caller that applies moves one at a time (``defrag --apply``) should re-plan from the live state
after each move and take :attr:`Plan.moves` ``[0]``, passing the moves already made per workload
in :attr:`PlanOptions.workload_moves_used` so disruption limits hold across re-plans.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import GpuUsage, fit_pod, gpu_fit_reason
from hami_place_core.fragmentation import (
    ClusterMetrics,
    FitTable,
    WorkloadMix,
    cluster_metrics,
    free_share,
    mix_from_state,
)
from hami_place_core.node_resources import ZERO, Resources
from hami_place_core.planner_constraints import (
    DEFAULT_EXCLUDED_NAMESPACES,
    SCHEDULING_EFFECTS,
    constraint_signature,
    immovable_reason,
    node_refusal,
    node_schedulable,
    replacement_state,
)
from hami_place_core.requests import DeviceSelectors, GpuRequest
from hami_place_core.state import ClusterState, NodeState, PodAllocation, add_pod, remove_pod, set_pod_requests

Solver = Literal["auto", "greedy", "exact"]
SOLVERS: tuple[Solver, ...] = ("auto", "greedy", "exact")
Objective = Literal["free-gpus", "fragmentation"]
OBJECTIVES: tuple[Objective, ...] = ("free-gpus", "fragmentation")


@dataclass(frozen=True)
class PlanOptions:
    objective: Objective = "free-gpus"
    max_moves: int | None = None  # the whole plan; None = no limit
    excluded_namespaces: frozenset[str] = frozenset(DEFAULT_EXCLUDED_NAMESPACES)
    # PodDisruptionBudget-style limit: moves per workload (namespace/Kind/name of the controller)
    max_moves_per_workload: int = 1
    workload_limits: Mapping[str, int] = field(default_factory=dict)  # per-workload overrides
    workload_moves_used: Mapping[str, int] = field(default_factory=dict)  # already spent (apply loops)
    # One freed GPU may cost at most this many moves (its own pods plus the moves making room).
    max_moves_per_gpu: int = 8
    mix: WorkloadMix | None = None  # fragmentation: the workload mix; default: the pods' own
    min_fgd_gain: float = 0.02  # fragmentation: least FGD (in GPUs) a move must remove
    # free-gpus: "auto" adds the exact planner (a MILP, planner_exact) where HiGHS is installed and
    # the state is small enough; "exact" requires it; "greedy" never runs it.
    solver: Solver = "auto"

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

    @property
    def gpus_freed(self) -> int:
        return self.after.whole_free - self.before.whole_free

    def stopping_points(self, shares: Sequence[float] = STOP_SHARES) -> list[tuple[int, int]]:
        """(moves, GPUs freed) of the shortest prefix freeing each share of what the whole plan's
        moves free, ending with the whole plan. Every prefix of a plan is a valid plan, and the
        cheapest frees come first, so the last moves buy the least: this is where to set
        --max-moves, or stop a running defrag, for most of the gain."""
        total = sum(len(m.frees) - len(m.takes) for m in self.moves)
        if total <= 0:
            return []
        points: list[tuple[int, int]] = []
        freed = 0
        wanted = sorted({math.ceil(share * total) for share in shares if 0 < share < 1})
        for i, m in enumerate(self.moves, start=1):
            freed += len(m.frees) - len(m.takes)
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
            "seconds": round(self.seconds, 3),
        }


# ---- the planning engine --------------------------------------------------------------------------
# Ejection chains: at most MAX_DEPTH pods moved on in a row to make room, EJECT_GROUP pods at most
# taken off one GPU, and EJECT_SCAN nearly fitting GPUs looked at per level of depth before an
# evacuation gives up (bounds the time). Over the seven openb benchmark states, 100, 150 and 300
# free as many GPUs in all (1,074-1,076), in 1.2-1.5, 1.4-2.0 and 1.6-2.5 s per state; on the
# example 1,000 freed one more than 300 in twice the time. Where node CPU is tight, long scans
# seldom find a chain.
MAX_DEPTH = 3
EJECT_SCAN = 100
EJECT_GROUP = 2

_UNLIMITED = 1 << 62  # the room of a node that states no allocatable
_Entry = tuple[int, int, int]  # (not locked, -pods, gid): the order of GPUs within a free-compute level
_Record = tuple[int, tuple[int, ...], list[int], int]  # undo: pod, GPUs before, GPUs it locked, event before
_Step = tuple[int, tuple[int, ...]]  # pod, target GPUs


class _Engine:
    """GPUs and pods as integer ids over arrays, with best-fit buckets keyed by free compute.

    The engine holds the *final* place of every pod: a pod away from its original GPUs is a move.
    Moves are put in an order that keeps every step valid by :meth:`sequence` at the end.
    """

    def __init__(self, state: ClusterState, options: PlanOptions) -> None:
        self.state = state
        self.options = options
        self.g_node: list[str] = []
        self.g_dev: list[GpuDevice] = []
        self.g_use: list[GpuUsage] = []
        self.g_cordoned: list[frozenset[str]] = []
        self.g_pods: list[list[int]] = []
        self.g_counts: list[bool] = []  # an empty GPU here counts as a whole free GPU
        self.g_locked: list[bool] = []  # received a pod (first phase: never emptied afterwards)
        self.g_seed: list[bool] = []  # an empty GPU offered as a target (see _seeded)
        self.node_gids: dict[str, list[int]] = {}
        gid_of: dict[str, int] = {}
        for name in sorted(state.nodes):
            node = state.nodes[name]
            ok = node_schedulable(node)
            ids = []
            for d in node.devices:
                gid = len(self.g_dev)
                gid_of[d.uuid] = gid
                ids.append(gid)
                self.g_node.append(name)
                self.g_dev.append(d)
                self.g_use.append((node.usage.get(d.uuid) or GpuUsage()).copy())
                self.g_cordoned.append(node.cordoned)
                self.g_pods.append([])
                self.g_counts.append(ok and d.health and d.uuid not in node.cordoned)
                self.g_locked.append(False)
                self.g_seed.append(False)
            self.node_gids[name] = ids
        self.p_alloc: list[PodAllocation] = []
        self.p_origin: list[tuple[int, ...]] = []
        self.p_gids: list[tuple[int, ...]] = []
        self.p_req: list[GpuRequest | None] = []
        self.p_movable: list[bool] = []
        self.p_event: list[int] = []  # when the pod was last given a new place (sequencing priority)
        self.p_workload: list[str | None] = []
        self.p_sig: list[str] = []
        self.p_reason: dict[int, str] = {}
        reasons: dict[str, int] = {}
        excluded = options.excluded_namespaces
        for key in sorted(state.pods):
            alloc = state.pods[key]
            if alloc.node not in state.nodes or not alloc.per_gpu:
                continue
            pid = len(self.p_alloc)
            gids = tuple(sorted(gid_of[u] for u in alloc.per_gpu if u in gid_of))
            why = immovable_reason(alloc, excluded, state.problems)
            if why is None and len(gids) != len(alloc.per_gpu):
                why = "its allocation names a GPU its node does not register"
            workload = (
                f"{alloc.namespace}/{alloc.owner_kind}/{alloc.owner_name}" if alloc.owner_kind is not None else None
            )
            if (
                why is None
                and workload is not None
                and options.workload_moves_used.get(workload, 0) >= options.limit_of(workload)
            ):
                why = "its workload has used its disruption budget"
            if why is not None:
                head = why.split(":")[0]
                reasons[head] = reasons.get(head, 0) + 1
            gpu = alloc.request.gpu_containers
            self.p_alloc.append(alloc)
            self.p_origin.append(gids)
            self.p_gids.append(gids)
            self.p_req.append(gpu[0] if len(gpu) == 1 else None)
            self.p_movable.append(why is None)
            self.p_event.append(0)
            self.p_workload.append(workload)
            self.p_sig.append(constraint_signature(alloc) if why is None else "")
            for g in gids:
                self.g_pods[g].append(pid)
        self.immovable = tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        # Room for CPU, memory and pod slots (kube-scheduler's NodeResourcesFit) on nodes that state
        # their allocatable, kept for the pods' current places like the GPU usage.
        self.n_free: dict[str, Resources] = {}
        for name in state.nodes:
            free = state.free_resources(name)
            if free is not None:
                self.n_free[name] = free
        # Movable at all, with a request the engine moves, and not one only an empty GPU takes.
        self.p_static: list[bool] = [
            m and r is not None and not (r.coresreq >= 100 or r.mem_percentage == 100)
            for m, r in zip(self.p_movable, self.p_req, strict=True)
        ]
        self.p_res: list[Resources] = [state.requests_of(a.key) for a in self.p_alloc]
        self.g_sizes: list[list[int]] = [[] for _ in self.g_dev]  # compute of the pods on each GPU, largest first
        for g in range(len(self.g_dev)):
            self._sizes(g)
        self.workload_used: dict[str, int] = dict(options.workload_moves_used)
        self.moves_made = 0  # pods away from their original GPUs
        self.max_moves = (1 << 30) if options.max_moves is None else options.max_moves
        self.reroute = False  # second phase: pods already moved may be given another place
        self.event = 0
        self.sig_nodes: dict[str, frozenset[str]] = {}
        # GPU types each pod's use-/nouse-gputype accept (None: no type selector)
        types = sorted({d.type for d in self.g_dev})
        allowed: dict[DeviceSelectors, frozenset[str]] = {}
        self.p_types: list[frozenset[str] | None] = []
        self.p_plain: list[bool] = []  # no GPU type or UUID selector at all
        for a in self.p_alloc:
            sel = a.request.selectors
            self.p_plain.append(not (sel.use_types or sel.nouse_types or sel.use_uuids or sel.nouse_uuids))
            if not sel.use_types and not sel.nouse_types:
                self.p_types.append(None)
                continue
            if sel not in allowed:
                allowed[sel] = frozenset(t for t in types if sel.type_allowed(t))
            self.p_types.append(allowed[sel])
        # Taints keep even pods without any scheduling constraint off a node.
        self.tainted = any(t.get("effect") in SCHEDULING_EFFECTS for n in state.nodes.values() for t in n.taints)
        # best-fit buckets: free compute -> sorted entries of GPUs that are in use and may receive
        self.buckets: dict[int, list[_Entry]] = {}
        self.levels: list[int] = []  # the free-compute levels that have GPUs, ascending
        self.g_entry: list[tuple[int, _Entry] | None] = [None] * len(self.g_dev)
        # Per level, the (CPU, memory) room of its GPUs' nodes as a Pareto front: at least as much
        # as any of them has (raised when a node gains room or a GPU joins, made exact by a scan
        # that finds nothing). A pod that no point of it covers skips the level without looking at
        # its GPUs. On busy clusters most searches fail for want of node CPU or memory, and each
        # used to scan every GPU in use.
        self.level_room: dict[int, list[tuple[int, int]]] = {}
        for g in range(len(self.g_dev)):
            self._index(g)
        self.evacuated: list[int] = []  # GPUs emptied, in order
        # GPUs that can ever be worth emptying (candidates() looks at no other): a pod that may
        # not move, or asks for all the cores (only an ejection could move it, and ejections move
        # pods smaller than one under 100%), stays, so its GPU is never emptied (about half the
        # GPUs in use on the openb states hold one).
        self.g_maybe: list[int] = [
            g
            for g in range(len(self.g_dev))
            if self.g_counts[g]
            and not any(
                not self.p_movable[p] or (r := self.p_req[p]) is None or r.coresreq >= 100 for p in self.g_pods[g]
            )
        ]
        self.g_kind: dict[int, tuple[Any, ...]] = {}
        self._cap = self._work = self._base = 0
        self.scanned = 0  # GPUs the ejection scans looked at, over the whole plan
        self.scan_limit: int | None = None
        # Failed best-fit searches, remembered per kind of pod until the state changes. Inside an
        # ejection scan most tries at placing a small pod fail, and pods of one kind fail alike:
        # on gpuspec10 three in four of them repeated a failure already seen in the same state.
        # A state is named by the stack of applied records (an undo in reverse order brings its
        # name back); any other change forgets everything.
        self._states: list[tuple[_Record | None, int]] = [(None, 0)]
        self._named = 0
        self._misses: dict[tuple[Any, ...], frozenset[int]] = {}
        # Likewise the ejection sets of a GPU for a kind of pod: the scans of one evacuation after
        # another look at the same nearly fitting GPUs (on gpuspec10 nearly half the sets listed
        # had been listed before, in the same state).
        self._groups: dict[tuple[Any, ...], list[tuple[int, ...]]] = {}
        self.p_kind: dict[int, tuple[Any, ...]] = {}

    # -- indexing --
    def _free(self, g: int) -> int:
        return self.g_dev[g].devcore - self.g_use[g].usedcores

    def _open(self, g: int) -> bool:
        return self.g_counts[g] and (self.g_use[g].used > 0 or self.g_seed[g])

    def _index(self, g: int) -> None:
        old = self.g_entry[g]
        if old is not None:
            level, entry = old
            bucket = self.buckets[level]
            del bucket[bisect.bisect_left(bucket, entry)]
            if not bucket:
                del self.buckets[level]
                del self.levels[bisect.bisect_left(self.levels, level)]
            self.g_entry[g] = None
        if self._open(g):
            entry = (0 if self.g_locked[g] else 1, -len(self.g_pods[g]), g)
            level = self._free(g)
            if level not in self.buckets:
                self.buckets[level] = []
                bisect.insort(self.levels, level)
            bisect.insort(self.buckets[level], entry)
            self.g_entry[g] = (level, entry)
            self._raise_room(level, self.g_node[g])

    def _node_room(self, node: str) -> tuple[int, int]:
        room = self.n_free.get(node)
        return (_UNLIMITED, _UNLIMITED) if room is None else (room.cpu, room.memory)

    def _raise_room(self, level: int, node: str) -> None:
        cpu, mem = self._node_room(node)
        front = self.level_room.get(level)
        if front is None:
            self.level_room[level] = [(cpu, mem)]
        elif not any(c >= cpu and m >= mem for c, m in front):
            front[:] = [(c, m) for c, m in front if c > cpu or m > mem]
            front.append((cpu, mem))

    def _sizes(self, g: int) -> None:
        self.g_sizes[g] = sorted((r.coresreq for q in self.g_pods[g] if (r := self.p_req[q]) is not None), reverse=True)

    def label(self, g: int) -> str:
        return f"{self.g_node[g]}/gpu-{self.g_dev[g].index}"

    # -- constraints --
    def eligible_nodes(self, p: int) -> frozenset[str] | None:
        """Nodes the pod's replacement may go to; None = every schedulable node."""
        sig = self.p_sig[p]
        if not sig and not self.tainted:
            return None
        nodes = self.sig_nodes.get(sig)
        if nodes is None:
            alloc = self.p_alloc[p]
            nodes = frozenset(n for n, s in self.state.nodes.items() if node_refusal(alloc, s) is None)
            self.sig_nodes[sig] = nodes
        return nodes

    def fits(self, p: int, g: int, req: GpuRequest, nodes: frozenset[str] | None) -> bool:
        if g in self.p_gids[p]:
            return False
        node = self.g_node[g]
        if nodes is not None and node not in nodes and g not in self.p_origin[p]:
            return False
        room = self.n_free.get(node)
        if room is not None and node != self.g_node[self.p_gids[p][0]] and not room.covers(self.p_res[p]):
            return False
        sel = self.p_alloc[p].request.selectors
        if not self.p_plain[p] and not self.allowed(p, self.g_dev[g]):
            return False
        return gpu_fit_reason(req, self.g_dev[g], self.g_use[g], sel, self.g_cordoned[g]) is None

    def allowed(self, p: int, d: GpuDevice) -> bool:
        """Pod p's GPU type and UUID selectors accept GPU d."""
        types = self.p_types[p]
        if types is not None and d.type not in types:
            return False
        sel = self.p_alloc[p].request.selectors
        return not (sel.use_uuids or sel.nouse_uuids) or sel.uuid_allowed(d.uuid)

    def moved(self, p: int) -> bool:
        return self.p_gids[p] != self.p_origin[p]

    def can_move(self, p: int) -> bool:
        if not self.p_movable[p] or self.p_req[p] is None:
            return False
        if self.moved(p):
            return self.reroute  # a new place for a pod already moving costs no extra move
        if self.moves_made >= self.max_moves:
            return False
        wl = self.p_workload[p]
        return wl is None or self.workload_used.get(wl, 0) < self.options.limit_of(wl)

    def needs_empty_gpu(self, p: int) -> bool:
        """An exclusive request (all cores, or all memory) only fits an unused GPU: moving it frees
        one GPU and takes another, so it never pays for itself."""
        req = self.p_req[p]
        return req is not None and (req.coresreq >= 100 or req.mem_percentage == 100)

    # -- choosing a target --
    def best_target(self, p: int, exclude: set[int] | frozenset[int]) -> tuple[int, ...] | None:
        """Best fit: the GPU(s) left with the least free compute; among equals the pod's original
        GPU, then its own node, then GPUs already receiving, then the busiest, then by node name
        and index."""
        req = self.p_req[p]
        assert req is not None
        nodes = self.eligible_nodes(p)
        if req.nums > 1:
            return self._best_multi(p, req, nodes, exclude)
        need = req.coresreq
        home = self.p_alloc[p].node
        origin = self.p_origin[p]
        if nodes is not None and len(nodes) <= 32:
            # Few nodes allowed: look at their GPUs directly rather than scan every bucket.
            pool = [g for n in sorted(nodes | {home}) for g in self.node_gids.get(n, ())]
            best = min(
                (
                    (self._free(g), 0 if g in origin else 1, 0 if self.g_node[g] == home else 1, entry[1], g)
                    for g in pool
                    if (entry := self.g_entry[g]) is not None and g not in exclude and self.fits(p, g, req, nodes)
                ),
                default=None,
            )
            return None if best is None else (best[4],)
        home_fit: dict[int, list[tuple[int, _Entry, int]]] = {}
        for g in self.node_gids.get(home, ()):
            entry = self.g_entry[g]
            if entry is not None and g not in exclude and self.fits(p, g, req, nodes):
                home_fit.setdefault(entry[0], []).append((0 if g in origin else 1, entry[1], g))
        levels = self.levels
        # Busy GPUs sit on busy nodes: most of those the scan meets lack CPU or memory for the
        # pod, so the node's verdict is taken once per call, not once per GPU.
        here, res, n_free, g_node = self.g_node[self.p_gids[p][0]], self.p_res[p], self.n_free, self.g_node
        level_room = self.level_room
        # GPUs of the node the pod is on need no room there; home GPUs are in home_fit.
        near = {e[0] for g in self.node_gids[here] if (e := self.g_entry[g]) is not None} if here != home else ()
        roomy: dict[str, bool] = {}
        for i in range(bisect.bisect_left(levels, need), len(levels)):
            level = levels[i]
            if level in home_fit:
                return (min(home_fit[level])[2],)
            front = level_room.get(level)
            if front is not None and not any(c >= res.cpu and m >= res.memory for c, m in front) and level not in near:
                continue  # home GPUs were looked at above: no other node of this level has room
            rooms: set[tuple[int, int]] = set()
            for _, _, g in self.buckets[level]:
                node = g_node[g]
                room = n_free.get(node)
                rooms.add((_UNLIMITED, _UNLIMITED) if room is None else (room.cpu, room.memory))
                if g in exclude:
                    continue
                ok = roomy.get(node)
                if ok is None:
                    ok = roomy[node] = room is None or node == here or room.covers(res)
                if ok and self.fits(p, g, req, nodes):
                    return (g,)
            level_room[level] = _pareto(rooms)  # exact now: the whole level was seen
        return None

    def direct_target(self, p: int, exclude: frozenset[int]) -> tuple[int, ...] | None:
        """best_target(), but a search that failed for a pod of the same kind, in this state, fails
        again without a scan unless one of the GPUs it left out now fits."""
        req = self.p_req[p]
        assert req is not None
        if req.nums != 1:
            return self.best_target(p, exclude)
        key = (self._kind_of_pod(p), self.g_node[self.p_gids[p][0]], self._states[-1][1])
        blocked = self._misses.get(key)
        if blocked is not None:
            # best_target() fails exactly when no open GPU outside exclude and the pod's own GPUs
            # passes fits(): only the GPUs the earlier search left out need a look.
            nodes = self.eligible_nodes(p)
            if not any(
                g not in exclude and self.g_entry[g] is not None and self.fits(p, g, req, nodes) for g in blocked
            ):
                return None
        target = self.best_target(p, exclude)
        if target is None:
            left_out = exclude.union(self.p_gids[p])
            self._misses[key] = left_out if blocked is None else left_out & blocked
        return target

    def _kind_of_pod(self, p: int) -> tuple[Any, ...]:
        """All that fits() looks at for pod p but for where it is now (the key adds its node)."""
        kind = self.p_kind.get(p)
        if kind is None:
            nodes = self.eligible_nodes(p)
            origin = self.p_origin[p]
            # fits() lets a pod back onto its original GPUs even off its eligible nodes.
            odd = nodes is not None and any(self.g_node[g] not in nodes for g in origin)
            sel = self.p_alloc[p].request.selectors
            kind = (self.p_req[p], sel, self.p_sig[p], self.p_res[p], origin if odd else ())
            self.p_kind[p] = kind
        return kind

    def _best_multi(
        self, p: int, req: GpuRequest, nodes: frozenset[str] | None, exclude: set[int] | frozenset[int]
    ) -> tuple[int, ...] | None:
        best: tuple[tuple[int, int, str], tuple[int, ...]] | None = None
        home = self.p_alloc[p].node
        for name in sorted(self.node_gids) if nodes is None else sorted(nodes):
            fitting = [
                g
                for g in self.node_gids.get(name, ())
                if g not in exclude and self.g_entry[g] is not None and self.fits(p, g, req, nodes)
            ]
            if len(fitting) < req.nums:
                continue
            fitting.sort(key=lambda g: (self._free(g), g))
            chosen = tuple(sorted(fitting[: req.nums]))
            score = (sum(self._free(g) for g in chosen) - req.coresreq * req.nums, 0 if name == home else 1, name)
            if best is None or score < best[0]:
                best = (score, chosen)
        return None if best is None else best[1]

    # -- applying and undoing --
    def _shift(self, p: int, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        req = self.p_req[p]
        assert req is not None
        was_moved = self.moved(p)
        for g in (*old, *new):
            self.g_kind.pop(g, None)
        for g in old:
            d, u = self.g_dev[g], self.g_use[g]
            u.used -= 1
            u.usedmem -= req.memory_on(d.devmem)
            u.usedcores -= req.coresreq
            self.g_pods[g].remove(p)
            self._sizes(g)
        for g in new:
            d, u = self.g_dev[g], self.g_use[g]
            u.used += 1
            u.usedmem += req.memory_on(d.devmem)
            u.usedcores += req.coresreq
            self.g_pods[g].append(p)
            self._sizes(g)
        self.p_gids[p] = new
        if old and new and (a := self.g_node[old[0]]) != (b := self.g_node[new[0]]):
            res = self.p_res[p]
            if a in self.n_free:
                self.n_free[a] = self.n_free[a] + res
                for g in self.node_gids[a]:
                    if (entry := self.g_entry[g]) is not None:
                        self._raise_room(entry[0], a)
            if b in self.n_free:
                self.n_free[b] = self.n_free[b] - res
        now_moved = self.moved(p)
        if was_moved != now_moved:
            step = 1 if now_moved else -1
            self.moves_made += step
            wl = self.p_workload[p]
            if wl is not None:
                self.workload_used[wl] = self.workload_used.get(wl, 0) + step

    def apply(self, p: int, target: tuple[int, ...]) -> _Record:
        old = self.p_gids[p]
        self._shift(p, old, target)
        locked = [g for g in target if not self.g_locked[g]]
        for g in locked:
            self.g_locked[g] = True
        record = (p, old, locked, self.p_event[p])
        self.event += 1
        self.p_event[p] = self.event
        for g in (*old, *target):
            self._index(g)
        self._named += 1
        self._states.append((record, self._named))
        return record

    def undo(self, record: _Record) -> None:
        p, old, locked, event = record
        target = self.p_gids[p]
        self._shift(p, target, old)
        for g in locked:
            self.g_locked[g] = False
        self.p_event[p] = event
        for g in (*old, *target):
            self._index(g)
        if self._states[-1][0] is record:
            self._states.pop()
        else:  # out of order: a state never seen before
            self._states = [(r, n) for r, n in self._states if r is not record]
            self.changed()

    def changed(self) -> None:
        """The state changed other than by apply() or undo(): forget the failed searches."""
        self._misses.clear()
        self._groups.clear()

    def reindex(self, g: int) -> None:
        self._index(g)
        self.changed()

    def rollback(self, records: list[_Record]) -> None:
        for r in reversed(records):
            self.undo(r)

    # -- evacuations --
    def candidates(self) -> list[int]:
        """GPUs worth emptying (every pod on them movable), cheapest first: fewest new moves, then
        the lightest GPU, then those on nodes without the CPU or memory for their own pods, then
        the lightest node."""
        # can_move and needs_empty_gpu, inlined: this runs over every GPU once per pass.
        static, at, origin, workload = self.p_static, self.p_gids, self.p_origin, self.p_workload
        reroute, room_left = self.reroute, self.moves_made < self.max_moves
        used, limit_of = self.workload_used, self.options.limit_of

        def movable(p: int) -> bool:
            if not static[p]:
                return False
            if at[p] != origin[p]:
                return reroute
            wl = workload[p]
            return room_left and (wl is None or used.get(wl, 0) < limit_of(wl))

        node_load: dict[str, float] = {}
        keyed: list[tuple[int, int, float, bool, float, int]] = []
        use, locked, pods, dev, g_node = (
            self.g_use,
            self.g_locked,
            self.g_pods,
            self.g_dev,
            self.g_node,
        )
        for g in self.g_maybe:
            u = use[g]
            if u.used <= 0 or (locked[g] and not reroute):
                continue
            here = pods[g]
            if not all(movable(p) for p in here):
                continue
            name = g_node[g]
            load = node_load.get(name)
            if load is None:
                gids = self.node_gids[name]
                total = sum(dev[h].devcore for h in gids)
                load = node_load[name] = sum(use[h].usedcores for h in gids) / total if total else 0.0
            devcore = dev[g].devcore
            fresh = sum(1 for p in here if at[p] == origin[p])
            # Among equals, GPUs on CPU-full nodes go first: a node with room for pods like these
            # is where pods of full nodes can go, so its GPUs are worth more as targets than
            # emptied into each other (subset 10 of the benchmark: emptying a roomy node's 47%
            # GPU into its other 47% GPU left two 47% pods of full nodes nowhere to go). Over
            # the seven openb states +3 GPUs, and +1 on the MILP subsets.
            free = self.n_free.get(name)
            roomy = free is None or all(free.covers(self.p_res[p]) for p in here)
            keyed.append((fresh, len(here), u.usedcores / devcore if devcore else 1.0, roomy, load, g))
        keyed.sort()
        return [k[-1] for k in keyed]

    def kind_of(self, g: int) -> tuple[Any, ...]:
        """What decides whether GPU g can be emptied, but for where it is: its pods' requests,
        selectors and node constraints, and whether they already moved. Cached until its pods
        change (a pod's moved flag changes only with its GPUs)."""
        kind = self.g_kind.get(g)
        if kind is None:
            items = [
                (self.p_req[p], self.p_alloc[p].request.selectors, self.p_sig[p], self.moved(p)) for p in self.g_pods[g]
            ]
            kind = self.g_kind[g] = tuple(sorted(items, key=repr))
        return kind

    def _size(self, p: int) -> tuple[int, int, int]:
        req = self.p_req[p]
        assert req is not None
        return (req.coresreq, req.memory_on(self.g_dev[self.p_gids[p][0]].devmem), -p)

    def evacuate(self, x: int, depth: int, budget: int) -> tuple[list[_Step], list[_Record]] | None:
        """Move every pod off GPU `x`, all or nothing, for at most `budget` more moves, making room
        with ejection chains up to `depth` deep: the steps (already applied) and their undo
        records, or None with nothing changed."""
        pods = sorted(self.g_pods[x], key=self._size, reverse=True)
        if not all(self.can_move(p) for p in pods):
            return None
        self._base = self.moves_made
        self._cap = min(budget, self.max_moves - self.moves_made + sum(1 for p in pods if self.moved(p)))
        if sum(1 for p in pods if not self.moved(p)) > self._cap:
            return None
        self._work = EJECT_SCAN * depth
        records: list[_Record] = []
        steps: list[_Step] = []
        for p in pods:
            if p not in self.g_pods[x]:
                continue  # a multi-GPU pod already moved with another share
            if not self.place(p, frozenset((x,)), depth, steps, records):
                self.rollback(records)
                return None
        if self.moves_made - self._base > self._cap or self.g_pods[x]:
            self.rollback(records)
            return None
        self.evacuated.append(x)
        return steps, records

    def place(self, p: int, exclude: frozenset[int], depth: int, steps: list[_Step], records: list[_Record]) -> bool:
        """Move pod `p` somewhere outside `exclude`: best fit, or else make room on a nearly fitting
        GPU by moving some of its pods on first (recursively, `depth` deep). Applied when True."""
        if not self.can_move(p):  # e.g. a sibling of its workload already took the budget
            return False
        target = self.direct_target(p, exclude)
        if target is not None:
            records.append(self.apply(p, target))
            steps.append((p, target))
            return True
        req = self.p_req[p]
        assert req is not None
        if depth <= 0 or req.nums != 1 or self.moves_made - self._base >= self._cap:
            return False
        nodes = self.eligible_nodes(p)
        typed = not self.p_plain[p]
        here, res = self.g_node[self.p_gids[p][0]], self.p_res[p]
        # Each ejected pod needs room elsewhere: a group makes at most EJECT_GROUP times the
        # largest free compute there is.
        most = EJECT_GROUP * (self.levels[-1] if self.levels else 0)
        for level in range(req.coresreq - 1, max(-1, req.coresreq - most - 1), -1):
            for _, _, t in list(self.buckets.get(level, ())):
                if t in exclude or t in self.p_gids[p]:
                    continue
                if nodes is not None and self.g_node[t] not in nodes and t not in self.p_origin[p]:
                    continue
                d = self.g_dev[t]
                self._work -= 1  # GPUs of other types count too: the scan stays bounded
                self.scanned += 1
                if self._work < 0:
                    return False
                if typed and not self.allowed(p, d):
                    continue
                # Quick check before trying sets: the smaller pods on t must free enough compute.
                room = level
                taken = 0
                for c in self.g_sizes[t]:
                    if c < req.coresreq:
                        room += c
                        taken += 1
                        if taken == EJECT_GROUP:
                            break
                if room < req.coresreq:
                    continue
                # Node CPU and memory: what t's node has free plus all that smaller pods leaving
                # t could give back must cover p (checked before trying any set of them).
                node_room = self.n_free.get(self.g_node[t])
                if node_room is not None and self.g_node[t] != here and not node_room.covers(res):
                    gain = node_room
                    for q in self.g_pods[t]:
                        r = self.p_req[q]
                        if r is not None and r.coresreq < req.coresreq:
                            gain = gain + self.p_res[q]
                    if not gain.covers(res):
                        continue
                for group in self._ejections(p, t):
                    # A chain that needs more moves than the cap leaves is rejected at the end of
                    # evacuate() anyway; near --max-moves such chains were most of the runtime.
                    extra = sum(1 for q in group if not self.moved(q)) + (not self.moved(p))
                    if self.moves_made - self._base + extra > self._cap:
                        continue
                    mark = len(records)
                    ok = all(self.place(q, exclude | {t}, depth - 1, steps, records) for q in group)
                    if ok and self.can_move(p) and self.fits(p, t, req, nodes):
                        records.append(self.apply(p, (t,)))
                        steps.append((p, (t,)))
                        return True
                    self.rollback(records[mark:])
                    del records[mark:], steps[mark:]
                    if self._work < 0:
                        return False
        return False

    def _ejections(self, p: int, t: int) -> list[tuple[int, ...]]:
        """Sets of pods (up to EJECT_GROUP, largest first within a set) whose leaving GPU `t` makes
        room for single-GPU pod `p`: fewest pods first, then least compute moved."""
        # All they depend on: t and its pods, p's kind and node, and what may move (the state and
        # the phase).
        key = (t, self._kind_of_pod(p), self.g_node[self.p_gids[p][0]], self._states[-1][1], self.reroute)
        groups = self._groups.get(key)
        if groups is None:
            groups = self._groups[key] = self._list_ejections(p, t)
        return groups

    def _list_ejections(self, p: int, t: int) -> list[tuple[int, ...]]:
        req = self.p_req[p]
        assert req is not None
        d, u = self.g_dev[t], self.g_use[t]
        sel = self.p_alloc[p].request.selectors
        # Only pods smaller than p: every chain then ends, and no pod is swapped for its equal.
        movable = [
            q
            for q in self.g_pods[t]
            if (r := self.p_req[q]) is not None and r.nums == 1 and r.coresreq < req.coresreq and self.can_move(q)
        ]
        out: list[tuple[int, int, tuple[int, ...]]] = []
        # p also needs CPU and memory on t's node, and the group leaving it gives back at most its
        # own: a group that cannot make that room is never tried (most of them, on busy nodes).
        node = self.g_node[t]
        room = self.n_free.get(node) if node != self.g_node[self.p_gids[p][0]] else None
        need = self.p_res[p]
        if room is not None and not (room + sum((self.p_res[q] for q in movable), ZERO)).covers(need):
            return []
        for k in range(1, 1 + min(EJECT_GROUP, len(movable))):
            for group in itertools.combinations(movable, k):
                if room is not None and not (room + sum((self.p_res[q] for q in group), ZERO)).covers(need):
                    continue
                mem = cores = 0
                for q in group:
                    r = self.p_req[q]
                    assert r is not None
                    mem += r.memory_on(d.devmem)
                    cores += r.coresreq
                after = GpuUsage(u.used - k, u.usedmem - mem, u.usedcores - cores)
                if gpu_fit_reason(req, d, after, sel, self.g_cordoned[t]) is None:
                    out.append((k, cores, tuple(sorted(group, key=self._size, reverse=True))))
            if out:
                break  # fewest pods first: a larger set only if no smaller one makes room
        out.sort()
        return [g for _, _, g in out]

    # -- the moves, in an order where each one is valid --
    def sequence(self) -> list[Move] | None:
        """Every pod away from its original GPUs, as moves in an order where each fits when made:
        the cheapest frees first (:meth:`_cheap_first`), or if that order deadlocks, by when each
        pod's place was chosen, each time taking the first that fits. None if both deadlock."""
        pending = sorted((p for p in range(len(self.p_alloc)) if self.moved(p)), key=lambda p: (self.p_event[p], p))
        final_empty = {g for g in range(len(self.g_dev)) if self.g_counts[g] and not self.g_pods[g]}
        order = self._cheap_first(pending, final_empty)
        if order is None:
            order = self._by_event(pending)
        return None if order is None else self._moves(order, final_empty)

    def _start(self, pending: list[int]) -> tuple[dict[int, GpuUsage], dict[int, int], dict[str, Resources]]:
        """Usage and pods of the GPUs `pending` touches, and node room, as they were before any of
        them moved (a copy of every GPU's usage took a fifth of the ordering's time)."""
        touched = {g for p in pending for g in (*self.p_origin[p], *self.p_gids[p])}
        use = {g: self.g_use[g].copy() for g in touched}
        pods = {g: len(self.g_pods[g]) for g in touched}
        room = dict(self.n_free)
        for p in pending:
            self._step(p, use, pods, room, back=True)
        return use, pods, room

    def _step(
        self, p: int, use: dict[int, GpuUsage], pods: dict[int, int], room: dict[str, Resources], back: bool = False
    ) -> None:
        """Move pod p from its original GPUs to its final ones in (use, pods, room); `back`: undo."""
        req = self.p_req[p]
        assert req is not None
        src, dst = (self.p_gids[p], self.p_origin[p]) if back else (self.p_origin[p], self.p_gids[p])
        self._relocate(room, p, src, dst)
        for g in src:
            _add(use[g], req, self.g_dev[g], -1)
            pods[g] -= 1
        for g in dst:
            _add(use[g], req, self.g_dev[g], +1)
            pods[g] += 1

    def _by_event(self, pending: list[int]) -> list[int] | None:
        use, pods, room = self._start(pending)
        left = list(pending)
        order: list[int] = []
        while left:
            chosen = next((i for i, p in enumerate(left) if self._fits_now(p, use, room)), None)
            if chosen is None:
                return None
            p = left.pop(chosen)
            self._step(p, use, pods, room)
            order.append(p)
        return order

    def _cheap_first(self, pending: list[int], final_empty: set[int]) -> list[int] | None:
        """An order that frees GPUs cheapest first, so that a plan cut short (``defrag --apply``
        stopped, or only its first moves applied) has freed the most for its moves: each time, of
        the GPUs the plan empties, one whose remaining pods can all move now, fewest first (those
        whose moves take an empty GPU last, then by when their places were chosen); when none can,
        the first move by that time that fits (it makes room). A GPU that could not be emptied is
        looked at again only once room grows where its pods go. The order the places were chosen
        kept moves that make room early: over the seven openb states the longest prefix at no
        more than 1.3 moves per freed GPU freed 26-45 GPUs."""
        use, pods, room = self._start(pending)
        rank = {p: i for i, p in enumerate(pending)}
        left = set(pending)
        outs: dict[int, list[int]] = {}  # GPU the plan empties -> the pods leaving it, by rank
        for p in pending:
            for g in self.p_origin[p]:
                if g in final_empty:
                    outs.setdefault(g, []).append(p)
        of_pod: dict[int, list[int]] = {}
        by_gpu: dict[int, set[int]] = {}  # a GPU the pods of these emptied GPUs go to
        by_node: dict[str, set[int]] = {}
        for x, ps in outs.items():
            for p in ps:
                of_pod.setdefault(p, []).append(x)
                for g in self.p_gids[p]:
                    by_gpu.setdefault(g, set()).add(x)
                by_node.setdefault(self.g_node[self.p_gids[p][0]], set()).add(x)
        stale: set[int] = set()
        order: list[int] = []

        def commit(made: list[int]) -> None:
            for p in made:
                left.discard(p)
                order.append(p)
                stale.difference_update(of_pod.get(p, ()))
                for g in self.p_origin[p]:
                    stale.difference_update(by_gpu.get(g, ()))
                a, b = self.g_node[self.p_origin[p][0]], self.g_node[self.p_gids[p][0]]
                if a != b:
                    stale.difference_update(by_node.get(a, ()))

        while left:
            keyed = []
            for x, ps in outs.items():
                if x in stale:
                    continue
                group = [p for p in ps if p in left]
                if group:
                    takes = any(pods[g] == 0 for p in group for g in self.p_gids[p])
                    keyed.append((len(group), takes, rank[group[0]], x, group))
            keyed.sort(key=lambda k: k[:4])
            for *_, x, group in keyed:
                made: list[int] = []
                for p in group:
                    if not self._fits_now(p, use, room):
                        break
                    self._step(p, use, pods, room)
                    made.append(p)
                if len(made) == len(group):
                    commit(made)
                    break
                for p in reversed(made):
                    self._step(p, use, pods, room, back=True)
                stale.add(x)
            else:
                p = next((p for p in pending if p in left and self._fits_now(p, use, room)), -1)
                if p < 0:
                    return None
                self._step(p, use, pods, room)
                commit([p])
        return order

    def _moves(self, order: list[int], final_empty: set[int]) -> list[Move]:
        """The moves of `order` (valid in that order), with the GPUs each frees and takes."""
        use, pods, room = self._start(order)
        start_empty = {g for g, n in pods.items() if self.g_counts[g] and n == 0}
        out: list[Move] = []
        for p in order:
            target, origin = self.p_gids[p], self.p_origin[p]
            self._step(p, use, pods, room)
            frees = [self.label(g) for g in origin if pods[g] == 0 and g in final_empty and g not in start_empty]
            takes = []
            for g in target:
                if g in start_empty and g not in final_empty:
                    takes.append(self.label(g))
                    start_empty.discard(g)  # taken once, by the first pod in
            reason = self.p_reason.get(p) or (
                f"empty {self.label(origin[0])}"
                if all(g in final_empty for g in origin)
                else f"make room ({self.label(origin[0])} stays in use)"
            )
            out.append(
                Move(
                    pod=self.p_alloc[p].key,
                    workload=self.p_workload[p],
                    from_node=self.p_alloc[p].node,
                    from_gpus=tuple(sorted(self.g_dev[g].index for g in origin)),
                    to_node=self.g_node[target[0]],
                    to_gpus=tuple(self.g_dev[g].index for g in target),
                    to_uuids=tuple(self.g_dev[g].uuid for g in target),
                    reason=reason,
                    frees=tuple(frees),
                    takes=tuple(takes),
                )
            )
        return out

    def fits_back(self, p: int, gids: tuple[int, ...]) -> bool:
        """Pod p, now elsewhere, would fit GPUs `gids` (and their node) again as things stand."""
        req = self.p_req[p]
        assert req is not None
        sel = self.p_alloc[p].request.selectors
        node = self.g_node[gids[0]]
        room = self.n_free.get(node)
        if room is not None and node != self.g_node[self.p_gids[p][0]] and not room.covers(self.p_res[p]):
            return False
        return all(gpu_fit_reason(req, self.g_dev[g], self.g_use[g], sel, self.g_cordoned[g]) is None for g in gids)

    def _relocate(self, room: dict[str, Resources], p: int, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        """Pod p's CPU, memory and slot go from the node of GPUs `old` to that of `new`, in `room`."""
        a, b = self.g_node[old[0]], self.g_node[new[0]]
        if a != b:
            if a in room:
                room[a] = room[a] + self.p_res[p]
            if b in room:
                room[b] = room[b] - self.p_res[p]

    def _fits_now(self, p: int, use: Mapping[int, GpuUsage], room: dict[str, Resources]) -> bool:
        """Pod p fits its final GPUs in the usage `use` (with itself taken off its original GPUs),
        and its final node has room (`room`) for its CPU, memory and slot."""
        req = self.p_req[p]
        assert req is not None
        target_node = self.g_node[self.p_gids[p][0]]
        free = room.get(target_node)
        if free is not None and target_node != self.g_node[self.p_origin[p][0]] and not free.covers(self.p_res[p]):
            return False
        sel = self.p_alloc[p].request.selectors
        for g in self.p_gids[p]:
            u = use[g].copy()
            if g in self.p_origin[p]:
                _add(u, req, self.g_dev[g], -1)
            if gpu_fit_reason(req, self.g_dev[g], u, sel, self.g_cordoned[g]) is not None:
                return False
        return True

    def snapshot(self) -> list[tuple[int, ...]]:
        return list(self.p_gids)

    def restore(self, places: list[tuple[int, ...]], events: list[int]) -> None:
        for p, target in enumerate(places):
            if self.p_gids[p] != target:
                old = self.p_gids[p]
                self._shift(p, old, target)
                for g in (*old, *target):
                    self._index(g)
        self.p_event[:] = events
        self.changed()


def _pareto(points: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The points no other point has as much of both coordinates as."""
    front: list[tuple[int, int]] = []
    best = -1
    for c, m in sorted(points, reverse=True):
        if m > best:
            front.append((c, m))
            best = m
    return front


def _add(u: GpuUsage, req: GpuRequest, d: GpuDevice, sign: int) -> None:
    u.used += sign
    u.usedmem += sign * req.memory_on(d.devmem)
    u.usedcores += sign * req.coresreq


def _evacuations(engine: _Engine, options: PlanOptions, accept: Callable[[list[_Record], int], bool] | None) -> None:
    """Empty candidates cheapest first, in passes that allow one more move each: a GPU with n pods
    to move is tried first with n moves (direct best fit), then n + 1, n + 2, ... (ejection chains
    up to MAX_DEPTH deep), up to max_moves_per_gpu. `accept` (objective fragmentation) may veto."""
    cap = max(1, options.max_moves_per_gpu)
    for budget in range(1, cap + 1):
        if budget > 1 and budget > engine.max_moves - engine.moves_made:
            # Every GPU this pass could empty within what --max-moves leaves was tried by the
            # pass with that budget; trying them all again (they fail at the cap) took seconds.
            break
        # A GPU whose pods are like those of one that could not be emptied since the last change
        # cannot be emptied either (up to tie-breaks): skip it, which keeps deep searches cheap.
        failed: dict[tuple[Any, ...], int] = {}
        changes = 0
        for x in engine.candidates():
            if engine.moves_made >= engine.max_moves:
                return
            if engine.scan_limit is not None and engine.scanned >= engine.scan_limit:
                return
            if not engine._open(x) or (engine.g_locked[x] and not engine.reroute):
                continue
            new = sum(1 for p in engine.g_pods[x] if not engine.moved(p))
            if new > budget or (new == 0 and budget > 1):
                continue
            # Near the --max-moves limit most GPUs need more moves than are left: a search for
            # them is bound to fail, and used to dominate the runtime of a limited plan.
            if new > engine.max_moves - engine.moves_made:
                continue
            kind = engine.kind_of(x)
            if failed.get(kind) == changes:
                continue
            done = engine.evacuate(x, min(budget - new, MAX_DEPTH), budget)
            if done is not None and accept is not None and not accept(done[1], x):
                engine.rollback(done[1])
                engine.evacuated.pop()
                done = None
            if done is None:
                failed[kind] = changes
            else:
                changes += 1


def _free_gpus(engine: _Engine, options: PlanOptions, mix: WorkloadMix) -> list[Move]:
    _evacuations(engine, options, None)
    # Where nodes are short of CPU or memory, many GPUs cannot be emptied all at once, but single
    # moves into other GPUs' slack (each lowering FGD) still empty some, and GPUs of one or two
    # pods can empty together into an empty GPU of a roomy node: on the openb example the
    # evacuations free 100 GPUs, single moves 54 more, pairing 26 and the second phase 14.
    fgd = _Fgd(engine, mix)
    _single_moves(engine, options, fgd, {n: fgd.node(n) for n in engine.node_gids}, only_frees=True)
    _fresh_gpus(engine)
    # The first phase's plan is ordered only if it is the answer: a third of the ordering's time.
    places, events = engine.snapshot(), list(engine.p_event)
    # Second phase: pods already moving may be given another place at no extra move, and GPUs
    # that received pods may be emptied after all; ordering is redone at the end.
    engine.reroute = True
    # The second phase gains little (nothing on most states) but can search far longer than the
    # first when node CPU and memory are tight: it may scan a quarter as many GPUs as the first
    # did (half freed no more GPUs over the seven openb states, an eighth 21 fewer), and at least
    # what one evacuation may, so a first phase that needed no scan leaves room.
    engine.scan_limit = engine.scanned + max(engine.scanned // 4, EJECT_SCAN * MAX_DEPTH)
    freed = len(engine.evacuated)
    _evacuations(engine, options, None)
    engine.reroute = False
    _seeded(engine, options)
    if len(engine.evacuated) > freed:
        second = engine.sequence()
        if second is not None:
            return second
    # Nothing more freed (every later try was rolled back), or no order makes every step of the
    # second phase's plan fit: the first phase's plan.
    engine.restore(places, events)
    first = engine.sequence()
    assert first is not None  # built move by move, so the build order itself is valid
    return first


def _roomy_empties(engine: _Engine) -> list[int]:
    """Empty GPUs that count as free and received nothing, those of the roomiest nodes (CPU, then
    memory) first: where pods of CPU-full nodes can go together."""

    def roomiest(g: int) -> tuple[int, int, int]:
        cpu, mem = engine._node_room(engine.g_node[g])
        return (-cpu, -mem, g)

    counts, use, locked = engine.g_counts, engine.g_use, engine.g_locked
    return sorted((g for g in range(len(counts)) if counts[g] and use[g].used == 0 and not locked[g]), key=roomiest)


def _fresh_gpus(
    engine: _Engine,
    patience: int = 16,
    most_pods: int = 2,
    accept: Callable[[list[_Record], int], bool] | None = None,
) -> None:
    """GPUs of a few pods (at most `most_pods`) that could not be emptied into used GPUs (on busy
    nodes, mostly for want of node CPU or memory) may still be emptied *together* into an empty
    GPU of a roomy node: k of them there free k GPUs and take one, k - 1 GPUs for their pods'
    moves. First fit decreasing by the GPUs' compute into the empty GPUs, roomiest node first; a
    GPU is moved all or nothing, and an empty GPU that would take fewer than two stays empty.
    Gives up after `patience` empty GPUs in a row that took nothing (the rest are alike or worse).
    `accept` (objective fragmentation) may veto a filled GPU, as it vetoes evacuations."""
    n = len(engine.g_dev)

    def movable(p: int) -> bool:
        r = engine.p_req[p]
        return r is not None and r.nums == 1 and not engine.moved(p) and engine.can_move(p)

    items = [
        g
        for g in range(n)
        if engine.g_counts[g]
        and 0 < len(engine.g_pods[g]) <= most_pods
        and not engine.g_locked[g]
        and all(movable(p) and not engine.needs_empty_gpu(p) for p in engine.g_pods[g])
    ]
    if len(items) < 2:
        return
    load = {g: engine.g_use[g].usedcores for g in items}
    items.sort(key=lambda g: (-load[g], len(engine.g_pods[g]), g))
    # Compute of the GPUs still waiting, ascending: one opens an empty GPU only if another is small
    # enough to sit beside it (else the 81% pods, first in line, took every empty GPU in turn and
    # failed, and the 47% ones behind them never got one).
    sizes = sorted(load.values())

    def partner(size: int, room: int) -> bool:
        if len(sizes) < 2:
            return False
        other = sizes[1] if sizes[0] == size else sizes[0]
        return other <= room - size

    idle = 0
    for e in _roomy_empties(engine):
        if len(items) < 2 or idle >= patience or engine.max_moves - engine.moves_made < 2:
            return
        d = engine.g_dev[e]
        taken: list[tuple[int, list[_Record]]] = []
        for g in items:
            room = d.devcore - engine.g_use[e].usedcores
            if room < sizes[0]:
                break  # no GPU still waiting is small enough
            if load[g] > room or (not taken and not partner(load[g], room)):
                continue
            pods = sorted(engine.g_pods[g], key=engine._size, reverse=True)
            if engine.max_moves - engine.moves_made < len(pods):
                continue
            records: list[_Record] = []
            for p in pods:
                req = engine.p_req[p]
                assert req is not None
                if not engine.can_move(p) or not engine.fits(p, e, req, engine.eligible_nodes(p)):
                    break
                records.append(engine.apply(p, (e,)))
            if len(records) < len(pods):
                engine.rollback(records)
                continue
            taken.append((g, records))
        # k GPUs emptied for one taken: k - 1 freed, within max_moves_per_gpu moves each.
        moves = sum(len(records) for _, records in taken)
        if (
            len(taken) < 2
            or moves > max(1, engine.options.max_moves_per_gpu) * (len(taken) - 1)
            or (accept is not None and not accept([r for _, records in taken for r in records], e))
        ):
            for _, records in reversed(taken):
                engine.rollback(records)
            idle += 1
            continue
        idle = 0
        for g, records in taken:
            items.remove(g)
            del sizes[bisect.bisect_left(sizes, load[g])]
            for p, _, _, _ in records:
                engine.p_reason[p] = f"empty {engine.label(g)}, sharing an empty GPU of a roomier node"


def _seeded(engine: _Engine, options: PlanOptions, patience: int = 2, most_pods: int = 2, tries: int = 40) -> None:
    """Evacuations that may use one empty GPU `e` of a roomy node as a target, kept if `e` so taken
    lets at least two GPUs empty. Pairing (above) moves whole GPUs into an empty one; this also
    covers a GPU split between `e` and another GPU, and a pod ejected into `e` to make room for a
    larger one that frees its own GPU (a 46% and a 47% pod share `e`, and the 47%'s place takes a
    65% pod). GPUs of at most `most_pods` pods whose pods may go to `e`'s node, heaviest first
    (first fit decreasing into `e`), `tries` of them per empty GPU, each with one extra move for a
    chain; one empty GPU per node and GPU model; gives up after `patience` empty GPUs in a row that
    were not worth taking. Found nothing on the full openb states (pairing got there first) but
    frees a GPU on small clusters, for the cost of a few failed evacuations. A patience of 4 cost
    0.3-0.45 s per full state (a fifth of the plan) for nothing; 1, 2 and 4 free the same GPUs on
    the states and the MILP subsets, and 2 leaves a second GPU model its chance. The candidates
    are listed once while every try is taken back (nothing changed)."""
    cap = max(1, options.max_moves_per_gpu)
    if cap < 2:
        return
    seen: set[tuple[str, str, int]] = set()
    idle = 0
    listed: list[int] | None = None  # candidates(), kept while every try is rolled back
    for e in _roomy_empties(engine):
        d, node = engine.g_dev[e], engine.g_node[e]
        if (node, d.type, d.devmem) in seen:
            continue
        seen.add((node, d.type, d.devmem))
        if idle >= patience or engine.max_moves - engine.moves_made < 3:
            return
        if listed is None:
            # Out of the second round, candidates() holds no GPU with a pod already moving.
            listed = engine.candidates()
        items = [
            x
            for x in listed
            if len(engine.g_pods[x]) <= most_pods
            and all((ns := engine.eligible_nodes(p)) is None or node in ns for p in engine.g_pods[x])
        ]
        items.sort(key=lambda x: (-engine.g_use[x].usedcores, x))
        engine.g_seed[e] = True
        engine.reindex(e)
        mark, base = len(engine.evacuated), engine.moves_made
        records: list[_Record] = []
        for x in items[:tries]:
            if engine.moves_made >= engine.max_moves:
                break
            if not engine._open(x) or engine.g_locked[x]:
                continue
            done = engine.evacuate(x, 1, len(engine.g_pods[x]) + 1)
            if done is not None:
                records.extend(done[1])
        engine.g_seed[e] = False
        freed = len(engine.evacuated) - mark
        moves = engine.moves_made - base
        # Evacuations that left `e` alone stand on their own; with `e` taken, only a net gain.
        if not engine.g_pods[e] or (freed >= 2 and moves <= cap * (freed - 1)):
            idle = 0 if freed else idle + 1
            if freed:
                listed = None
        else:
            engine.rollback(records)
            del engine.evacuated[mark:]
            idle += 1
        engine.reindex(e)


# ---- fragmentation objective ----------------------------------------------------------------------
class _Fgd:
    """FGD of one node from the engine's arrays, with fit outcomes cached per GPU state."""

    def __init__(self, engine: _Engine, mix: WorkloadMix) -> None:
        self.e = engine
        self.mix = mix
        self.fits = FitTable(mix)
        self.schedulable = {n: node_schedulable(s) for n, s in engine.state.nodes.items()}

    def node(self, name: str) -> float:
        e = self.e
        shares: list[float] = []
        ids: list[int] = []
        for g in e.node_gids[name]:
            d, u = e.g_dev[g], e.g_use[g]
            shares.append(free_share(d, u))
            ids.append(self.fits.state_id(d, u, e.g_cordoned[g]))
        total = sum(shares)
        if not self.schedulable[name]:
            return total
        fgd = 0.0
        for (task, prob), row in zip(self.mix.tasks, self.fits.table[1:], strict=True):
            usable, unusable = 0, 0.0
            for sid, share in zip(ids, shares, strict=True):
                if row[sid]:
                    usable += 1
                else:
                    unusable += share
            fgd += prob * (total if usable < task.request.nums else unusable)
        return fgd


def _fragmentation(engine: _Engine, options: PlanOptions, mix: WorkloadMix) -> list[Move]:
    fgd = _Fgd(engine, mix)
    committed = {n: fgd.node(n) for n in engine.node_gids}

    def accept(records: list[_Record], x: int) -> bool:
        touched = sorted({engine.g_node[g] for p, old, _, _ in records for g in (*old, *engine.p_gids[p])})
        after = {n: fgd.node(n) for n in touched}
        moves = sum(1 for p in {r[0] for r in records} if engine.moved(p))
        if sum(committed[n] - after[n] for n in touched) < options.min_fgd_gain * max(1, moves):
            return False
        committed.update(after)
        return True

    _evacuations(engine, options, accept)
    _fresh_gpus(engine, accept=accept)
    _single_moves(engine, options, fgd, committed)
    moves = engine.sequence()
    assert moves is not None  # built move by move, so the build order itself is valid
    return moves


def _single_moves(
    engine: _Engine, options: PlanOptions, fgd: _Fgd, committed: dict[str, float], only_frees: bool = False
) -> None:
    """Moves of single pods that lower FGD on their own (e.g. a small pod into another GPU's slack).

    With `only_frees` (objective free-gpus) the moves are a means: afterwards, latest first, each
    one that did not leave its GPU empty is taken back if its pod still fits where it was, so only
    the moves that free GPUs, or make the room that others use to free them, remain."""
    made: list[tuple[int, _Record]] = []
    order = sorted((p for p in range(len(engine.p_alloc)) if engine.can_move(p)), key=lambda p: (engine._size(p), p))
    for p in order:
        if engine.moves_made >= engine.max_moves:
            break  # with only_frees, the moves that freed nothing still go back below
        if not engine.can_move(p) or engine.moved(p) or engine.needs_empty_gpu(p):
            continue
        source = engine.p_gids[p]
        target = engine.best_target(p, frozenset(source))
        if target is None:
            continue
        record = engine.apply(p, target)
        touched = sorted({engine.g_node[g] for g in (*source, *target)})
        after = {n: fgd.node(n) for n in touched}
        delta = sum(committed[n] - after[n] for n in touched)
        if delta >= options.min_fgd_gain:
            committed.update(after)
            engine.p_reason[p] = f"lower FGD by {delta:.2f} GPU"
            made.append((p, record))
        else:
            engine.undo(record)
    if not only_frees:
        return
    for p, record in reversed(made):
        origin = record[1]
        if all(not engine.g_pods[g] for g in origin) or not engine.fits_back(p, origin):
            engine.p_reason[p] = f"empty {engine.label(origin[0])}" if not engine.g_pods[origin[0]] else "make room"
            continue
        engine.undo(record)
        engine.p_reason.pop(p, None)


# ---- public API -----------------------------------------------------------------------------------
def plan(state: ClusterState, options: PlanOptions | None = None) -> Plan:
    """An ordered, valid list of moves for `options.objective`, with the metrics before and after.

    `state` is not modified. Deterministic: the same state and options give the same plan.
    """
    options = options or PlanOptions()
    if options.objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {options.objective!r}")
    if options.max_moves is not None and options.max_moves < 0:
        raise ValueError("max_moves must be >= 0")
    started = time.perf_counter()
    mix = options.mix or mix_from_state(state)
    if options.solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {options.solver!r}")
    base = replacement_state(state)
    engine = _Engine(base, options)
    solver, note = "greedy", ""
    if options.objective == "free-gpus":
        moves = tuple(_free_gpus(engine, options, mix))
        if options.solver != "greedy":
            moves, solver, note = _exact(base, engine, options, moves)
    else:
        moves = tuple(_fragmentation(engine, options, mix))
    before = cluster_metrics(state, mix)
    touched = {n for m in moves for n in (m.from_node, m.to_node)}
    after = cluster_metrics(apply_moves(state, moves), mix, same=before, changed=touched)
    return Plan(
        objective=options.objective,
        moves=moves,
        before=PlanMetrics.of(before),
        after=PlanMetrics.of(after),
        immovable=engine.immovable,
        seconds=time.perf_counter() - started,
        solver=solver,
        solver_note=note,
    )


class SolverUnavailable(ValueError):
    """--solver exact without HiGHS installed."""


def _exact(
    state: ClusterState, engine: _Engine, options: PlanOptions, greedy: tuple[Move, ...]
) -> tuple[tuple[Move, ...], str, str]:
    """The exact planner's moves when they free more GPUs than the greedy plan's, else those."""
    from hami_place_core import planner_exact

    pairs = sum(engine.p_static) * sum(engine.g_counts)
    limit = planner_exact.EXACT_MAX_PAIRS if options.solver == "exact" else planner_exact.EXACT_AUTO_PAIRS
    if pairs > limit:
        # Checked before importing HiGHS: the shipped openb example has 21.5 million pairs.
        why = f"state too large for {options.solver} ({pairs:,} pod-GPU pairs to consider, over {limit:,})"
        return greedy, "greedy", f"exact planner: {why}"

    if not planner_exact.available():
        if options.solver == "exact":
            raise SolverUnavailable(
                "the exact planner needs HiGHS: pip install 'hami-place[exact]' (highspy and numpy)"
            )
        return greedy, "greedy", "exact planner not installed (highspy)"
    floor = sum(len(m.frees) - len(m.takes) for m in greedy)
    outcome = planner_exact.solve(_Engine(state, options), options, floor, seed=greedy)
    if outcome.moves is None:
        return greedy, "greedy", f"exact planner: {outcome.why}"
    return tuple(outcome.moves), "exact", f"exact planner: {outcome.why}"


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
        alloc = remove_pod(out, m.pod)
        if alloc is None:
            raise ValueError(f"pod {m.pod} is not in the state")
        add_pod(out, moved_allocation(alloc, out.nodes[m.to_node], m.to_gpus))
        _move_requests(out, m.pod, m.to_node)
    return out


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
        why = immovable_reason(alloc, options.excluded_namespaces, out.problems)
        if why is not None:
            errors.append(f"{where}: pod may not be moved: {why}")
        if m.pod in moved:
            errors.append(f"{where}: pod moved twice")
        moved.add(m.pod)
        wl = f"{alloc.namespace}/{alloc.owner_kind}/{alloc.owner_name}" if alloc.owner_kind else None
        if wl is not None:
            used[wl] = used.get(wl, 0) + 1
            if used[wl] > options.limit_of(wl):
                errors.append(f"{where}: workload {wl} moved {used[wl]} times (limit {options.limit_of(wl)})")
        here = out.nodes.get(alloc.node)
        if alloc.node != m.from_node or here is None:
            errors.append(f"{where}: pod is on {alloc.node}, not {m.from_node}")
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
        held = out.pod_requests.get(m.pod)
        room = out.free_resources(m.to_node)
        if held is not None and room is not None and held[0] != m.to_node:
            short = room.shortfall(held[1])
            if short is not None:
                errors.append(f"{where}: node {m.to_node}: {short}")
        _move_requests(out, m.pod, m.to_node)
        remove_pod(out, m.pod)
        result = fit_pod(alloc.request, [g for g in gpus if g is not None], node.usage, node.cordoned, exact=True)
        if not result.ok:
            errors.append(f"{where}: does not fit on {m.to_node} {m.gpu_devices}: {result.message()}")
        add_pod(out, moved_allocation(alloc, node, m.to_gpus))
        for n in {m.to_node, m.from_node}:
            s = out.nodes.get(n)
            for d in s.devices if s else ():
                u = s.usage[d.uuid] if s else GpuUsage()
                if u.used > d.count or u.usedmem > d.devmem or u.usedcores > d.devcore:
                    errors.append(f"{where}: {n} gpu-{d.index} oversubscribed ({u})")
    return errors
