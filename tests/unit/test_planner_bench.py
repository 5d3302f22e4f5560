"""The planner benchmark's baselines that must not change what it measures
(testbed/reference/planner_baselines.py, run by bench/planner_bench.py)."""

from __future__ import annotations

import random
from pathlib import Path

from hami_place_core.planning import PlanOptions
from hami_place_core.state import build_state
from testbed.data import openb as ob
from testbed.reference import planner_baselines as pb
from tests.openb_fixtures import synthetic


def test_first_at_least_is_a_first_fit_walk() -> None:
    rng = random.Random(3)  # noqa: S311 (test data)
    keys = [rng.randrange(-1, 20) for _ in range(37)]
    seek = pb.FirstAtLeast(keys)
    for _ in range(300):
        if rng.random() < 0.3:
            i = rng.randrange(len(keys))
            keys[i] = rng.randrange(-1, 20)
            seek.set(i, keys[i])
        lo, need = rng.randrange(len(keys) + 1), rng.randrange(0, 21)
        want = next((i for i in range(lo, len(keys)) if keys[i] >= need), None)
        assert seek.first(lo, need) == want


def rescanning_order(v: pb.View, pending: list[str], final: dict[str, str]) -> bool:
    """The order as first written: each round, walk the whole list for the first move that fits."""
    pending = list(pending)
    while pending:
        for i, k in enumerate(pending):
            if v.fits(k, final[k]):
                v.move(k, final[k], "FFD repack")
                del pending[i]
                break
        else:
            return False
    return True


def test_greedy_order_is_the_rescanning_order(tmp_path: Path) -> None:
    nodes_csv, pods_csv = synthetic(tmp_path, n_pods=240)
    nodes, pods, _ = ob.replay(nodes_csv, pods_csv, 0.6)
    state = build_state(nodes, pods)
    rng = random.Random(5)  # noqa: S311 (test data)
    made: list[int] = []
    outcomes: set[bool] = set()
    for _ in range(30):  # random targets
        a, b = pb.View.of(state, PlanOptions()), pb.View.of(state, PlanOptions())
        gpus = sorted(a.usage)
        share = rng.choice((0.05, 0.2, 1.0))  # few pods moving may all get there; many deadlock
        final = {k: rng.choice(gpus) if rng.random() < share else a.at[k][0] for k in a.movable}
        pending = [k for k in sorted(a.movable) if final[k] != a.at[k][0]]
        done = pb.greedy_order(a, pending, final)
        assert done == rescanning_order(b, pending, final)
        outcomes.add(done)
        assert a.moves == b.moves
        made.append(len(a.moves))
    assert sum(made) > 20 and outcomes == {True, False}, (made, outcomes)  # not trivial
