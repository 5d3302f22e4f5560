"""``plan()``: the public entry of the planning package. Checks the options, runs the objective's
greedy strategy, then (objective free-gpus) the exact planner where it applies, and measures the
state before and after the plan.
"""

from __future__ import annotations

import time

from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.planning import exact as exact_planner
from hami_place_core.planning.constraints import replacement_state
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
from hami_place_core.planning.strategies import fragmentation, free_gpus
from hami_place_core.state import ClusterState


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
    engine = Engine(base, options)
    solver, note = "greedy", ""
    if options.objective == "free-gpus":
        moves = tuple(free_gpus(engine, options, mix))
        if options.solver != "greedy":
            moves, solver, note = _exact(base, engine, options, moves)
    else:
        moves = tuple(fragmentation(engine, options, mix))
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
