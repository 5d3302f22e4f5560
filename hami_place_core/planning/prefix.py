"""The prefixes of a plan, measured: every prefix of a plan is a valid plan (the moves are ordered
so that each is valid when made), so the best plan of at most N moves is never worse than the
best prefix of at most N moves of a longer one. This module walks a plan's prefixes and scores each
by an objective's own measure, node by node, updating only the two nodes a move touches.

A :class:`Measure` says what one node contributes (a tuple of numbers summed over nodes) and how
totals compare (a key: larger is better). :func:`best_prefix` returns the length of the best
prefix within a limit, the shortest among equals, and only among prefixes the measure admits
(e.g. none that leaves fewer free nodes than before).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hami_place_core import capacity
from hami_place_core.fragmentation import FitTable, WorkloadMix, node_metrics
from hami_place_core.planning.model import Move, apply_move, copy_state
from hami_place_core.state import ClusterState, NodeState

Totals = tuple[float, ...]


@dataclass(frozen=True)
class Measure:
    node: Callable[[ClusterState, NodeState], Totals]  # one node's share of the totals
    key: Callable[[Totals, Totals], tuple[float, ...]]  # (totals, totals before) -> larger is better
    admits: Callable[[Totals, Totals], bool] = lambda totals, before: True  # a prefix may be chosen


def prefix_totals(state: ClusterState, moves: Sequence[Move], measure: Measure) -> list[Totals]:
    """The measure's totals before any move, then after each of `moves` (len(moves) + 1 entries).
    `state` is not modified."""
    s = copy_state(state)
    per = {name: measure.node(s, n) for name, n in s.nodes.items()}
    width = len(next(iter(per.values()), ()))
    totals = [sum(v[i] for v in per.values()) for i in range(width)]
    out = [tuple(totals)]
    for m in moves:
        apply_move(s, m)
        for name in {m.from_node, m.to_node}:
            new = measure.node(s, s.nodes[name])
            totals = [t - o + n for t, o, n in zip(totals, per[name], new, strict=True)]
            per[name] = new
        out.append(tuple(totals))
    return out


def best_prefix(state: ClusterState, moves: Sequence[Move], measure: Measure, limit: int | None = None) -> int:
    """How many of `moves`, at most `limit`, make the best admitted prefix (0: none is better
    than the state as it is); the shortest among equals."""
    totals = prefix_totals(state, moves[:limit] if limit is not None else moves, measure)
    before = totals[0]
    best, best_key = 0, measure.key(before, before)
    for i, t in enumerate(totals[1:], start=1):
        if measure.admits(t, before):
            k = measure.key(t, before)
            if k > best_key:
                best, best_key = i, k
    return best


# ---- the objectives' measures -------------------------------------------------------------------------
WHOLE = capacity.DemandItem(gpus=1, count=1)


def whole_gpus(state: ClusterState, node: NodeState) -> int:
    return capacity.node_room(state, node, WHOLE)


def free_gpus_measure() -> Measure:
    """free-gpus: whole GPUs free."""
    return Measure(node=lambda s, n: (whole_gpus(s, n),), key=lambda t, _: t)


def fgd_measure(mix: WorkloadMix) -> Measure:
    """fragmentation: FGD (lower is better), with one fit table for every node and prefix."""
    fits = FitTable(mix)
    # Rounded: the same moves summed node by node in another order must compare equal.
    return Measure(node=lambda s, n: (node_metrics(n, mix, fits).fgd,), key=lambda t, _: (-round(t[0], 6),))


def demand_measure(demand: capacity.Demand) -> Measure:
    """demand: (free nodes, room for each shape of the demand..., whole GPUs). A prefix is admitted
    only if no figure of the demand's room and no free-node count is below where it started; the
    best has the most room for the largest shapes first, then the most whole GPUs."""

    def node(s: ClusterState, n: NodeState) -> Totals:
        rooms = tuple(capacity.node_room(s, n, item) for item in demand.items)
        return (int(capacity.node_is_free(n)), *rooms, whole_gpus(s, n))

    def admits(totals: Totals, before: Totals) -> bool:
        return all(a >= b for a, b in zip(totals[:-1], before[:-1], strict=True))

    return Measure(node=node, key=lambda t, _: t[1:], admits=admits)
