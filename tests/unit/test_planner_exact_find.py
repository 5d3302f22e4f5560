"""The exact planner's second attempt: any assignment freeing more first, then a short one.

The fixture is 16 nodes of a replayed openb state the planner was not tuned on: the gpuspec10 pod
list (10% of tasks constrain the GPU model) with departures (seed 1, share 0.1) at cut 0.99, the
MILP subset that ``bench/planner_bench.py --all-lists --subsets-only --seed 1`` draws second for
that list (tests/unit/data/openb-gpuspec10-subset.json.gz: the nodes and pods as the replay wrote
them; the openb trace is CC BY 4.0, docs/openb.md). The greedy planner frees nothing there. One
GPU can be freed, by 3 empty GPUs taking the pods of 4 (47+47, 32+65, 22+46+32 %) and a pod
making room for another on a third node: a tight packing. With the moves-per-freed-GPU limit as
a row, HiGHS needs thousands of steps to find such an assignment, so `auto`'s lexicographic
solve stops at its budget with nothing better; without the row it finds one at once.
"""

from __future__ import annotations

import re

import pytest

from hami_place_core.planning import PlanOptions, plan
from hami_place_core.planning import exact as planner_exact
from hami_place_core.planning.highs import WorkLimit
from hami_place_core.state import ClusterState
from tests.planner_fixtures import exact_outcomes, openb_subset, replay


def gpuspec10_subset() -> ClusterState:
    return openb_subset("gpuspec10")


def test_auto_frees_the_gpu_the_lexicographic_solve_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    state = gpuspec10_subset()
    assert plan(state, PlanOptions(solver="greedy")).gpus_freed == 0
    seen = exact_outcomes(monkeypatch)
    p = plan(state)
    assert (p.solver, p.gpus_freed, p.solver_note) == ("exact", 1, "exact planner: a MILP frees 1 (greedy 0)")
    assert 0 < len(p.moves) <= PlanOptions().max_moves_per_gpu
    replay(state, p.moves)
    work = seen[-1].work
    assert work is not None
    # The bins cut, then the lexicographic solve, which spends the rest of auto's budget without a
    # better assignment; then the second attempt: the first assignment found, a shorter one, and
    # (that one being over the limit or without an order) re-solves.
    (cut, _, _), (lexicographic, _, _), *second = work.runs
    assert cut + lexicographic >= planner_exact.AUTO_WORK
    assert len(second) >= 2
    assert work.checks <= planner_exact.AUTO_WORK * (1 + planner_exact.SECOND_WORK) + 10
    # Deterministic: the same plan and the same work on a second run.
    again = plan(state)
    assert again.moves == p.moves and seen[-1].work is not None and seen[-1].work.runs == work.runs


def test_without_the_second_attempt_auto_keeps_the_greedy_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_exact, "SECOND_WORK", 0)
    p = plan(gpuspec10_subset())
    assert (p.solver, p.gpus_freed) == ("greedy", 0)
    assert re.fullmatch(
        r"exact planner: stopped at its work limit \([\d,]+ solver steps of [\d,]+: 3 solves, .*\) with nothing "
        r"better; the greedy plan frees 0; --solver exact works longer",
        p.solver_note,
    ), p.solver_note


def test_a_work_limit_extends_from_what_was_spent() -> None:
    work = WorkLimit(10)
    work.checks, work.hit = 12, True  # a solve may overrun its limit by a few checks
    work.extend(5)
    assert (work.limit, work.left, work.hit) == (17, 5, False)
    work.extend(3)
    assert (work.limit, work.left) == (20, 8)
