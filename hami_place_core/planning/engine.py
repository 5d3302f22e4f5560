"""The planning engine: GPUs and pods as integer ids over arrays, with best-fit buckets keyed by free
compute, and every change (a pod given a new place) applied and undone in constant bookkeeping.

The engine holds the *final* place of every pod: a pod away from its original GPUs is a move. The
searches over it live in the modules above: :mod:`~hami_place_core.planning.targets` (best fit),
:mod:`~hami_place_core.planning.evacuation` (emptying a GPU, ejection chains),
:mod:`~hami_place_core.planning.ordering` (the moves in an order where each one is valid) and the
passes and searches over them. They read the engine's arrays directly (their inner loops would pay
for a call per element) but change the engine only through its verbs (apply and undo a move, seed
an empty GPU, allow reroutes, take an evacuation back, remember a failed search...): no other
module writes its attributes, as a unit test (tests/unit/test_engine_verbs.py) checks.

It is two classes, split by what they do: :class:`EngineArrays`, the arrays as built from a state
and their best-fit index, and :class:`Engine`, the questions asked of them and the verbs.
"""

from __future__ import annotations

import bisect
from typing import Any

from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import GpuUsage, gpu_fit_reason
from hami_place_core.node_resources import Resources
from hami_place_core.planning.constraints import (
    SCHEDULING_EFFECTS,
    constraint_signature,
    immovable_reason,
    node_refusal,
    node_schedulable,
)
from hami_place_core.planning.model import PlanOptions
from hami_place_core.requests import DeviceSelectors, GpuRequest
from hami_place_core.state import ClusterState, PodAllocation

UNLIMITED = 1 << 62  # the room of a node that states no allocatable
Entry = tuple[int, int, int]  # (not locked, -pods, gid): the order of GPUs within a free-compute level
Record = tuple[int, tuple[int, ...], list[int], int]  # undo: pod, GPUs before, GPUs it locked, event before
Step = tuple[int, tuple[int, ...]]  # pod, target GPUs


def why_immovable(
    state: ClusterState,
    options: PlanOptions,
    alloc: PodAllocation,
    gids: tuple[int, ...],
    workload: str | None,
) -> str | None:
    """Why a pod on GPUs `gids` stays where it is (None: it may move)."""
    why = options.kept_pods.get(alloc.key) or immovable_reason(alloc, options.excluded_namespaces, state.problems)
    if why is None and len(gids) != len(alloc.per_gpu):
        why = "its allocation names a GPU its node does not register"
    if (
        why is None
        and workload is not None
        and options.workload_moves_used.get(workload, 0) >= options.limit_of(workload)
    ):
        why = "its workload has used its disruption budget"
    return why


class EngineArrays:
    """GPUs (``g_*``, by gid: nodes by name, each node's devices in order) and pods (``p_*``, by pid:
    pods by key) as parallel arrays, indexed for best fit: built from a state, and the index kept.

    The searches read these arrays directly (the hot loops would pay for a method call per
    element) and change them only through :class:`Engine`'s verbs.
    """

    # -- GPUs --
    g_node: list[str]
    g_dev: list[GpuDevice]
    g_use: list[GpuUsage]
    g_cordoned: list[frozenset[str]]
    g_pods: list[list[int]]
    g_counts: list[bool]  # an empty GPU here counts as a whole free GPU
    g_locked: list[bool]  # received a pod (first phase: never emptied afterwards)
    g_seed: list[bool]  # an empty GPU offered as a target (see passes.seeded)
    g_sizes: list[list[int]]  # compute of the pods on each GPU, largest first
    node_gids: dict[str, list[int]]
    # -- pods --
    p_alloc: list[PodAllocation]
    p_origin: list[tuple[int, ...]]
    p_gids: list[tuple[int, ...]]
    p_req: list[GpuRequest | None]
    p_movable: list[bool]
    p_event: list[int]  # when the pod was last given a new place (sequencing priority)
    p_workload: list[str | None]
    p_sig: list[str]
    p_reason: dict[int, str]
    p_static: list[bool]  # movable at all, with a request the engine moves, not one only an empty GPU takes
    p_res: list[Resources]
    p_types: list[frozenset[str] | None]  # GPU types the pod's use-/nouse-gputype accept (None: no type selector)
    p_plain: list[bool]  # no GPU type or UUID selector at all
    immovable: tuple[tuple[str, int], ...]  # reason -> number of pods, most common first

    def __init__(self, state: ClusterState, options: PlanOptions) -> None:
        self.state = state
        self.options = options
        gid_of = self._add_gpus(state)
        self._add_pods(state, options, gid_of)
        self._add_room(state)
        self._start_counts(options)
        self._add_selectors(state)
        self._build_index()
        self._start_search()

    # -- building --
    def _add_gpus(self, state: ClusterState) -> dict[str, int]:
        """Every node's GPUs, nodes by name; the GPU id of every UUID."""
        self.g_node, self.g_dev, self.g_use, self.g_cordoned, self.g_pods = [], [], [], [], []
        self.g_counts, self.g_locked, self.g_seed = [], [], []
        self.node_gids = {}
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
        return gid_of

    def _add_pods(self, state: ClusterState, options: PlanOptions, gid_of: dict[str, int]) -> None:
        """Every pod holding GPUs of a known node, pods by key, and why those that may not move stay."""
        self.p_alloc, self.p_origin, self.p_gids, self.p_req, self.p_movable = [], [], [], [], []
        self.p_event, self.p_workload, self.p_sig = [], [], []
        self.p_reason = {}
        reasons: dict[str, int] = {}
        for key in sorted(state.pods):
            alloc = state.pods[key]
            if alloc.node not in state.nodes or not alloc.per_gpu:
                continue
            gids = tuple(sorted(gid_of[u] for u in alloc.per_gpu if u in gid_of))
            workload = (
                f"{alloc.namespace}/{alloc.owner_kind}/{alloc.owner_name}" if alloc.owner_kind is not None else None
            )
            why = why_immovable(state, options, alloc, gids, workload)
            if why is not None:
                head = why.split(":")[0]
                reasons[head] = reasons.get(head, 0) + 1
            self._add_pod(alloc, gids, workload, why is None)
        self.immovable = tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))

    def _add_pod(self, alloc: PodAllocation, gids: tuple[int, ...], workload: str | None, movable: bool) -> None:
        pid = len(self.p_alloc)
        gpu = alloc.request.gpu_containers
        self.p_alloc.append(alloc)
        self.p_origin.append(gids)
        self.p_gids.append(gids)
        self.p_req.append(gpu[0] if len(gpu) == 1 else None)
        self.p_movable.append(movable)
        self.p_event.append(0)
        self.p_workload.append(workload)
        self.p_sig.append(constraint_signature(alloc) if movable else "")
        for g in gids:
            self.g_pods[g].append(pid)

    def _add_room(self, state: ClusterState) -> None:
        # Room for CPU, memory and pod slots (kube-scheduler's NodeResourcesFit) on nodes that state
        # their allocatable, kept for the pods' current places like the GPU usage.
        self.n_free: dict[str, Resources] = {}
        for name in state.nodes:
            free = state.free_resources(name)
            if free is not None:
                self.n_free[name] = free
        self.p_static = [
            m and r is not None and not (r.coresreq >= 100 or r.mem_percentage == 100)
            for m, r in zip(self.p_movable, self.p_req, strict=True)
        ]
        self.p_res = [state.requests_of(a.key) for a in self.p_alloc]
        self.g_sizes = [[] for _ in self.g_dev]
        for g in range(len(self.g_dev)):
            self._sizes(g)

    def _start_counts(self, options: PlanOptions) -> None:
        self.workload_used: dict[str, int] = dict(options.workload_moves_used)
        self.moves_made = 0  # pods away from their original GPUs
        self.max_moves = (1 << 30) if options.max_moves is None else options.max_moves
        self.reroute = False  # second phase: pods already moved may be given another place
        self.event = 0

    def _add_selectors(self, state: ClusterState) -> None:
        self.sig_nodes: dict[str, frozenset[str]] = {}
        types = sorted({d.type for d in self.g_dev})
        allowed: dict[DeviceSelectors, frozenset[str]] = {}
        self.p_types, self.p_plain = [], []
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

    def _build_index(self) -> None:
        # best-fit buckets: free compute -> sorted entries of GPUs that are in use and may receive
        self.buckets: dict[int, list[Entry]] = {}
        self.levels: list[int] = []  # the free-compute levels that have GPUs, ascending
        self.g_entry: list[tuple[int, Entry] | None] = [None] * len(self.g_dev)
        # Per level, the (CPU, memory) room of its GPUs' nodes as a Pareto front: at least as much
        # as any of them has (raised when a node gains room or a GPU joins, made exact by a scan
        # that finds nothing). A pod that no point of it covers skips the level without looking at
        # its GPUs. On busy clusters most searches fail for want of node CPU or memory, and each
        # used to scan every GPU in use.
        self.level_room: dict[int, list[tuple[int, int]]] = {}
        for g in range(len(self.g_dev)):
            self._index(g)
        self.evacuated: list[int] = []  # GPUs emptied, in order
        # GPUs that can ever be worth emptying (evacuation.candidates() looks at no other): a pod
        # that may not move, or asks for all the cores (only an ejection could move it, and
        # ejections move pods smaller than one under 100%), stays, so its GPU is never emptied
        # (about half the GPUs in use on the openb states hold one).
        self.g_maybe: list[int] = [
            g
            for g in range(len(self.g_dev))
            if self.g_counts[g]
            and not any(
                not self.p_movable[p] or (r := self.p_req[p]) is None or r.coresreq >= 100 for p in self.g_pods[g]
            )
        ]

    def _start_search(self) -> None:
        self.g_kind: dict[int, tuple[Any, ...]] = {}  # evacuation.kind_of, per GPU
        self.scanned = 0  # GPUs the ejection scans looked at, over the whole plan
        self.scan_limit: int | None = None
        # Failed best-fit searches, remembered per kind of pod until the state changes. Inside an
        # ejection scan most tries at placing a small pod fail, and pods of one kind fail alike:
        # on gpuspec10 three in four of them repeated a failure already seen in the same state.
        # A state is named by the stack of applied records (an undo in reverse order brings its
        # name back); any other change forgets everything.
        self.named_states: list[tuple[Record | None, int]] = [(None, 0)]
        self.names_used = 0
        self.misses: dict[tuple[Any, ...], frozenset[int]] = {}  # targets.direct_target
        # Likewise the ejection sets of a GPU for a kind of pod: the scans of one evacuation after
        # another look at the same nearly fitting GPUs (on gpuspec10 nearly half the sets listed
        # had been listed before, in the same state).
        self.known_ejections: dict[tuple[Any, ...], list[tuple[int, ...]]] = {}
        self.p_kind: dict[int, tuple[Any, ...]] = {}  # targets.kind_of_pod, per pod

    @property
    def state_name(self) -> int:
        """The name of the current state (see _start_search): equal names, equal states."""
        return self.named_states[-1][1]

    # -- indexing --
    def free_compute(self, g: int) -> int:
        return self.g_dev[g].devcore - self.g_use[g].usedcores

    def is_open(self, g: int) -> bool:
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
        if self.is_open(g):
            entry = (0 if self.g_locked[g] else 1, -len(self.g_pods[g]), g)
            level = self.free_compute(g)
            if level not in self.buckets:
                self.buckets[level] = []
                bisect.insort(self.levels, level)
            bisect.insort(self.buckets[level], entry)
            self.g_entry[g] = (level, entry)
            self._raise_room(level, self.g_node[g])

    def node_room(self, node: str) -> tuple[int, int]:
        room = self.n_free.get(node)
        return (UNLIMITED, UNLIMITED) if room is None else (room.cpu, room.memory)

    def _raise_room(self, level: int, node: str) -> None:
        cpu, mem = self.node_room(node)
        front = self.level_room.get(level)
        if front is None:
            self.level_room[level] = [(cpu, mem)]
        elif not any(c >= cpu and m >= mem for c, m in front):
            front[:] = [(c, m) for c, m in front if c > cpu or m > mem]
            front.append((cpu, mem))

    def _sizes(self, g: int) -> None:
        self.g_sizes[g] = sorted((r.coresreq for q in self.g_pods[g] if (r := self.p_req[q]) is not None), reverse=True)

    def pod_size(self, p: int) -> tuple[int, int, int]:
        """The order of pods by size: compute, then memory on the GPU it is on, then the first pod."""
        req = self.p_req[p]
        assert req is not None
        return (req.coresreq, req.memory_on(self.g_dev[self.p_gids[p][0]].devmem), -p)

    def label(self, g: int) -> str:
        return f"{self.g_node[g]}/gpu-{self.g_dev[g].index}"


class Engine(EngineArrays):
    """The arrays (:class:`EngineArrays`) with what the searches ask of them (does a pod fit a GPU,
    may it move) and the verbs that change them: a move applied and undone in constant
    bookkeeping, an empty GPU seeded, reroutes allowed, the caches of failed searches.

    Moves are put in an order that keeps every step valid by
    :func:`~hami_place_core.planning.ordering.sequence` at the end.
    """

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

    def apply(self, p: int, target: tuple[int, ...]) -> Record:
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
        self.names_used += 1
        self.named_states.append((record, self.names_used))
        return record

    def undo(self, record: Record) -> None:
        p, old, locked, event = record
        target = self.p_gids[p]
        self._shift(p, target, old)
        for g in locked:
            self.g_locked[g] = False
        self.p_event[p] = event
        for g in (*old, *target):
            self._index(g)
        if self.named_states[-1][0] is record:
            self.named_states.pop()
        else:  # out of order: a state never seen before
            self.named_states = [(r, n) for r, n in self.named_states if r is not record]
            self.changed()

    def changed(self) -> None:
        """The state changed other than by apply() or undo(): forget the failed searches."""
        self.misses.clear()
        self.known_ejections.clear()

    def reindex(self, g: int) -> None:
        self._index(g)
        self.changed()

    def rollback(self, records: list[Record]) -> None:
        for r in reversed(records):
            self.undo(r)

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

    # -- the verbs of the searches above: every change they make to the engine goes through one --
    def seed(self, g: int) -> None:
        """Offer empty GPU g as a target like a GPU in use (the planner otherwise keeps pods off
        empty GPUs: its objective is whole free GPUs)."""
        self.g_seed[g] = True
        self.reindex(g)

    def unseed(self, g: int, reindex: bool = True) -> None:
        """Withdraw the offer of GPU g; without `reindex` the caller reindexes it later (after
        taking back the moves onto it, which reindex it as they go)."""
        self.g_seed[g] = False
        if reindex:
            self.reindex(g)

    def allow_reroutes(self, allowed: bool = True) -> None:
        """Pods already moved may (or may no longer) be given another place at no extra move."""
        self.reroute = allowed

    def limit_scans(self, more: int) -> None:
        """The ejection scans stop (between evacuations) once they have looked at `more` GPUs
        beyond those looked at so far."""
        self.scan_limit = self.scanned + more

    def count_scans(self, n: int) -> None:
        """An evacuation's ejection scans looked at `n` GPUs (counted in a batch: one call per
        evacuation, not one per GPU scanned)."""
        self.scanned += n

    def emptied(self, g: int) -> None:
        """An evacuation emptied GPU g (its moves applied)."""
        self.evacuated.append(g)

    def take_back(self, records: list[Record], emptied_since: int | None = None) -> None:
        """Undo `records` (in reverse) and forget the GPUs they emptied: the last one, or all
        those emptied since `len(evacuated)` was `emptied_since`."""
        self.rollback(records)
        if emptied_since is None:
            self.evacuated.pop()
        else:
            del self.evacuated[emptied_since:]

    def give_reason(self, p: int, why: str) -> None:
        """Why pod p moves (shown with its move)."""
        self.p_reason[p] = why

    def drop_reason(self, p: int) -> None:
        self.p_reason.pop(p, None)

    def drop_reasons(self) -> None:
        self.p_reason.clear()

    def remember_gpu_kind(self, g: int, kind: tuple[Any, ...]) -> tuple[Any, ...]:
        """Cache evacuation.kind_of(g) until GPU g's pods change (_shift forgets it)."""
        self.g_kind[g] = kind
        return kind

    def remember_pod_kind(self, p: int, kind: tuple[Any, ...]) -> tuple[Any, ...]:
        """Cache targets.kind_of_pod(p): it never changes."""
        self.p_kind[p] = kind
        return kind

    def remember_miss(self, key: tuple[Any, ...], left_out: frozenset[int]) -> None:
        """A best-fit search for `key` (a kind of pod, its node, the state's name) failed with the
        GPUs `left_out` excluded (targets.direct_target), until the state changes."""
        self.misses[key] = left_out

    def remember_ejections(self, key: tuple[Any, ...], groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The ejection sets of a GPU for a kind of pod (evacuation.ejections), until the state changes."""
        self.known_ejections[key] = groups
        return groups

    def tighten_room(self, level: int, front: list[tuple[int, int]]) -> None:
        """The node room of free-compute `level`, exact after a scan of every GPU there."""
        self.level_room[level] = front
