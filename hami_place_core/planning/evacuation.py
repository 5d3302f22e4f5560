"""Emptying one GPU, all or nothing: best fit for each of its pods, or else ejection chains.

An ejection chain makes room for a pod that fits nowhere: it takes the place of up to
EJECT_GROUP smaller pods on a nearly fitting GPU, and they move on first, recursively, up to a
depth. :func:`candidates` lists the GPUs worth emptying, cheapest first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hami_place_core.fit import GpuUsage, gpu_fit_reason
from hami_place_core.node_resources import ZERO
from hami_place_core.planning.engine import Engine, Record, Step
from hami_place_core.planning.targets import direct_target, kind_of_pod
from hami_place_core.requests import GpuRequest

# Ejection chains: at most MAX_DEPTH pods moved on in a row to make room, EJECT_GROUP pods at most
# taken off one GPU, and EJECT_SCAN nearly fitting GPUs looked at per level of depth before an
# evacuation gives up (bounds the time). Over the seven openb benchmark states, 100, 150 and 300
# free as many GPUs in all (1,074-1,076), in 1.2-1.5, 1.4-2.0 and 1.6-2.5 s per state; on the
# example 1,000 freed one more than 300 in twice the time. Where node CPU is tight, long scans
# seldom find a chain.
MAX_DEPTH = 3
EJECT_SCAN = 100
EJECT_GROUP = 2


@dataclass(slots=True)
class _Evacuation:
    """One evacuation under way: what it may still spend, and what it did (to undo it)."""

    base: int  # moves made when it began
    cap: int  # moves it may add
    work: int  # GPUs its ejection scans may still look at
    steps: list[Step] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


def candidates(e: Engine) -> list[int]:
    """GPUs worth emptying (every pod on them movable), cheapest first: fewest new moves, then
    the lightest GPU, then those on nodes without the CPU or memory for their own pods, then
    the lightest node."""
    # can_move and needs_empty_gpu, inlined: this runs over every GPU once per pass.
    static, at, origin, workload = e.p_static, e.p_gids, e.p_origin, e.p_workload
    reroute, room_left = e.reroute, e.moves_made < e.max_moves
    used, limit_of = e.workload_used, e.options.limit_of

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
        e.g_use,
        e.g_locked,
        e.g_pods,
        e.g_dev,
        e.g_node,
    )
    for g in e.g_maybe:
        u = use[g]
        if u.used <= 0 or (locked[g] and not reroute):
            continue
        here = pods[g]
        if not all(movable(p) for p in here):
            continue
        name = g_node[g]
        load = node_load.get(name)
        if load is None:
            gids = e.node_gids[name]
            total = sum(dev[h].devcore for h in gids)
            load = node_load[name] = sum(use[h].usedcores for h in gids) / total if total else 0.0
        devcore = dev[g].devcore
        fresh = sum(1 for p in here if at[p] == origin[p])
        # Among equals, GPUs on CPU-full nodes go first: a node with room for pods like these
        # is where pods of full nodes can go, so its GPUs are worth more as targets than
        # emptied into each other (subset 10 of the benchmark: emptying a roomy node's 47%
        # GPU into its other 47% GPU left two 47% pods of full nodes nowhere to go). Over
        # the seven openb states +3 GPUs, and +1 on the MILP subsets.
        free = e.n_free.get(name)
        roomy = free is None or all(free.covers(e.p_res[p]) for p in here)
        keyed.append((fresh, len(here), u.usedcores / devcore if devcore else 1.0, roomy, load, g))
    keyed.sort()
    return [k[-1] for k in keyed]


def kind_of(e: Engine, g: int) -> tuple[Any, ...]:
    """What decides whether GPU g can be emptied, but for where it is: its pods' requests,
    selectors and node constraints, and whether they already moved. Cached until its pods
    change (a pod's moved flag changes only with its GPUs)."""
    kind = e.g_kind.get(g)
    if kind is None:
        items = [(e.p_req[p], e.p_alloc[p].request.selectors, e.p_sig[p], e.moved(p)) for p in e.g_pods[g]]
        kind = e.remember_gpu_kind(g, tuple(sorted(items, key=repr)))
    return kind


def evacuate(e: Engine, x: int, depth: int, budget: int) -> tuple[list[Step], list[Record]] | None:
    """Move every pod off GPU `x`, all or nothing, for at most `budget` more moves, making room
    with ejection chains up to `depth` deep: the steps (already applied) and their undo
    records, or None with nothing changed."""
    pods = sorted(e.g_pods[x], key=e.pod_size, reverse=True)
    if not all(e.can_move(p) for p in pods):
        return None
    cap = min(budget, e.max_moves - e.moves_made + sum(1 for p in pods if e.moved(p)))
    if sum(1 for p in pods if not e.moved(p)) > cap:
        return None
    ev = _Evacuation(e.moves_made, cap, EJECT_SCAN * depth)
    done = _empty(e, ev, x, pods, depth)
    e.count_scans(EJECT_SCAN * depth - ev.work)
    return done


def _empty(e: Engine, ev: _Evacuation, x: int, pods: list[int], depth: int) -> tuple[list[Step], list[Record]] | None:
    for p in pods:
        if p not in e.g_pods[x]:
            continue  # a multi-GPU pod already moved with another share
        if not place(e, ev, p, frozenset((x,)), depth):
            e.rollback(ev.records)
            return None
    if e.moves_made - ev.base > ev.cap or e.g_pods[x]:
        e.rollback(ev.records)
        return None
    e.emptied(x)
    return ev.steps, ev.records


def relocate(
    e: Engine, pods: list[int], exclude: frozenset[int], depth: int, budget: int
) -> tuple[list[Step], list[Record]] | None:
    """Move every pod of `pods` to GPUs outside `exclude` (and off its own), all or nothing, for at
    most `budget` more moves, largest first, with ejection chains up to `depth` deep: the steps
    (already applied) and their undo records, or None with nothing changed. Used to make room for
    one pod (:mod:`~hami_place_core.planning.room`), where only some pods of a GPU must leave."""
    pods = sorted(set(pods), key=e.pod_size, reverse=True)
    if not all(e.can_move(p) for p in pods):
        return None
    cap = min(budget, e.max_moves - e.moves_made + sum(1 for p in pods if e.moved(p)))
    if sum(1 for p in pods if not e.moved(p)) > cap:
        return None
    ev = _Evacuation(e.moves_made, cap, EJECT_SCAN * max(depth, 1))
    done = _place_all(e, ev, pods, exclude, depth)
    e.count_scans(EJECT_SCAN * max(depth, 1) - ev.work)
    return done


def _place_all(
    e: Engine, ev: _Evacuation, pods: list[int], exclude: frozenset[int], depth: int
) -> tuple[list[Step], list[Record]] | None:
    for p in pods:
        if not place(e, ev, p, exclude, depth):
            e.rollback(ev.records)
            return None
    if e.moves_made - ev.base > ev.cap:
        e.rollback(ev.records)
        return None
    return ev.steps, ev.records


def place(e: Engine, ev: _Evacuation, p: int, exclude: frozenset[int], depth: int) -> bool:
    """Move pod `p` somewhere outside `exclude`: best fit, or else make room on a nearly fitting
    GPU by moving some of its pods on first (recursively, `depth` deep). Applied when True."""
    if not e.can_move(p):  # e.g. a sibling of its workload already took the budget
        return False
    target = direct_target(e, p, exclude)
    if target is not None:
        ev.records.append(e.apply(p, target))
        ev.steps.append((p, target))
        return True
    req = e.p_req[p]
    assert req is not None
    if depth <= 0 or req.nums != 1 or e.moves_made - ev.base >= ev.cap:
        return False
    return _eject_for(e, ev, p, req, exclude, depth)


def _eject_for(e: Engine, ev: _Evacuation, p: int, req: GpuRequest, exclude: frozenset[int], depth: int) -> bool:
    """Place `p` on a nearly fitting GPU once some of its smaller pods have moved on: GPUs with the
    most free compute below p's request first, within the evacuation's scan budget."""
    nodes = e.eligible_nodes(p)
    typed = not e.p_plain[p]
    # Each ejected pod needs room elsewhere: a group makes at most EJECT_GROUP times the
    # largest free compute there is.
    most = EJECT_GROUP * (e.levels[-1] if e.levels else 0)
    for level in range(req.coresreq - 1, max(-1, req.coresreq - most - 1), -1):
        for _, _, t in list(e.buckets.get(level, ())):
            if t in exclude or t in e.p_gids[p]:
                continue
            if nodes is not None and e.g_node[t] not in nodes and t not in e.p_origin[p]:
                continue
            # GPUs of other types count too: the scan stays bounded. The work spent is also the
            # engine's count of GPUs scanned, added once when the evacuation ends.
            ev.work -= 1
            if ev.work < 0:
                return False
            if typed and not e.allowed(p, e.g_dev[t]):
                continue
            if not _may_make_room(e, p, req, t, level):
                continue
            if _swap_in(e, ev, p, req, t, nodes, exclude, depth):
                return True
            if ev.work < 0:
                return False
    return False


def _may_make_room(e: Engine, p: int, req: GpuRequest, t: int, level: int) -> bool:
    """Quick checks before trying sets of pods to eject from GPU `t` (at free compute `level`): the
    smaller pods on t must free enough compute, and t's node must have, or get back from them, the
    CPU and memory p needs. A function call per GPU scanned, a few hundred thousand per plan: about
    1% of the plan's time, for a readable scan."""
    room = level
    taken = 0
    for c in e.g_sizes[t]:
        if c < req.coresreq:
            room += c
            taken += 1
            if taken == EJECT_GROUP:
                break
    if room < req.coresreq:
        return False
    # Node CPU and memory: what t's node has free plus all that smaller pods leaving t could give
    # back must cover p (checked before trying any set of them).
    node, res = e.g_node[t], e.p_res[p]
    node_room = e.n_free.get(node)
    if node_room is not None and node != e.g_node[e.p_gids[p][0]] and not node_room.covers(res):
        gain = node_room
        for q in e.g_pods[t]:
            r = e.p_req[q]
            if r is not None and r.coresreq < req.coresreq:
                gain = gain + e.p_res[q]
        if not gain.covers(res):
            return False
    return True


def _swap_in(
    e: Engine,
    ev: _Evacuation,
    p: int,
    req: GpuRequest,
    t: int,
    nodes: frozenset[str] | None,
    exclude: frozenset[int],
    depth: int,
) -> bool:
    """Move a set of smaller pods off GPU `t` (each placed recursively) and `p` onto it; the first
    set that works, fewest pods first. Applied when True, nothing changed when False."""
    for group in ejections(e, p, t):
        # A chain that needs more moves than the cap leaves is rejected at the end of
        # evacuate() anyway; near --max-moves such chains were most of the runtime.
        extra = sum(1 for q in group if not e.moved(q)) + (not e.moved(p))
        if e.moves_made - ev.base + extra > ev.cap:
            continue
        mark = len(ev.records)
        ok = all(place(e, ev, q, exclude | {t}, depth - 1) for q in group)
        if ok and e.can_move(p) and e.fits(p, t, req, nodes):
            ev.records.append(e.apply(p, (t,)))
            ev.steps.append((p, (t,)))
            return True
        e.rollback(ev.records[mark:])
        del ev.records[mark:], ev.steps[mark:]
        if ev.work < 0:
            return False
    return False


def ejections(e: Engine, p: int, t: int) -> list[tuple[int, ...]]:
    """Sets of pods (up to EJECT_GROUP, largest first within a set) whose leaving GPU `t` makes
    room for single-GPU pod `p`: fewest pods first, then least compute moved."""
    # All they depend on: t and its pods, p's kind and node, and what may move (the state and
    # the phase).
    key = (t, kind_of_pod(e, p), e.g_node[e.p_gids[p][0]], e.state_name, e.reroute)
    groups = e.known_ejections.get(key)
    if groups is None:
        groups = e.remember_ejections(key, list_ejections(e, p, t))
    return groups


def list_ejections(e: Engine, p: int, t: int) -> list[tuple[int, ...]]:
    req = e.p_req[p]
    assert req is not None
    d, u = e.g_dev[t], e.g_use[t]
    sel = e.p_alloc[p].request.selectors
    # Only pods smaller than p: every chain then ends, and no pod is swapped for its equal.
    movable = [
        q
        for q in e.g_pods[t]
        if (r := e.p_req[q]) is not None and r.nums == 1 and r.coresreq < req.coresreq and e.can_move(q)
    ]
    out: list[tuple[int, int, tuple[int, ...]]] = []
    # p also needs CPU and memory on t's node, and the group leaving it gives back at most its
    # own: a group that cannot make that room is never tried (most of them, on busy nodes).
    node = e.g_node[t]
    room = e.n_free.get(node) if node != e.g_node[e.p_gids[p][0]] else None
    need = e.p_res[p]
    if room is not None and not (room + sum((e.p_res[q] for q in movable), ZERO)).covers(need):
        return []
    for k in range(1, 1 + min(EJECT_GROUP, len(movable))):
        for group in itertools.combinations(movable, k):
            if room is not None and not (room + sum((e.p_res[q] for q in group), ZERO)).covers(need):
                continue
            mem = cores = 0
            for q in group:
                r = e.p_req[q]
                assert r is not None
                mem += r.memory_on(d.devmem)
                cores += r.coresreq
            after = GpuUsage(u.used - k, u.usedmem - mem, u.usedcores - cores)
            if gpu_fit_reason(req, d, after, sel, e.g_cordoned[t]) is None:
                out.append((k, cores, tuple(sorted(group, key=e.pod_size, reverse=True))))
        if out:
            break  # fewest pods first: a larger set only if no smaller one makes room
    out.sort()
    return [g for _, _, g in out]
