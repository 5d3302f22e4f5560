"""The passes the objectives are made of, each a search over the engine that commits what it keeps:
evacuations by cost (:func:`evacuations`), pairing GPUs into an empty one (:func:`fresh_gpus`),
evacuations into an offered empty GPU (:func:`seeded`) and single moves that lower FGD
(:func:`single_moves`). :mod:`~hami_place_core.planning.strategies` says in which order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.evacuation import MAX_DEPTH, candidates, evacuate, kind_of
from hami_place_core.planning.fgd import EngineFgd
from hami_place_core.planning.model import PlanOptions
from hami_place_core.planning.targets import best_target

# An objective's veto on what a pass would commit: the undo records of the change, and the GPU it
# empties (fragmentation: only changes that lower FGD enough).
Accept = Callable[[list[Record], int], bool]


def evacuations(engine: Engine, options: PlanOptions, accept: Accept | None) -> None:
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
        for x in candidates(engine):
            if engine.moves_made >= engine.max_moves:
                return
            if engine.scan_limit is not None and engine.scanned >= engine.scan_limit:
                return
            if not engine.is_open(x) or (engine.g_locked[x] and not engine.reroute):
                continue
            new = sum(1 for p in engine.g_pods[x] if not engine.moved(p))
            if new > budget or (new == 0 and budget > 1):
                continue
            # Near the --max-moves limit most GPUs need more moves than are left: a search for
            # them is bound to fail, and used to dominate the runtime of a limited plan.
            if new > engine.max_moves - engine.moves_made:
                continue
            kind = kind_of(engine, x)
            if failed.get(kind) == changes:
                continue
            done = evacuate(engine, x, min(budget - new, MAX_DEPTH), budget)
            if done is not None and accept is not None and not accept(done[1], x):
                engine.take_back(done[1])
                done = None
            if done is None:
                failed[kind] = changes
            else:
                changes += 1


def roomy_empties(engine: Engine) -> list[int]:
    """Empty GPUs that count as free and received nothing, those of the roomiest nodes (CPU, then
    memory) first: where pods of CPU-full nodes can go together."""

    def roomiest(g: int) -> tuple[int, int, int]:
        cpu, mem = engine.node_room(engine.g_node[g])
        return (-cpu, -mem, g)

    counts, use, locked = engine.g_counts, engine.g_use, engine.g_locked
    return sorted((g for g in range(len(counts)) if counts[g] and use[g].used == 0 and not locked[g]), key=roomiest)


def fresh_gpus(
    engine: Engine,
    patience: int = 16,
    most_pods: int = 2,
    accept: Accept | None = None,
) -> None:
    """GPUs of a few pods (at most `most_pods`) that could not be emptied into used GPUs (on busy
    nodes, mostly for want of node CPU or memory) may still be emptied *together* into an empty
    GPU of a roomy node: k of them there free k GPUs and take one, k - 1 GPUs for their pods'
    moves. First fit decreasing by the GPUs' compute into the empty GPUs, roomiest node first; a
    GPU is moved all or nothing, and an empty GPU that would take fewer than two stays empty.
    Gives up after `patience` empty GPUs in a row that took nothing (the rest are alike or worse).
    `accept` (objective fragmentation) may veto a filled GPU, as it vetoes evacuations."""
    items = _pairable(engine, most_pods)
    if len(items) < 2:
        return
    load = {g: engine.g_use[g].usedcores for g in items}
    items.sort(key=lambda g: (-load[g], len(engine.g_pods[g]), g))
    idle = 0
    for e in roomy_empties(engine):
        if len(items) < 2 or idle >= patience or engine.max_moves - engine.moves_made < 2:
            return
        # Only GPUs whose pods may all go to e (GPU type, UUID and node selectors) can pair there.
        # Type-blind, a T4-only 32% pod counted as a partner on every A800: the heaviest GPU
        # went in, nothing could join it, and after `patience` such tries pairing gave up (gpuspec25
        # with departures, cut 0.99: 18 GPUs it left behind).
        fit = [g for g in items if _may_go(engine, g, e)]
        # Compute of the GPUs still waiting, ascending: one opens an empty GPU only if another is
        # small enough to sit beside it (else the 81% pods, first in line, took every empty GPU in
        # turn and failed, and the 47% ones behind them never got one).
        sizes = sorted(load[g] for g in fit)
        taken = _fill(engine, e, fit, load, sizes) if len(fit) >= 2 else []
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
            for p, _, _, _ in records:
                engine.give_reason(p, f"empty {engine.label(g)}, sharing an empty GPU of a roomier node")


def _may_go(engine: Engine, g: int, e: int) -> bool:
    """Every pod of GPU `g` accepts empty GPU `e` by its selectors and node constraints (room and
    Fit are checked as the pods move)."""
    node, d = engine.g_node[e], engine.g_dev[e]
    for p in engine.g_pods[g]:
        if not engine.p_plain[p] and not engine.allowed(p, d):
            return False
        nodes = engine.eligible_nodes(p)
        if nodes is not None and node not in nodes:
            return False
    return True


def _pairable(engine: Engine, most_pods: int) -> list[int]:
    """GPUs that count, of 1 to `most_pods` pods that may all move (none moved yet, none asking
    for a whole GPU), that received nothing."""

    def movable(p: int) -> bool:
        r = engine.p_req[p]
        return r is not None and r.nums == 1 and not engine.moved(p) and engine.can_move(p)

    return [
        g
        for g in range(len(engine.g_dev))
        if engine.g_counts[g]
        and 0 < len(engine.g_pods[g]) <= most_pods
        and not engine.g_locked[g]
        and all(movable(p) and not engine.needs_empty_gpu(p) for p in engine.g_pods[g])
    ]


def _fill(
    engine: Engine, e: int, items: list[int], load: dict[int, int], sizes: list[int]
) -> list[tuple[int, list[Record]]]:
    """First fit decreasing of the GPUs `items` (compute `load`) into the empty GPU `e`: the GPUs
    whose pods all moved there, with their undo records."""
    d = engine.g_dev[e]
    taken: list[tuple[int, list[Record]]] = []
    for g in items:
        room = d.devcore - engine.g_use[e].usedcores
        if room < sizes[0]:
            break  # no GPU still waiting is small enough
        if load[g] > room or (not taken and not _partner(sizes, load[g], room)):
            continue
        records = _move_gpu(engine, g, e)
        if records is not None:
            taken.append((g, records))
    return taken


def _partner(sizes: list[int], size: int, room: int) -> bool:
    """Another GPU still waiting (`sizes`, ascending) fits beside one of `size` in `room`."""
    if len(sizes) < 2:
        return False
    other = sizes[1] if sizes[0] == size else sizes[0]
    return other <= room - size


def _move_gpu(engine: Engine, g: int, e: int) -> list[Record] | None:
    """Every pod of GPU `g` onto GPU `e`, largest first, all or nothing: the undo records."""
    pods = sorted(engine.g_pods[g], key=engine.pod_size, reverse=True)
    if engine.max_moves - engine.moves_made < len(pods):
        return None
    records: list[Record] = []
    for p in pods:
        req = engine.p_req[p]
        assert req is not None
        if not engine.can_move(p) or not engine.fits(p, e, req, engine.eligible_nodes(p)):
            break
        records.append(engine.apply(p, (e,)))
    if len(records) < len(pods):
        engine.rollback(records)
        return None
    return records


def seeded(engine: Engine, options: PlanOptions, patience: int = 2, most_pods: int = 2, tries: int = 40) -> None:
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
    for e in roomy_empties(engine):
        d, node = engine.g_dev[e], engine.g_node[e]
        if (node, d.type, d.devmem) in seen:
            continue
        seen.add((node, d.type, d.devmem))
        if idle >= patience or engine.max_moves - engine.moves_made < 3:
            return
        if listed is None:
            # Out of the second round, candidates() holds no GPU with a pod already moving.
            listed = candidates(engine)
        # As in pairing, only GPUs whose pods accept e (type, UUID, node) are worth a try there.
        items = [x for x in listed if len(engine.g_pods[x]) <= most_pods and _may_go(engine, x, e)]
        items.sort(key=lambda x: (-engine.g_use[x].usedcores, x))
        engine.seed(e)
        mark, base = len(engine.evacuated), engine.moves_made
        records: list[Record] = []
        for x in items[:tries]:
            if engine.moves_made >= engine.max_moves:
                break
            if not engine.is_open(x) or engine.g_locked[x]:
                continue
            done = evacuate(engine, x, 1, len(engine.g_pods[x]) + 1)
            if done is not None:
                records.extend(done[1])
        engine.unseed(e, reindex=False)  # reindexed below, after any rollback
        freed = len(engine.evacuated) - mark
        moves = engine.moves_made - base
        # Evacuations that left `e` alone stand on their own; with `e` taken, only a net gain.
        if not engine.g_pods[e] or (freed >= 2 and moves <= cap * (freed - 1)):
            idle = 0 if freed else idle + 1
            if freed:
                listed = None
        else:
            engine.take_back(records, emptied_since=mark)
            idle += 1
        engine.reindex(e)


def single_moves(
    engine: Engine, options: PlanOptions, fgd: EngineFgd, committed: dict[str, float], only_frees: bool = False
) -> None:
    """Moves of single pods that lower FGD on their own (e.g. a small pod into another GPU's slack).

    With `only_frees` (objective free-gpus) the moves are a means: afterwards, latest first, each
    one that did not leave its GPU empty is taken back if its pod still fits where it was, so only
    the moves that free GPUs, or make the room that others use to free them, remain."""
    made: list[tuple[int, Record]] = []
    order = sorted((p for p in range(len(engine.p_alloc)) if engine.can_move(p)), key=lambda p: (engine.pod_size(p), p))
    for p in order:
        if engine.moves_made >= engine.max_moves:
            break  # with only_frees, the moves that freed nothing still go back below
        if not engine.can_move(p) or engine.moved(p) or engine.needs_empty_gpu(p):
            continue
        source = engine.p_gids[p]
        target = best_target(engine, p, frozenset(source))
        if target is None:
            continue
        record = engine.apply(p, target)
        touched = sorted({engine.g_node[g] for g in (*source, *target)})
        after = {n: fgd.node(n) for n in touched}
        delta = sum(committed[n] - after[n] for n in touched)
        if delta >= options.min_fgd_gain:
            committed.update(after)
            engine.give_reason(p, f"lower FGD by {delta:.2f} GPU")
            made.append((p, record))
        else:
            engine.undo(record)
    if not only_frees:
        return
    for p, record in reversed(made):
        origin = record[1]
        if all(not engine.g_pods[g] for g in origin) or not engine.fits_back(p, origin):
            engine.give_reason(p, f"empty {engine.label(origin[0])}" if not engine.g_pods[origin[0]] else "make room")
            continue
        engine.undo(record)
        engine.drop_reason(p)
