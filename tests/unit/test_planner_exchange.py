"""Node-room exchanges (hami_place_core/planning/exchange.py): an exclusive pod of a CPU-full node
moves to an empty GPU of a roomy node, so that a stuck pod can take the full node's GPU room.
Pure: small hand-made states."""

from __future__ import annotations

from typing import Any

from hami_place_core.planning import PlanOptions, check_moves, plan
from hami_place_core.planning.constraints import replacement_state
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.exchange import carries, keep_used
from hami_place_core.state import ClusterState, build_state
from tests.planner_fixtures import node, pod, replay


def _cpu(p: dict[str, Any], cpu: str) -> dict[str, Any]:
    p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return p


def _case(p_spec: dict[str, Any] | None = None, w_owner: Any = "rs", sibling: bool = False) -> ClusterState:
    """a (10 CPUs) has a whole-GPU pod w (8 CPUs) on gpu-0 and a fixed 60% pod on gpu-1: 1 CPU
    free. p (40%, 2 CPUs) is alone on c/gpu-0; a/gpu-1 has the compute for it but not the CPU, and
    r's empty GPU takes p only if another GPU could pair with it (none can). Carrying w to r/gpu-0
    gives a 8 CPUs: p takes a/gpu-1, c/gpu-0 and a/gpu-0 are freed, r/gpu-0 taken, one GPU net for
    two moves; nothing else frees any."""
    nodes = [node(n, k, labels={"zone": n}) for n, k in (("a", 2), ("c", 1), ("r", 1), ("s", 1))]
    for n, cpu in zip(nodes, ("10", "4", "64", "4"), strict=True):
        n["status"]["allocatable"]["cpu"] = cpu
    pods = [
        _cpu(pod("w", "a", (0,), 100, owner=w_owner), "8"),
        _cpu(pod("a1", "a", (1,), 60, owner=None), "1"),
        _cpu(pod("p", "c", (0,), 40, spec=p_spec), "2"),
    ]
    if sibling:  # another movable pod of w's workload, on s
        pods.append(_cpu(pod("w2", "s", (0,), 10, owner=("ReplicaSet", "w-rs")), "2"))
    else:  # s/gpu-0 in use, so that it is no empty GPU for anyone
        pods.append(_cpu(pod("s0", "s", (0,), 90, owner=None), "1"))
    return build_state(nodes, pods)


def test_an_exclusive_pod_carries_its_cpu_to_a_roomy_node_and_a_gpu_frees() -> None:
    s = _case()
    p = plan(s, PlanOptions(solver="greedy"))
    assert p.gpus_freed == 1 and len(p.moves) == 2
    assert [(m.name, m.to_node, m.to_gpus) for m in p.moves] == [("w", "r", (0,)), ("p", "a", (1,))]
    assert p.moves[0].reason == "make room on a"
    assert (p.moves[0].frees, p.moves[0].takes) == (("a/gpu-0",), ("r/gpu-0",))
    assert p.moves[1].frees == ("c/gpu-0",)
    replay(s, p.moves)
    assert not check_moves(s, list(p.moves))


def test_carries_alone_and_keep_used() -> None:
    s = _case()
    engine = Engine(replacement_state(s), PlanOptions())
    made = carries(engine, PlanOptions())
    assert [(engine.p_alloc[r[0]].name, engine.label(engine.p_gids[r[0]][0])) for r in made] == [("w", "r/gpu-0")]
    # Nothing used a's room yet: the carry goes back.
    assert keep_used(engine, made) == 0 and engine.moves_made == 0


def test_a_carry_nothing_uses_is_taken_back() -> None:
    # p may only stay on c: a still counts as blocked (p is the pod small enough for its room), w
    # is carried, nothing uses a's CPU, w goes back: no moves.
    s = _case(p_spec={"affinity": _only_zone("c")})
    engine = Engine(replacement_state(s), PlanOptions())
    assert len(carries(engine, PlanOptions())) == 1
    assert plan(s, PlanOptions(solver="greedy")).moves == ()


def _only_zone(zone: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def test_no_carry_within_one_move_per_gpu_or_for_a_fixed_pod() -> None:
    s = _case()
    assert plan(s, PlanOptions(max_moves_per_gpu=1, solver="greedy")).moves == ()
    assert plan(_case(w_owner=None), PlanOptions(solver="greedy")).moves == ()


def test_under_max_moves_the_carry_comes_with_the_prefix_rule() -> None:
    # The greedy makes no carry under a move budget (half a carry is a pure cost), but a budget
    # of N never does worse than the first N moves of the unlimited plan (issue 36): with 10, the
    # unlimited plan's two moves; with 1, its first move alone (the carry: one GPU freed, one
    # taken) is no better than nothing.
    s = _case()
    unlimited = plan(s, PlanOptions(solver="greedy"))
    limited = plan(s, PlanOptions(max_moves=10, solver="greedy"))
    assert limited.moves == unlimited.moves and limited.gpus_freed == 1
    assert "the first 2 moves of the plan without --max-moves do better" in limited.solver_note
    assert plan(s, PlanOptions(max_moves=1, solver="greedy")).moves == ()


def test_no_carry_that_would_spend_a_siblings_disruption_budget() -> None:
    engine = Engine(replacement_state(_case(sibling=True)), PlanOptions())
    assert carries(engine, PlanOptions()) == []
    # With a budget of two moves per workload, w may go.
    options = PlanOptions(max_moves_per_workload=2)
    engine = Engine(replacement_state(_case(sibling=True)), options)
    assert len(carries(engine, options)) == 1


def test_on_the_subset_the_exact_planner_was_needed_for_the_greedy_planner_frees_the_optimum() -> None:
    """Subset 14 of the openb example (test_planner_exact.py): the greedy planner used to free 3,
    the MILP's optimum is 4. With exclusive pods carried off the CPU-full nodes 0823 and 0886 it
    frees 4, in 9 moves, every step valid. (The one off 0886 is kept because a pod moved onto 0886
    while it was away, before another pod left it: in another order it was not needed.)"""
    from tests.planner_fixtures import subset

    state = subset()
    p = plan(state, PlanOptions(solver="greedy"))
    assert p.gpus_freed == 4 and len(p.moves) == 9
    carried = [m for m in p.moves if m.reason.startswith("make room on")]
    assert [(m.from_node, len(m.frees), len(m.takes)) for m in carried] == [
        ("openb-node-0823", 1, 1),
        ("openb-node-0886", 1, 1),
    ]
    replay(state, p.moves)
