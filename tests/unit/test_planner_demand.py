"""Planning for the demand (issue 36 item 2): the demand objective never leaves the demand less
room or fewer free nodes than it found; every plan reports the room before and after; and a move
budget N never does worse than the first N moves of the plan without it (the prefix rule)."""

from __future__ import annotations

import random
from functools import cache

import pytest

from hami_place_core import capacity
from hami_place_core.examples import resolve_snapshot
from hami_place_core.fragmentation import mix_from_state
from hami_place_core.planning import Plan, PlanOptions, apply_moves, check_moves, plan
from hami_place_core.planning.prefix import (
    Measure,
    best_prefix,
    demand_measure,
    fgd_measure,
    free_gpus_measure,
    prefix_totals,
)
from hami_place_core.snapshot import load_snapshot
from hami_place_core.state import ClusterState, build_state
from tests.planner_fixtures import node, pod

DEMANDS = ("8x2,4x4,1x50", "1x10", None)  # None: the running mix


@cache
def _example() -> tuple[list, list]:
    nodes, pods, _ = load_snapshot(resolve_snapshot("example"))
    return nodes, pods


def window(seed: int, size: int = 80) -> ClusterState:
    """`size` nodes of the shipped example drawn at random, with their pods."""
    nodes, pods = _example()
    drawn = random.Random(seed).sample(nodes, size)  # noqa: S311 - a seeded draw, not a secret
    keep = {n["metadata"]["name"] for n in drawn}
    return build_state(
        [n for n in nodes if n["metadata"]["name"] in keep],
        [p for p in pods if (p.get("spec") or {}).get("nodeName") in keep],
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("demand", DEMANDS)
def test_the_demand_plan_leaves_every_room_and_the_free_nodes_no_lower(seed: int, demand: str | None) -> None:
    state = window(seed)
    d = capacity.parse_demand(demand) if demand else None
    p = plan(state, PlanOptions(objective="demand", solver="greedy", demand=d))
    assert not check_moves(state, list(p.moves))
    assert p.room_before is not None and p.room_after is not None
    assert p.room_after.free_nodes >= p.room_before.free_nodes
    assert all(a >= b for a, b in zip(p.room_after.pods, p.room_before.pods, strict=True))
    # The room is what a fresh count of the state after the moves gives.
    assert capacity.room(apply_moves(state, p.moves), p.demand or capacity.NOTHING) == p.room_after


def test_the_demand_plan_never_breaks_up_a_free_node_the_free_gpus_plan_spends() -> None:
    # n-free is completely free. The free-gpus greedy may take one of its GPUs as a seed for the
    # 30% pods scattered over a, b and c; the demand plan (8x1 waits) keeps it whole.
    nodes = [node("n-free", 8), *(node(n, 2) for n in "abc")]
    pods = [pod(f"{n}{i}", n, (i,), 30) for n in "abc" for i in (0, 1)]
    state = build_state(nodes, pods)
    d = capacity.parse_demand("8x1")
    p = plan(state, PlanOptions(objective="demand", solver="greedy", demand=d))
    assert not any(m.to_node == "n-free" for m in p.moves)
    assert p.room_after is not None and p.room_after.pods == (1,) and p.room_after.free_nodes >= 1
    assert p.gpus_freed >= 3  # the six 30% pods share three GPUs


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("objective", ["free-gpus", "fragmentation", "demand"])
def test_a_move_budget_never_does_worse_than_the_first_n_moves_of_the_unlimited_plan(seed: int, objective: str) -> None:
    state = window(seed, 120)
    opts = PlanOptions(objective=objective, solver="greedy")  # type: ignore[arg-type]
    unlimited = plan(state, opts)
    measure = _measure(objective, unlimited, state)
    for n in (1, 3, 5, 10, 25):
        limited = plan(state, PlanOptions(objective=objective, solver="greedy", max_moves=n))  # type: ignore[arg-type]
        assert len(limited.moves) <= n
        assert not check_moves(state, list(limited.moves))
        ours = prefix_totals(state, limited.moves, measure)
        theirs = prefix_totals(state, unlimited.moves[:n], measure)
        if measure.admits(theirs[-1], theirs[0]):
            assert measure.key(ours[-1], ours[0]) >= measure.key(theirs[-1], theirs[0]), (n, ours[-1], theirs[-1])


def _measure(objective: str, p: Plan, state: ClusterState) -> Measure:
    if objective == "demand":
        assert p.demand is not None
        return demand_measure(p.demand)
    if objective == "fragmentation":
        return fgd_measure(mix_from_state(state))
    return free_gpus_measure()


def test_prefix_totals_end_where_a_fresh_count_of_the_moved_state_is() -> None:
    state = window(5)
    p = plan(state, PlanOptions(solver="greedy"))
    d = capacity.parse_demand("4x1,2x1,1x1")
    totals = prefix_totals(state, p.moves, demand_measure(d))
    fresh = capacity.room(apply_moves(state, p.moves), d)
    assert totals[-1] == (fresh.free_nodes, *fresh.pods, fresh.whole_gpus)
    assert len(totals) == len(p.moves) + 1


def test_best_prefix_is_the_shortest_best_among_those_admitted() -> None:
    state = window(6)
    p = plan(state, PlanOptions(solver="greedy"))
    measure = free_gpus_measure()
    totals = prefix_totals(state, p.moves, measure)
    n = best_prefix(state, p.moves, measure)
    assert totals[n] == max(totals) and totals.index(max(totals)) == n
    assert best_prefix(state, p.moves, measure, limit=0) == 0
    nothing = Measure(node=measure.node, key=measure.key, admits=lambda t, b: False)
    assert best_prefix(state, p.moves, nothing) == 0


def test_every_plan_reports_the_demands_room_in_its_json() -> None:
    state = window(7)
    d = capacity.parse_demand("2x3")
    doc = plan(state, PlanOptions(solver="greedy", demand=d)).as_dict()
    assert doc["demand"]["source"] == "--demand"
    before, after = doc["demand"]["before"], doc["demand"]["after"]
    assert before["room"][0]["shape"] == "2x3" and {"freeNodes", "wholeGpus", "room", "groups"} <= set(after)
    running = plan(state, PlanOptions(solver="greedy")).as_dict()
    assert running["demand"]["source"] == "the running mix"
