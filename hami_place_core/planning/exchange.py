"""Node-room exchanges: carry CPU and memory from nodes whose GPU room no pod can use to roomy ones.

On a busy cluster most GPUs the greedy passes cannot empty have GPUs with the compute for their
pods, but on nodes without the CPU or memory those pods request (docs/planner.md, "What the FFD gap
is"). A first-fit-decreasing repack of every pod gets around that by trading CPU between nodes:
CPU-heavy pods leave CPU-full nodes and CPU-light ones take their GPU room. The cheapest such trade
is an exclusive pod's (all of a GPU's compute or memory, so it never moves to free a GPU): moved to
an empty GPU of a roomy node, it frees one GPU and takes one (no loss) and gives its node back its
CPU and memory, 8-18 cores for most of them on the openb traces, where a shared pod that small
asks for 2-10.

:func:`carries` makes one such exchange per node that has GPU room in use but not the CPU or memory
that some movable pod small enough for it asks for, before the evacuations; :func:`keep_used`
takes back, after the first round, every exchange nothing needed. A carry takes an empty GPU,
which pairing (:mod:`~hami_place_core.planning.passes`) could have used: the empty GPUs are tried
roomiest node first (only a node with room for the pod can take it), one exchange per node.

On the openb states, where the planner without node room freed 25-75% more than with it, this
frees 20-60 GPUs more per state with departures (docs/planner.md, "All lists after the node-room
exchanges"). Where no node with room has an empty GPU (the multigpu lists) it does nothing.
"""

from __future__ import annotations

import bisect

from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.model import PlanOptions


def carries(engine: Engine, options: PlanOptions) -> list[Record]:
    """One exchange per blocked node (GPU room in use, but not the CPU or memory that some movable
    shared pod small enough for that room asks for): its exclusive pod with the most CPU (then
    memory) moves to an empty GPU of the roomiest node that takes it. Blocked nodes with the
    most GPU room on one GPU first. The undo records, for :func:`keep_used`.

    Not under ``max_moves`` (a carry spends a move before anything is freed: with few moves left
    the evacuations would find none) nor within one move per GPU (a carry frees nothing itself).
    A pod whose workload has other movable pods is carried only if the workload's disruption
    budget leaves them a move."""
    if options.max_moves is not None or max(1, options.max_moves_per_gpu) < 2:
        return []
    most = _largest_needs(engine)
    if not most[0]:
        return []
    empties = sorted(
        (g for g in range(len(engine.g_dev)) if engine.g_counts[g] and not engine.g_use[g].used),
        key=lambda g: (*(-r for r in engine.node_room(engine.g_node[g])), g),
    )
    siblings: dict[str, int] = {}
    for p in range(len(engine.p_alloc)):
        if (wl := engine.p_workload[p]) is not None and engine.p_movable[p]:
            siblings[wl] = siblings.get(wl, 0) + 1
    made: list[Record] = []
    for node in _blocked(engine, most):
        givers = [
            q
            for g in engine.node_gids[node]
            if len(engine.g_pods[g]) == 1
            for q in engine.g_pods[g]
            if engine.needs_empty_gpu(q) and _may_carry(engine, q, siblings)
        ]
        if not givers:
            continue
        q = min(givers, key=lambda q: (-engine.p_res[q].cpu, -engine.p_res[q].memory, q))
        req = engine.p_req[q]
        assert req is not None
        nodes = engine.eligible_nodes(q)
        for e in empties:
            if not engine.g_use[e].used and engine.g_node[e] != node and engine.fits(q, e, req, nodes):
                made.append(engine.apply(q, (e,)))
                engine.give_reason(q, f"make room on {node}")
                break
    return made


def _largest_needs(engine: Engine) -> tuple[list[int], list[int], list[int]]:
    """Movable shared single-GPU pods by compute: the compute requests ascending, and for each
    prefix the most CPU and the most memory any of those pods asks for."""
    shared = sorted(
        (r.coresreq, engine.p_res[p].cpu, engine.p_res[p].memory)
        for p in range(len(engine.p_alloc))
        if engine.p_static[p] and (r := engine.p_req[p]) is not None and r.nums == 1
    )
    sizes, cpus, mems = [], [], []
    cpu = mem = 0
    for c, pc, pm in shared:
        cpu, mem = max(cpu, pc), max(mem, pm)
        sizes.append(c)
        cpus.append(cpu)
        mems.append(mem)
    return sizes, cpus, mems


def _blocked(engine: Engine, most: tuple[list[int], list[int], list[int]]) -> list[str]:
    """Nodes with a GPU in use whose free compute some movable pod could take, but without the
    CPU or memory the most demanding such pod asks for: most free compute on one GPU first."""
    sizes, cpus, mems = most
    out: list[tuple[int, str]] = []
    for node, gids in engine.node_gids.items():
        room = engine.n_free.get(node)
        if room is None:
            continue
        top = max((engine.free_compute(g) for g in gids if engine.is_open(g) and engine.g_use[g].used), default=0)
        i = bisect.bisect_right(sizes, top)
        if i and (room.cpu < cpus[i - 1] or room.memory < mems[i - 1]):
            out.append((-top, node))
    return [node for _, node in sorted(out)]


def _may_carry(engine: Engine, q: int, siblings: dict[str, int]) -> bool:
    req = engine.p_req[q]
    if req is None or req.nums != 1 or engine.moved(q) or not engine.can_move(q):
        return False
    wl = engine.p_workload[q]
    # A carry taken back gives the budget back, but the evacuations in between could not move a
    # sibling: carry only if the budget leaves them one.
    return wl is None or siblings.get(wl, 0) <= 1 or engine.workload_used.get(wl, 0) + 2 <= engine.options.limit_of(wl)


def keep_used(engine: Engine, made: list[Record]) -> int:
    """Take back, latest first, every carry that nothing needed: its pod would still fit on its GPU
    (nothing took it), and its node's room, replayed without it over the moves into and out of the
    node in the order they were made, covers every pod that moved in. The number kept.

    That order (by when places were chosen) is the first round's fallback order
    (:func:`~hami_place_core.planning.ordering.sequence`): it stays valid without a carry taken
    back, which changes no other node's room (the empty GPU it took was full) and no GPU anyone
    else uses. Asking only whether its pod fits back at the end is not enough: pods that left the
    node later may have given back the room the ones before them took."""
    kept = 0
    moved = [p for p in range(len(engine.p_alloc)) if engine.moved(p)]
    for record in reversed(made):
        q, origin = record[0], record[1]
        if engine.fits_back(q, origin) and not _needed(engine, q, engine.g_node[origin[0]], moved):
            engine.undo(record)
            engine.drop_reason(q)
        else:
            kept += 1
    return kept


def _needed(engine: Engine, q: int, node: str, moved: list[int]) -> bool:
    """Some pod that moved onto `node` would not have had the CPU, memory or pod slot there, when
    it moved, had `q` stayed on it."""
    room = engine.n_free.get(node)
    if room is None:
        return False
    steps: list[tuple[int, int, bool]] = []  # (event, pod, into the node)
    for p in moved:
        if p == q or not engine.moved(p):
            continue
        a, b = engine.g_node[engine.p_origin[p][0]], engine.g_node[engine.p_gids[p][0]]
        if a != b and node in (a, b):
            steps.append((engine.p_event[p], p, b == node))
    # The node's room before any move, q back home included (it is away now).
    for _, p, into in steps:
        room = room + engine.p_res[p] if into else room - engine.p_res[p]
    room = room - engine.p_res[q]
    for _, p, into in sorted(steps):
        if into:
            if not room.covers(engine.p_res[p]):
                return True
            room = room - engine.p_res[p]
        else:
            room = room + engine.p_res[p]
    return False
