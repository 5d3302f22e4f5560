"""``plan()``: the public entry of the planning package. Checks the options, runs the objective's
greedy strategy, then (objective free-gpus) the exact planner where it applies, and measures the
state before and after the plan.
"""

from __future__ import annotations

import dataclasses
import time

from hami_place_core import capacity
from hami_place_core.fragmentation import WorkloadMix, cluster_metrics, mix_from_state
from hami_place_core.planning import exact as exact_planner
from hami_place_core.planning.constraints import replacement_state
from hami_place_core.planning.demand import demand_moves
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.model import (
    OBJECTIVES,
    SOLVERS,
    Move,
    Plan,
    PlanMetrics,
    PlanOptions,
    apply_moves,
)
from hami_place_core.planning.prefix import best_prefix, fgd_measure, free_gpus_measure, prefix_totals
from hami_place_core.planning.strategies import fragmentation, free_gpus
from hami_place_core.state import ClusterState


def plan(state: ClusterState, options: PlanOptions | None = None) -> Plan:
    """An ordered, valid list of moves for `options.objective`, with the metrics and the demand's
    room before and after.

    `state` is not modified. Deterministic: the same state and options give the same plan. With
    ``max_moves`` N the plan is never worse, by the objective's own measure, than the first N moves
    of the plan without the limit (every prefix of a plan is a valid plan).
    """
    options = options or PlanOptions()
    if options.objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {options.objective!r}")
    if options.max_moves is not None and options.max_moves < 0:
        raise ValueError("max_moves must be >= 0")
    if options.solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {options.solver!r}")
    started = time.perf_counter()
    mix = options.mix or mix_from_state(state)
    demand = capacity.choose_demand(state, given=options.demand)
    base = replacement_state(state)
    found = _solve(base, options, mix, demand)
    if options.max_moves is not None and options.objective != "demand":
        found = _no_worse_than_a_prefix(base, options, mix, demand, found)
    moves, engine, solver, note = found
    before = cluster_metrics(state, mix)
    touched = {n for m in moves for n in (m.from_node, m.to_node)}
    after_state = apply_moves(state, moves)
    after = cluster_metrics(after_state, mix, same=before, changed=touched)
    return Plan(
        objective=options.objective,
        moves=moves,
        before=PlanMetrics.of(before),
        after=PlanMetrics.of(after),
        immovable=engine.immovable,
        seconds=time.perf_counter() - started,
        solver=solver,
        solver_note=note,
        freed_by_prefix=_freed_by_prefix(base, moves),
        demand=demand,
        room_before=capacity.room(state, demand),
        room_after=capacity.room(after_state, demand),
    )


def _freed_by_prefix(base: ClusterState, moves: tuple[Move, ...]) -> tuple[int, ...]:
    """Whole GPUs freed after each move, counted on the state (a move's own `frees` and `takes`
    are the engine's view, which leaves out GPUs a node-room exchange frees on a CPU-full node)."""
    totals = prefix_totals(base, moves, free_gpus_measure())
    return tuple(int(t[0] - totals[0][0]) for t in totals[1:])


Found = tuple[tuple[Move, ...], Engine, str, str]  # moves, the engine that planned them, solver, note


def _solve(base: ClusterState, options: PlanOptions, mix: WorkloadMix, demand: capacity.Demand) -> Found:
    """The objective's moves on the replacement state `base`."""
    if options.objective == "demand":
        moves, engine = demand_moves(base, options, mix, demand)
        return moves, engine, "greedy", ""
    engine = Engine(base, options)
    if options.objective == "fragmentation":
        return tuple(fragmentation(engine, options, mix)), engine, "greedy", ""
    moves = tuple(free_gpus(engine, options, mix))
    if options.solver == "greedy":
        return moves, engine, "greedy", ""
    moves, solver, note = _exact(base, engine, options, moves)
    return moves, engine, solver, note


def _no_worse_than_a_prefix(
    base: ClusterState, options: PlanOptions, mix: WorkloadMix, demand: capacity.Demand, limited: Found
) -> Found:
    """The limited plan, or the best prefix of at most max_moves moves of the unlimited plan when
    that prefix does better by the objective's measure (the greedy with a budget can spend it on
    moves the unlimited plan would have made later)."""
    unlimited = _solve(base, dataclasses.replace(options, max_moves=None), mix, demand)
    measure = free_gpus_measure() if options.objective == "free-gpus" else fgd_measure(mix)
    keep = best_prefix(base, unlimited[0], measure, limit=options.max_moves)
    ours = prefix_totals(base, limited[0], measure)
    theirs = prefix_totals(base, unlimited[0][:keep], measure)
    if measure.key(theirs[-1], theirs[0]) <= measure.key(ours[-1], ours[0]):
        return limited
    moves, engine, solver, note = unlimited
    why = f"the first {keep} moves of the plan without --max-moves do better than a plan of {options.max_moves}"
    return moves[:keep], engine, solver, f"{note}; {why}" if note else why


# The start of the note of a plan whose exact stage did not run for the state's size.
TOO_LARGE = "exact planner: state too large for"


class SolverUnavailable(ValueError):
    """--solver exact without HiGHS installed."""


def _exact(
    state: ClusterState, engine: Engine, options: PlanOptions, greedy: tuple[Move, ...]
) -> tuple[tuple[Move, ...], str, str]:
    """The exact planner's moves when they free more GPUs than the greedy plan's, else those."""
    if options.solver == "exact" and not exact_planner.available():
        # Asked for by name: an error whatever the state's size (the plugin's default build has no HiGHS).
        raise SolverUnavailable(f"--solver exact: {exact_planner.ABSENT}")
    pairs = sum(engine.p_static) * sum(engine.g_counts)
    limit = exact_planner.EXACT_MAX_PAIRS if options.solver == "exact" else exact_planner.EXACT_AUTO_PAIRS
    if pairs > limit:
        # Checked before importing HiGHS (auto): the shipped openb example has 21.5 million pairs.
        why = f"{TOO_LARGE} {options.solver} ({pairs:,} pod-GPU pairs to consider, over {limit:,})"
        return greedy, "greedy", why
    if not exact_planner.available():
        return greedy, "greedy", exact_planner.ABSENT
    floor = sum(len(m.frees) - len(m.takes) for m in greedy)
    outcome = exact_planner.solve(Engine(state, options), options, floor, seed=greedy)
    if outcome.moves is None:
        return greedy, "greedy", f"exact planner: {outcome.why}"
    return tuple(outcome.moves), "exact", f"exact planner: {outcome.why}"
