"""Best fit: the GPU(s) a pod goes to, as things stand in the engine.

:func:`best_target` searches the engine's buckets (free compute ascending, so the first GPU that
fits is the tightest); :func:`direct_target` is the same answer, remembering failed searches per
kind of pod and state (:attr:`Engine.misses`), which the ejection scans repeat by the thousand.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from hami_place_core.planning.engine import UNLIMITED, Engine, Entry
from hami_place_core.requests import GpuRequest


def best_target(e: Engine, p: int, exclude: set[int] | frozenset[int]) -> tuple[int, ...] | None:
    """Best fit: the GPU(s) left with the least free compute; among equals the pod's original
    GPU, then its own node, then GPUs already receiving, then the busiest, then by node name
    and index."""
    req = e.p_req[p]
    assert req is not None
    nodes = e.eligible_nodes(p)
    if req.nums > 1:
        return _best_multi(e, p, req, nodes, exclude)
    need = req.coresreq
    home = e.p_alloc[p].node
    origin = e.p_origin[p]
    if nodes is not None and len(nodes) <= 32:
        # Few nodes allowed: look at their GPUs directly rather than scan every bucket.
        pool = [g for n in sorted(nodes | {home}) for g in e.node_gids.get(n, ())]
        best = min(
            (
                (e.free_compute(g), 0 if g in origin else 1, 0 if e.g_node[g] == home else 1, entry[1], g)
                for g in pool
                if (entry := e.g_entry[g]) is not None and g not in exclude and e.fits(p, g, req, nodes)
            ),
            default=None,
        )
        return None if best is None else (best[4],)
    home_fit: dict[int, list[tuple[int, Entry, int]]] = {}
    for g in e.node_gids.get(home, ()):
        entry = e.g_entry[g]
        if entry is not None and g not in exclude and e.fits(p, g, req, nodes):
            home_fit.setdefault(entry[0], []).append((0 if g in origin else 1, entry[1], g))
    levels = e.levels
    # Busy GPUs sit on busy nodes: most of those the scan meets lack CPU or memory for the
    # pod, so the node's verdict is taken once per call, not once per GPU.
    here, res, n_free, g_node = e.g_node[e.p_gids[p][0]], e.p_res[p], e.n_free, e.g_node
    level_room = e.level_room
    # GPUs of the node the pod is on need no room there; home GPUs are in home_fit.
    near = {en[0] for g in e.node_gids[here] if (en := e.g_entry[g]) is not None} if here != home else ()
    roomy: dict[str, bool] = {}
    for i in range(bisect.bisect_left(levels, need), len(levels)):
        level = levels[i]
        if level in home_fit:
            return (min(home_fit[level])[2],)
        front = level_room.get(level)
        if front is not None and not any(c >= res.cpu and m >= res.memory for c, m in front) and level not in near:
            continue  # home GPUs were looked at above: no other node of this level has room
        rooms: set[tuple[int, int]] = set()
        for _, _, g in e.buckets[level]:
            node = g_node[g]
            room = n_free.get(node)
            rooms.add((UNLIMITED, UNLIMITED) if room is None else (room.cpu, room.memory))
            if g in exclude:
                continue
            ok = roomy.get(node)
            if ok is None:
                ok = roomy[node] = room is None or node == here or room.covers(res)
            if ok and e.fits(p, g, req, nodes):
                return (g,)
        e.tighten_room(level, _pareto(rooms))  # exact now: the whole level was seen
    return None


def direct_target(e: Engine, p: int, exclude: frozenset[int]) -> tuple[int, ...] | None:
    """best_target(), but a search that failed for a pod of the same kind, in this state, fails
    again without a scan unless one of the GPUs it left out now fits."""
    req = e.p_req[p]
    assert req is not None
    if req.nums != 1:
        return best_target(e, p, exclude)
    key = (kind_of_pod(e, p), e.g_node[e.p_gids[p][0]], e.state_name)
    blocked = e.misses.get(key)
    if blocked is not None:
        # best_target() fails exactly when no open GPU outside exclude and the pod's own GPUs
        # passes fits(): only the GPUs the earlier search left out need a look.
        nodes = e.eligible_nodes(p)
        if not any(g not in exclude and e.g_entry[g] is not None and e.fits(p, g, req, nodes) for g in blocked):
            return None
    target = best_target(e, p, exclude)
    if target is None:
        left_out = exclude.union(e.p_gids[p])
        e.remember_miss(key, left_out if blocked is None else left_out & blocked)
    return target


def kind_of_pod(e: Engine, p: int) -> tuple[Any, ...]:
    """All that fits() looks at for pod p but for where it is now (the key adds its node)."""
    kind = e.p_kind.get(p)
    if kind is None:
        nodes = e.eligible_nodes(p)
        origin = e.p_origin[p]
        # fits() lets a pod back onto its original GPUs even off its eligible nodes.
        odd = nodes is not None and any(e.g_node[g] not in nodes for g in origin)
        sel = e.p_alloc[p].request.selectors
        kind = (e.p_req[p], sel, e.p_sig[p], e.p_res[p], origin if odd else ())
        e.remember_pod_kind(p, kind)
    return kind


def _best_multi(
    e: Engine, p: int, req: GpuRequest, nodes: frozenset[str] | None, exclude: set[int] | frozenset[int]
) -> tuple[int, ...] | None:
    best: tuple[tuple[int, int, str], tuple[int, ...]] | None = None
    home = e.p_alloc[p].node
    here, res, need = e.g_node[e.p_gids[p][0]], e.p_res[p], req.coresreq
    for name in sorted(e.node_gids) if nodes is None else sorted(nodes):
        gids = e.node_gids.get(name, ())
        # What fits() would refuse for every GPU of the node, checked once: its CPU and memory,
        # and too few open GPUs with the compute (most nodes, on a busy cluster).
        room = e.n_free.get(name)
        if room is not None and name != here and not room.covers(res):
            continue
        if sum(1 for g in gids if e.g_entry[g] is not None and e.free_compute(g) >= need) < req.nums:
            continue
        fitting = [g for g in gids if g not in exclude and e.g_entry[g] is not None and e.fits(p, g, req, nodes)]
        if len(fitting) < req.nums:
            continue
        fitting.sort(key=lambda g: (e.free_compute(g), g))
        chosen = tuple(sorted(fitting[: req.nums]))
        score = (sum(e.free_compute(g) for g in chosen) - req.coresreq * req.nums, 0 if name == home else 1, name)
        if best is None or score < best[0]:
            best = (score, chosen)
    return None if best is None else best[1]


def _pareto(points: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The points no other point has as much of both coordinates as."""
    front: list[tuple[int, int]] = []
    best = -1
    for c, m in sorted(points, reverse=True):
        if m > best:
            front.append((c, m))
            best = m
    return front
