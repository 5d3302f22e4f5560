"""The baselines the planner benchmark compares the planner with (bench/planner_bench.py), on a small
mutable view of a state: HighNodeUtilization (descheduler style), FragmentationAware (Koordinator
style), random valid moves and the FFD repack with its greedy order. They live in the harness, not in
bench/, because the unit tests check that their fast paths make the same moves as the walks they
replaced (tests/unit/test_planner_bench.py), and tests and benchmarks share code only through here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_place_core.fit import GpuUsage, add_usage, gpu_fit_reason
from hami_place_core.fragmentation import FitTable, WorkloadMix, node_metrics
from hami_place_core.node_resources import Resources
from hami_place_core.planning import Move, PlanOptions, copy_state
from hami_place_core.planning.constraints import constraint_signature, immovable_reason, node_refusal, node_schedulable
from hami_place_core.requests import GpuRequest
from hami_place_core.state import ClusterState
from testbed.hami.simulate import Simulator, fit_on_node


# ---- a small mutable view of a state for the baselines ---------------------------------------------
@dataclass
class View:
    """GPUs by UUID with their usage; pods by key with their GPUs; movability and node checks."""

    state: ClusterState
    usage: dict[str, GpuUsage] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    at: dict[str, tuple[str, ...]] = field(default_factory=dict)
    movable: list[str] = field(default_factory=list)
    refusals: dict[tuple[str, str], bool] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    moved: set[str] = field(default_factory=set)
    room: dict[str, Resources] = field(default_factory=dict)  # node -> CPU/memory/pod slots left

    def requests(self, key: str) -> Resources:
        return self.state.requests_of(key)

    @classmethod
    def of(cls, state: ClusterState, options: PlanOptions) -> View:
        v = cls(state)
        for name in sorted(state.nodes):
            n = state.nodes[name]
            free = state.free_resources(name)
            if free is not None:
                v.room[name] = free
            for d in n.devices:
                v.usage[d.uuid] = n.usage[d.uuid].copy()
                v.node_of[d.uuid] = name
        for key in sorted(state.pods):
            a = state.pods[key]
            v.at[key] = tuple(sorted(a.per_gpu))
            req = a.request.gpu_containers
            if (
                immovable_reason(a, options.excluded_namespaces, state.problems) is None
                and len(req) == 1
                and req[0].nums == 1
                and req[0].coresreq < 100
                and req[0].mem_percentage != 100
            ):
                v.movable.append(key)
        return v

    def req(self, key: str) -> GpuRequest:
        return self.state.pods[key].request.gpu_containers[0]

    def device(self, uuid: str) -> Any:
        return self.state.nodes[self.node_of[uuid]].by_uuid(uuid)

    def fits(self, key: str, uuid: str) -> bool:
        a = self.state.pods[key]
        node = self.node_of[uuid]
        ok = self.refusals.get((key, node))
        if ok is None:
            ok = self.refusals[(key, node)] = node_refusal(a, self.state.nodes[node]) is None
        if not ok or uuid in self.at[key] or not self.room_for_at(key, self.node_of[self.at[key][0]], node):
            return False
        d = self.device(uuid)
        cordoned = self.state.nodes[node].cordoned
        return gpu_fit_reason(self.req(key), d, self.usage[uuid], a.request.selectors, cordoned) is None

    def shift(self, key: str, uuid: str, sign: int) -> None:
        r, d, u = self.req(key), self.device(uuid), self.usage[uuid]
        u.used += sign
        u.usedmem += sign * r.memory_on(d.devmem)
        u.usedcores += sign * r.coresreq

    def move(self, key: str, uuid: str, reason: str) -> None:
        a = self.state.pods[key]
        self.take_room(key, self.node_of[self.at[key][0]], self.node_of[uuid])
        for old in self.at[key]:
            self.shift(key, old, -1)
        self.shift(key, uuid, +1)
        self.at[key] = (uuid,)
        self.moved.add(key)
        d = self.device(uuid)
        origin = [self.state.nodes[a.node].by_uuid(u) for u in a.per_gpu]
        self.moves.append(
            Move(
                pod=key,
                workload=f"{a.namespace}/{a.owner_kind}/{a.owner_name}" if a.owner_kind else None,
                from_node=a.node,
                from_gpus=tuple(sorted(g.index for g in origin if g is not None)),
                to_node=self.node_of[uuid],
                to_gpus=(d.index,),
                to_uuids=(uuid,),
                reason=reason,
            )
        )

    def room_for_at(self, key: str, here: str, node: str) -> bool:
        """kube-scheduler's NodeResourcesFit, as the planner checks it: a pod moving in needs room."""
        free = self.room.get(node)
        return node == here or free is None or free.covers(self.requests(key))

    def take_room(self, key: str, here: str, there: str) -> None:
        if here != there:
            if here in self.room:
                self.room[here] = self.room[here] + self.requests(key)
            if there in self.room:
                self.room[there] = self.room[there] - self.requests(key)

    def countable(self, uuid: str) -> bool:
        n = self.state.nodes[self.node_of[uuid]]
        d = self.device(uuid)
        return node_schedulable(n) and d.health and uuid not in n.cordoned


# ---- baselines --------------------------------------------------------------------------------------
def high_node_utilization(state: ClusterState, options: PlanOptions, threshold: float = 0.5) -> list[Move]:
    v = View.of(state, options)
    movable = set(v.movable)
    by_node: dict[str, list[str]] = {}
    for name in sorted(state.nodes):
        by_node[name] = [u for u in v.usage if v.node_of[u] == name]

    def util(name: str) -> float:
        total = sum(v.device(u).devcore for u in by_node[name])
        return sum(v.usage[u].usedcores for u in by_node[name]) / total if total else 1.0

    under = sorted((n for n in by_node if by_node[n] and 0 < util(n) < threshold), key=lambda n: (util(n), n))
    drained = set(under)
    for name in under:
        for key in sorted(k for k in movable if v.node_of[v.at[k][0]] == name):
            targets = [n for n in by_node if n not in drained and node_schedulable(state.nodes[n])]
            targets.sort(key=lambda n: (-util(n), n))  # MostAllocated
            placed = False
            for t in targets:
                gpus = sorted(by_node[t], key=lambda u: (-v.usage[u].usedcores, u))  # binpack within the node
                for u in gpus:
                    if v.fits(key, u):
                        v.move(key, u, f"drain under-used node {name}")
                        placed = True
                        break
                if placed:
                    break
    return v.moves


def fragmentation_aware(state: ClusterState, options: PlanOptions, mix: WorkloadMix, cycles: int = 20) -> list[Move]:
    work = copy_state(state)
    sim = Simulator(work, "binpack", "spread")
    fits = FitTable(mix)
    v = View.of(state, options)
    movable = set(v.movable)
    moves: list[Move] = []

    def fgd(name: str) -> float:
        return node_metrics(work.nodes[name], mix, fits).fgd

    def shift(key: str, node: str, uuid: str, sign: int) -> None:
        r = v.req(key)
        n = work.nodes[node]
        d = n.by_uuid(uuid)
        assert d is not None  # uuid is a GPU of this node: the view took it from there
        u = n.usage[uuid]
        u.used += sign
        u.usedmem += sign * r.memory_on(d.devmem)
        u.usedcores += sign * r.coresreq
        sim.invalidate(node)

    where = {k: (state.pods[k].node, v.at[k][0]) for k in movable}
    moved: set[str] = set()
    for _ in range(cycles):
        progress = False
        for name in sorted(work.nodes):
            here = [k for k in sorted(movable - moved) if where[k][0] == name]
            if not here:
                continue
            base = fgd(name)
            best: tuple[float, str] | None = None
            for k in here:
                shift(k, name, where[k][1], -1)
                gain = base - fgd(name)
                shift(k, name, where[k][1], +1)
                if best is None or gain > best[0]:
                    best = (gain, k)
            if best is None or best[0] <= 0:
                continue
            key = best[1]
            a = state.pods[key]
            shift(key, name, where[key][1], -1)
            allowed = [
                n
                for n in sim.candidates()
                if n != name and node_refusal(a, work.nodes[n]) is None and v.room_for_at(key, name, n)
            ]
            placed = None
            for n in allowed:
                devices = fit_on_node(a.request, work.nodes[n], "spread")
                if devices is not None:
                    placed = (n, devices[0][0].uuid)
                    break
            if placed is None:
                shift(key, name, where[key][1], +1)
                continue
            target, uuid = placed
            before = base + fgd(target)
            after_src = fgd(name)
            shift(key, target, uuid, +1)
            after = after_src + fgd(target)
            if before - after < 0.02:
                shift(key, target, uuid, -1)
                shift(key, name, where[key][1], +1)
                continue
            d = work.nodes[target].by_uuid(uuid)
            origin = state.nodes[a.node].by_uuid(next(iter(a.per_gpu)))
            moves.append(
                Move(
                    key,
                    f"{a.namespace}/{a.owner_kind}/{a.owner_name}",
                    a.node,
                    (origin.index,) if origin else (),
                    target,
                    (d.index,) if d else (),
                    (uuid,),
                    f"FGD -{before - after:.2f}",
                )
            )
            where[key] = (target, uuid)
            v.take_room(key, name, target)
            moved.add(key)
            progress = True
        if not progress:
            break
    return moves


def random_moves(state: ClusterState, options: PlanOptions, count: int, seed: int = 1) -> list[Move]:
    rng = random.Random(seed)  # noqa: S311 - a seeded baseline, not a secret
    v = View.of(state, options)
    gpus = sorted(u for u in v.usage if v.countable(u))
    pods = list(v.movable)
    rng.shuffle(pods)
    for key in pods:
        if len(v.moves) >= count:
            break
        for u in rng.sample(gpus, min(len(gpus), 64)):
            if v.usage[u].used > 0 and v.fits(key, u):
                v.move(key, u, "random")
                break
    return v.moves


class FirstAtLeast:
    """Keys in a row; the first position at or after `lo` whose key is at least `need`, in about
    log n steps (a max segment tree). The FFD repack's first fit asks it for the next bin with
    enough cores left instead of walking past the full ones one by one."""

    def __init__(self, keys: Sequence[int]) -> None:
        size = 1
        while size < len(keys):
            size *= 2
        self.size = size
        self.tree = [-1] * (2 * size)
        self.tree[size : size + len(keys)] = keys
        for i in range(size - 1, 0, -1):
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])

    def set(self, pos: int, key: int) -> None:
        i = pos + self.size
        self.tree[i] = key
        i //= 2
        while i:
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])
            i //= 2

    def first(self, lo: int, need: int) -> int | None:
        tree = self.tree

        def down(i: int, left: int, right: int) -> int | None:
            if right <= lo or tree[i] < need:
                return None
            if right - left == 1:
                return left
            mid = (left + right) // 2
            found = down(2 * i, left, mid)
            return found if found is not None else down(2 * i + 1, mid, right)

        return down(1, 0, self.size)


def cores_left(d: Any, u: GpuUsage) -> int:
    """The cores a request may still take on the GPU, or -1 where no request fits at all (every
    slot taken, or every core: HAMi's Fit then fails whatever the request; docs of gpu_fit_reason)."""
    if u.used >= d.count or (d.devcore != 0 and u.usedcores >= d.devcore):
        return -1
    return int(d.devcore - u.usedcores)


def ffd_first_fit(
    state: ClusterState,
    v: View,
    order: Sequence[str],
    bins: Sequence[str],
    load: dict[int, GpuUsage],
    room: dict[str, Resources],
) -> dict[int, list[str]]:
    """First fit of `order` into `bins`: each pod into the first bin where node constraints, node
    room and HAMi's Fit allow it; -1 holds the pods that fit nowhere. Bins without the cores a pod
    asks for are skipped through FirstAtLeast (too few cores left fails Fit whatever else holds),
    and node constraints are cached per constraint signature: the same bins as a plain walk."""
    devices = [v.device(u) for u in bins]
    nodes = [state.nodes[v.node_of[u]] for u in bins]
    seek = FirstAtLeast([cores_left(d, load[i]) for i, d in enumerate(devices)])
    refused: dict[tuple[str, str], bool] = {}
    content: dict[int, list[str]] = {}
    for key in order:
        a = state.pods[key]
        r = v.req(key)
        need = v.requests(key)
        sig = constraint_signature(a)
        i = seek.first(0, max(r.coresreq, 0))
        while i is not None:
            d, node = devices[i], nodes[i]
            bad = refused.get((sig, node.name))
            if bad is None:
                bad = refused[(sig, node.name)] = node_refusal(a, node) is not None
            if (
                not bad
                and (node.name not in room or room[node.name].covers(need))
                and gpu_fit_reason(r, d, load[i], a.request.selectors, node.cordoned) is None
            ):
                if node.name in room:
                    room[node.name] = room[node.name] - need
                add_usage(load[i], r, d)
                seek.set(i, cores_left(d, load[i]))
                content.setdefault(i, []).append(key)
                break
            i = seek.first(i + 1, max(r.coresreq, 0))
        else:
            content.setdefault(-1, []).append(key)  # fits nowhere: stays
    return content


def greedy_order(v: View, pending: list[str], final: Mapping[str, str]) -> bool:
    """Make the moves in the first order found: each round, the first pending move (in the given
    order) that fits now. Whether all were made (False: deadlock, the moves made are a valid
    prefix). The same order as rescanning the whole list every round, without the rescans: a move
    that did not fit can only come to fit once a move frees its target GPU or room on its target
    node, so after each move only those earlier moves are looked at again."""
    alive = [True] * len(pending)
    by_gpu: dict[str, list[int]] = {}
    by_node: dict[str, list[int]] = {}
    for i, k in enumerate(pending):
        by_gpu.setdefault(final[k], []).append(i)
        by_node.setdefault(v.node_of[final[k]], []).append(i)
    pos, left = 0, len(pending)
    while left:
        found = next((i for i in range(pos, len(pending)) if alive[i] and v.fits(pending[i], final[pending[i]])), None)
        if found is None:
            return False
        key = pending[found]
        freed = v.at[key]
        source = v.node_of[freed[0]]
        v.move(key, final[key], "FFD repack")
        alive[found] = False
        left -= 1
        # Earlier moves that did not fit: only those into a GPU or node this move left may now.
        again = {i for u in freed for i in by_gpu.get(u, ()) if i < found}
        if source != v.node_of[final[key]]:
            again.update(i for i in by_node.get(source, ()) if i < found)
        pos = next((i for i in sorted(again) if alive[i] and v.fits(pending[i], final[pending[i]])), found)
    return True


# The baseline as the tables in docs/planner.md measured it: the same moves since it was sped up
# (first fit through FirstAtLeast, the order without rescans; checked on two states before/after).
def ffd_repack(state: ClusterState, options: PlanOptions) -> tuple[list[Move], bool]:  # noqa: C901
    v = View.of(state, options)
    movable = set(v.movable)
    gpus = sorted(u for u in v.usage if v.countable(u))
    # What stays: pods that may not move (their usage remains on their GPUs).
    fixed = {u: v.usage[u].copy() for u in gpus}
    for key in sorted(movable):
        for u in v.at[key]:
            if u in fixed:
                d = v.device(u)
                r = v.req(key)
                fixed[u].used -= 1
                fixed[u].usedmem -= r.memory_on(d.devmem)
                fixed[u].usedcores -= r.coresreq
    # Node room with every movable pod lifted off, as the packing refills it.
    room = dict(v.room)
    for key in movable:
        home = v.node_of[v.at[key][0]]
        if home in room:
            room[home] = room[home] + v.requests(key)
    order = sorted(movable, key=lambda k: (-v.req(k).coresreq, -v.req(k).memory_on(v.device(v.at[k][0]).devmem), k))
    # Bins: GPUs in use by fixed pods first (their room must be used), then any GPU.
    bins = sorted(gpus, key=lambda u: (fixed[u].used == 0, u))
    load = {i: fixed[u].copy() for i, u in enumerate(bins)}
    content = ffd_first_fit(state, v, order, bins, load, room)
    # Match each new bin to the old GPU on its node holding most of its pods (fewer moves), greedily;
    # within the node, so that the node loads the packing checked stay what they are.
    final: dict[str, str] = {}
    taken: set[str] = set()
    pairs = []
    for i, keys in content.items():
        if i < 0:
            for k in keys:
                final[k] = v.at[k][0]
            continue
        votes: dict[str, int] = {}
        for k in keys:
            votes[v.at[k][0]] = votes.get(v.at[k][0], 0) + 1
        for u, n in votes.items():
            if v.node_of[u] == v.node_of[bins[i]]:
                pairs.append((-n, i, u))
    pairs.sort()
    assigned: dict[int, str] = {}
    for _, i, u in pairs:
        if i in assigned or u in taken or fixed[u].used:
            continue
        assigned[i] = u
        taken.add(u)
    for i in sorted(content):
        if i < 0:
            continue
        target = bins[i] if fixed[bins[i]].used else assigned.get(i)
        if target is None:
            same = v.node_of[bins[i]]
            target = next(u for u in bins if u not in taken and not fixed[u].used and v.node_of[u] == same)
            taken.add(target)
        for k in content[i]:
            final[k] = target
    # Check node constraints, node room and Fit again for the matched GPU (it may differ from bin i),
    # and find an order in which every move fits when it is made.
    pending = sorted((k for k in movable if final[k] != v.at[k][0]), key=lambda k: (-v.req(k).coresreq, k))
    ok = greedy_order(v, pending, final)
    return v.moves, ok
