"""Seed chains (planning/chains.py): empty GPUs taken one after another, one more GPU freed.

The fixture: 16 nodes of a replayed openb state the planner was not tuned on, gpuspec25 (a
quarter of the tasks constrain the GPU model) with departures (seed 1) at cut 0.99, the MILP
subset ``bench/planner_bench.py --all-lists --subsets-only --seed 2`` draws fourth for that list.
Until seed chains the greedy planner freed nothing there and the exact planner's `auto` budget
was not enough either, though a plan of 4 direct moves frees one GPU: an 81% pod leaves a
CPU-full P100 node for an empty GPU, so that a P100-only 32% pod can take that node's CPU, and
the 47% pod leaving with it shares a second empty GPU with another 47% pod.
"""

from __future__ import annotations

import pytest

from hami_place_core.planning import PlanOptions, chains, plan, strategies
from hami_place_core.state import ClusterState
from tests.planner_fixtures import openb_subset, replay


def gpuspec25_subset() -> ClusterState:
    return openb_subset("gpuspec25")


def greedy(state: ClusterState, **options: int) -> tuple[int, list[int], list[int]]:
    p = plan(state, PlanOptions(solver="greedy", **options))  # type: ignore[arg-type]
    replay(state, p.moves)
    return p.gpus_freed, [len(m.frees) for m in p.moves], [len(m.takes) for m in p.moves]


def test_a_chain_frees_a_gpu_through_empty_gpus() -> None:
    state = gpuspec25_subset()
    p = plan(state, PlanOptions(solver="greedy"))
    assert p.gpus_freed == 1
    frees = sum(len(m.frees) for m in p.moves)
    takes = sum(len(m.takes) for m in p.moves)
    assert takes >= 1 and frees == takes + 1  # empty GPUs taken, one GPU more emptied
    assert len(p.moves) <= PlanOptions().max_moves_per_gpu
    replay(state, p.moves)
    assert plan(state, PlanOptions(solver="greedy")).moves == p.moves  # deterministic


def test_without_chains_the_greedy_planner_frees_nothing_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategies, "seed_chains", lambda engine, options: None)
    assert plan(gpuspec25_subset(), PlanOptions(solver="greedy")).gpus_freed == 0


def test_the_search_is_bounded_by_its_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chains, "CHAIN_WORK", 0)
    assert plan(gpuspec25_subset(), PlanOptions(solver="greedy")).gpus_freed == 0


def test_a_chain_keeps_to_the_move_limits() -> None:
    state = gpuspec25_subset()
    # Two moves per freed GPU cannot pay for the chain's moves; nor can --max-moves 3.
    for options in ({"max_moves_per_gpu": 2}, {"max_moves": 3}):
        freed, _, _ = greedy(state, **options)
        assert freed == 0, options


def test_chains_free_the_optimum_of_another_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    # The example's MILP subset 14 (tests/unit/test_planner_exact.py): a plan of direct moves frees
    # 4 GPUs, the greedy planner without node-room exchanges and chains 3. Chains alone find the 4th.
    from hami_place_core.state import build_state
    from tests.planner_fixtures import subset_raw

    monkeypatch.setattr(strategies, "carries", lambda engine, options: [])
    state = build_state(*subset_raw())
    freed, frees, takes = greedy(state)
    assert freed == 4 and sum(frees) - sum(takes) == 4
    monkeypatch.setattr(strategies, "seed_chains", lambda engine, options: None)
    assert greedy(state)[0] == 3


def test_a_gpu_in_use_without_a_known_pod_is_no_link() -> None:
    # Usage with no pod the state knows of (a hostile or stale annotation, as the fuzz test makes):
    # "emptying" it takes no move and leaves it in use. Once a chain of no moves was found
    # again and again, for ever (tests/unit/test_untrusted_fuzz.py hung on two seeds).
    from hami_place_core.planning.engine import Engine
    from hami_place_core.state import build_state
    from tests.planner_fixtures import node

    engine = Engine(build_state([node("n1", 2), node("n2", 2)], []), PlanOptions())
    engine.g_use[0].used, engine.g_use[0].usedcores = 1, 30
    chains.seed_chains(engine, PlanOptions())
    assert (engine.moves_made, engine.evacuated) == (0, [])
    assert not any(engine.g_seed)
