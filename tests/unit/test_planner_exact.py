"""The exact planner (a MILP over final places, then an order) next to the greedy one.

The fixture is a real one: 16 nodes of the shipped openb example (the benchmark's MILP subset
14), where the greedy planner frees 3 GPUs and a plan of direct, valid moves frees 4 (the MILP's
proven optimum). HiGHS is a dev dependency, so these tests run wherever the suite does.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from typing import Any

import pytest

from hami_place_core.planning import PlanOptions, SolverUnavailable, plan
from hami_place_core.planning import exact as planner_exact
from hami_place_core.planning.milp_bounds import milp_bound
from hami_place_core.state import ClusterState, build_state
from tests.planner_fixtures import exact_outcomes as outcomes
from tests.planner_fixtures import node, pod, replay, subset


@pytest.fixture(autouse=True)
def _no_carries(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests show the exact planner freeing what the greedy one misses. Since the greedy
    planner's node-room exchanges (planning/exchange.py) and, each alone, its seed chains
    (planning/chains.py) it frees this subset's optimum itself (test_planner_exchange.py,
    test_planner_chains.py): here it runs without both, as before them."""
    from hami_place_core.planning import strategies

    monkeypatch.setattr(strategies, "carries", lambda engine, options: [])
    monkeypatch.setattr(strategies, "seed_chains", lambda engine, options: None)


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
    # auto runs the exact planner here too (HiGHS installed, 16 nodes), with its smaller budget, and
    # frees the same 4 (test_auto_orders_within_its_budget).
    auto = plan(state)
    assert (auto.solver, auto.gpus_freed, auto.solver_note) == ("exact", 4, exact.solver_note)


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
    assert p.solver_note == planner_exact.ABSENT
    assert p.solver_note.startswith("exact stage not in this build") and "-full" in p.solver_note
    absent = r"^--solver exact: exact stage not in this build.*pip install 'hami-place\[exact\]'"
    with pytest.raises(SolverUnavailable, match=absent):
        plan(state, PlanOptions(solver="exact"))
    # asked for by name, absent is the answer whatever the size (not "state too large")
    monkeypatch.setattr(planner_exact, "EXACT_MAX_PAIRS", 1)
    with pytest.raises(SolverUnavailable, match=absent):
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


def test_the_plan_does_not_depend_on_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # A budget that binds: without the bins cut the solve stops at it, and its incumbent has an order.
    monkeypatch.setattr(planner_exact, "_bins_cut", lambda *args: None)
    monkeypatch.setattr(planner_exact, "EXACT_WORK", 10)
    seen = outcomes(monkeypatch)
    state = subset()
    normal = plan(state, PlanOptions(solver="exact"))
    work = seen[-1].work
    assert work is not None and work.hit and work.checks >= 10
    assert normal.solver_note.startswith("exact planner: stopped at its work limit")
    # A very slow machine: every clock read is three hours after the one before.
    for name in ("perf_counter", "monotonic", "time", "process_time"):
        now = [getattr(time, name)()]

        def clock(now: list[float] = now) -> float:
            now[0] += 3 * 3600
            return now[0]

        monkeypatch.setattr(time, name, clock)
    slow = plan(state, PlanOptions(solver="exact"))
    assert slow.seconds > 3600  # the clock did jump, and only the report shows it
    assert (slow.moves, slow.solver, slow.solver_note) == (normal.moves, normal.solver, normal.solver_note)


def test_the_best_assignment_found_is_kept_when_the_work_runs_out(monkeypatch: pytest.MonkeyPatch) -> None:
    state = subset()
    best = plan(state, PlanOptions(solver="exact"))
    assert best.gpus_freed == 4
    # The first solve starts from the best plan's places (as it starts from the greedy plan's), and
    # without the bins cut cannot prove it optimal within 30 steps: its incumbent frees 4, one
    # more than the greedy plan, and is kept, ordered, although nothing is proven.
    solve = planner_exact.solve
    monkeypatch.setattr(planner_exact, "_bins_cut", lambda *args: None)
    monkeypatch.setattr(planner_exact, "solve", lambda e, o, floor, seed=(): solve(e, o, floor, best.moves))
    monkeypatch.setattr(planner_exact, "EXACT_WORK", 30)
    p = plan(state, PlanOptions(solver="exact"))
    assert (p.solver, p.gpus_freed, p.moves) == ("exact", 4, best.moves)
    assert re.fullmatch(
        r"exact planner: stopped at its work limit \(30 solver steps of 30: 1 solve, 0 branch-and-bound nodes, "
        r"[\d,]+ LP iterations\); best assignment found frees 4 \(greedy 3\), not proven optimal",
        p.solver_note,
    ), p.solver_note
    replay(state, p.moves)


def test_a_spent_budget_leaves_the_greedy_plan_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_exact, "AUTO_WORK", 10)
    p = plan(subset())
    assert (p.solver, p.gpus_freed) == ("greedy", 3)
    # The bins cut and the lexicographic solve spend the 10 steps; the second attempt's share for
    # finding any better assignment (a quarter of twice the budget) finds none either: 3 solves.
    steps = 10 + planner_exact.SECOND_WORK * 10 // planner_exact.FIND_SHARE
    assert re.fullmatch(
        rf"exact planner: stopped at its work limit \({steps} solver steps of {steps}: 3 solves, [\d,]+ "
        r"branch-and-bound nodes?, [\d,]+ LP iterations?\) with nothing better; the greedy plan frees 3; "
        r"--solver exact works longer",
        p.solver_note,
    ), p.solver_note


def test_no_highs_solve_of_the_exact_planner_has_a_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import highspy

    set_option, run = highspy.Highs.setOptionValue, highspy.Highs.run
    options: list[str] = []
    runs: list[float] = []

    def spy_option(self: Any, name: str, value: Any) -> Any:
        options.append(name)
        return set_option(self, name, value)

    def spy_run(self: Any) -> Any:
        runs.append(self.getOptionValue("time_limit")[1])
        return run(self)

    monkeypatch.setattr(highspy.Highs, "setOptionValue", spy_option)
    monkeypatch.setattr(highspy.Highs, "run", spy_run)
    p = plan(subset(), PlanOptions(solver="exact"))
    assert p.solver == "exact"
    assert len(runs) >= 2 and "mip_max_nodes" in options  # the bins cut, the solve (and any re-solves)
    assert "time_limit" not in options and set(runs) == {math.inf}


def test_auto_has_less_work_than_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 0 < planner_exact.AUTO_WORK < planner_exact.EXACT_WORK
    for columns in (1, 200, 1_000, 2_254, 40_000):
        auto, exact = (planner_exact.work_budget(PlanOptions(solver=s), columns) for s in ("auto", "exact"))
        assert planner_exact.AUTO_WORK <= auto < exact
    # Large models get the plain budgets; smaller ones more steps, each step's LP being smaller.
    assert planner_exact.work_budget(PlanOptions(), 2_254) == planner_exact.AUTO_WORK
    assert planner_exact.work_budget(PlanOptions(), 200) == 5 * planner_exact.AUTO_WORK
    seen = outcomes(monkeypatch)
    state = build_state(
        [node("n1", 2)], [pod("a", "n1", (0,), 40, labels={"app": "a"}), pod("b", "n1", (1,), 30, labels={"app": "b"})]
    )
    limits = []
    for solver in ("auto", "exact"):
        plan(state, PlanOptions(solver=solver))
        work = seen[-1].work
        assert work is not None
        limits.append(work.limit)
    assert limits[0] < limits[1]
    assert limits == [planner_exact.work_budget(PlanOptions(solver=s), 4) for s in ("auto", "exact")]  # 4 columns


def exact_stage(state: ClusterState, solver: str, floor: int = 3) -> planner_exact.ExactOutcome:
    """The exact stage alone, against a floor of `floor` (the fixture's greedy plan frees 3)."""
    from hami_place_core.planning.engine import Engine

    options = PlanOptions(solver=solver)  # type: ignore[arg-type]
    return planner_exact.solve(Engine(state, options), options, floor)


def test_auto_orders_within_its_budget() -> None:
    # The fixture's 4th GPU needs pods to trade places between full nodes, and most assignments
    # freeing 4 have no order. Until the objective was lexicographic (GPUs in use, then moves that
    # must wait), `auto` spent its 50 solver steps (23 to prove 4, 25 more in a second solve for
    # the fewest waiting moves, whose incumbent was still the first solve's 48-move reshuffle) and
    # kept the greedy plan; `exact` needed 94 steps. Now one solve finds an assignment with an
    # order, and proves it frees the most, in well under auto's budget.
    out = exact_stage(subset(), "auto")
    assert out.moves is not None and out.gain == 4 and out.proven and out.retries == 0, out.why
    assert out.why == "a MILP frees 4 (greedy 3)"
    assert out.work is not None and not out.work.hit and out.work.checks < planner_exact.AUTO_WORK
    assert len(out.moves) <= 8 * 4
    replay(subset(), out.moves)
    # Deterministic: the same moves, note and work on a second run.
    again = exact_stage(subset(), "auto")
    assert again.moves == out.moves and again.why == out.why
    assert again.work is not None and (again.work.checks, again.work.runs) == (out.work.checks, out.work.runs)


def test_without_an_order_the_assignment_is_cut_off_and_solved_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first assignment is refused (as if it had no order): it is cut off, the gain kept, and
    # the next solve's assignment is ordered; the plan still frees 4, valid step by step.
    real = planner_exact._ordered
    calls: list[int] = []

    def first_has_none(engine: Any, chosen: dict[int, int]) -> Any:
        calls.append(len(chosen))
        return None if len(calls) == 1 else real(engine, chosen)

    monkeypatch.setattr(planner_exact, "_ordered", first_has_none)
    out = exact_stage(subset(), "exact")
    assert out.moves is not None and out.gain == 4 and out.retries == 1, out.why
    assert len(calls) == 2 and out.work is not None and len(out.work.runs) == 3  # bins cut, solve, re-solve
    replay(subset(), out.moves)


def test_a_node_row_counts_each_pod_at_home_once() -> None:
    # n1 has no CPU left: its two 60% pods (16 CPUs each) can neither share a GPU nor leave (n2
    # has no CPU either), and n2's 40% pod would fit beside either on the GPU but not on the node.
    # No plan frees anything. Each n1 pod has a column on both of n1's GPUs; the node row once
    # summed today's load over columns (64 CPUs, not 32), let n2's pod in, and the planner spent its
    # retries on assignments with no order.
    nodes = [node("n1", 2), node("n2", 1)]
    for n, cpu in zip(nodes, ("32", "8"), strict=True):
        n["status"]["allocatable"]["cpu"] = cpu
    pods = [pod("a", "n1", (0,), 60), pod("b", "n1", (1,), 60), pod("c", "n2", (0,), 40)]
    for p, cpu in zip(pods, ("16", "16", "8"), strict=True):
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    state = build_state(nodes, pods)
    assert milp_bound(state, time_limit=60, fewest_moves=False).gain == 0
    out = exact_stage(state, "exact", floor=0)
    assert (out.moves, out.gain, out.proven, out.retries) == (None, 0, True, 0), out.why
    assert out.why == "no assignment frees more"
