"""The exact planner (a MILP over final places, then an order) next to the greedy one.

The fixture is a real one: 16 nodes of the shipped openb example (the benchmark's MILP subset
14), where the greedy planner frees 3 GPUs and a plan of direct, valid moves frees 4 (the MILP's
proven optimum). HiGHS is a dev dependency, so these tests run wherever the suite does.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from hami_place_core.planning import PlanOptions, SolverUnavailable, plan
from hami_place_core.planning import exact as planner_exact
from hami_place_core.planning.milp_bounds import milp_bound
from hami_place_core.state import ClusterState, build_state
from tests.planner_fixtures import node, pod, replay, subset_raw


def subset() -> ClusterState:
    nodes, pods = subset_raw()
    return build_state(nodes, pods)


def test_exact_frees_the_gpu_the_greedy_planner_misses() -> None:
    state = subset()
    greedy = plan(state, PlanOptions(solver="greedy"))
    assert (greedy.gpus_freed, greedy.solver, greedy.solver_note) == (3, "greedy", "")
    exact = plan(state, PlanOptions(solver="exact"))
    optimum = milp_bound(state, time_limit=60, fewest_moves=False)
    assert optimum.optimal and optimum.gain == 4
    assert exact.solver == "exact" and exact.gpus_freed == 4, exact.solver_note
    assert exact.solver_note == "exact planner: a MILP frees 4 (greedy 3)"
    replay(state, exact.moves)  # every step valid: HAMi's Fit and node room, no GPU oversubscribed
    # Within the planner's limits: max_moves_per_gpu (8) per freed GPU, one move per workload.
    assert len(exact.moves) <= 8 * exact.gpus_freed
    per_workload = Counter(m.workload for m in exact.moves)
    assert per_workload and max(per_workload.values()) == 1
    # Every move is needed: sending any one pod back home frees fewer GPUs or leaves no order.
    assert len({m.pod for m in exact.moves}) == len(exact.moves)
    frees = [f for m in exact.moves for f in m.frees]
    assert len(frees) - sum(len(m.takes) for m in exact.moves) == 4
    # auto is exact here (HiGHS installed, 16 nodes), and deterministic.
    auto = plan(state)
    assert auto.solver == "exact" and auto.moves == exact.moves


def test_exact_keeps_to_the_move_limits() -> None:
    state = subset()
    few = plan(state, PlanOptions(solver="exact", max_moves=3))
    assert len(few.moves) <= 3 and few.gpus_freed == 3
    tight = plan(state, PlanOptions(solver="exact", max_moves_per_gpu=2))
    assert len(tight.moves) <= 2 * max(tight.gpus_freed, 1)
    replay(state, tight.moves)


def test_the_greedy_plan_stays_when_the_milp_frees_no_more() -> None:
    state = build_state(
        [node("n1", 2)], [pod("a", "n1", (0,), 40, labels={"app": "a"}), pod("b", "n1", (1,), 30, labels={"app": "b"})]
    )
    p = plan(state, PlanOptions(solver="exact"))
    assert p.gpus_freed == 1 and len(p.moves) == 1
    assert (p.solver, p.solver_note) == ("greedy", "exact planner: no assignment frees more")


def test_without_highspy_auto_falls_back_and_exact_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_exact, "available", lambda: False)
    state = subset()
    p = plan(state)
    assert (p.solver, p.gpus_freed) == ("greedy", 3)
    assert p.solver_note == "exact planner not installed (highspy)"
    with pytest.raises(SolverUnavailable, match=r"pip install 'hami-place\[exact\]'"):
        plan(state, PlanOptions(solver="exact"))


def test_large_states_are_left_to_the_greedy_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_exact, "EXACT_AUTO_PAIRS", 100)
    p = plan(subset())
    assert p.solver == "greedy" and p.gpus_freed == 3
    assert re.fullmatch(
        r"exact planner: state too large for auto \([\d,]+ pod-GPU pairs to consider, over 100\)", p.solver_note
    )
    # --solver exact goes further (EXACT_MAX_PAIRS), then refuses too.
    assert plan(subset(), PlanOptions(solver="exact")).solver == "exact"
    monkeypatch.setattr(planner_exact, "EXACT_MAX_PAIRS", 100)
    refused = plan(subset(), PlanOptions(solver="exact"))
    assert refused.solver == "greedy" and "too large for exact" in refused.solver_note


def test_unknown_solver_is_refused() -> None:
    with pytest.raises(ValueError, match="solver must be one of auto, greedy, exact"):
        plan(subset(), PlanOptions(solver="cplex"))  # type: ignore[arg-type]


def test_the_fragmentation_objective_never_runs_the_milp() -> None:
    p = plan(subset(), PlanOptions(objective="fragmentation", solver="exact"))
    assert (p.solver, p.solver_note) == ("greedy", "")


def test_a_solver_past_its_wall_limit_leaves_the_greedy_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_exact, "WALL_SECONDS", 1e-9)
    p = plan(subset())
    assert (p.solver, p.gpus_freed) == ("greedy", 3)
    assert p.solver_note == "exact planner: stopped after 1e-09 s without a better plan (--solver greedy skips it)"
