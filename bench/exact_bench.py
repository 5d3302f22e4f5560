"""Benchmark the exact planner's work limit on random subsets of replayed openb states.

    PYTHONPATH=. .venv/bin/python -m bench.exact_bench                     # default lists, auto and exact
    PYTHONPATH=. .venv/bin/python -m bench.exact_bench --lists gpuspec25 --subsets 20 --solvers auto
    PYTHONPATH=. .venv/bin/python -m bench.exact_bench --cache-only        # only replay and cache the states

States: each openb pod list (``$OPENB_DIR``, default /work/shared/data/openb) replayed with no
departures to cut 0.99 (docs/openb.md), as bench/planner_bench.py does. A replay takes about a
minute of CPU per list, so the node and pod objects are cached as gzip JSON under ``--cache``
(default bench/planner_bench.py's cache, /tmp/hami-place-bench, which it shares) and reused.

Subsets are drawn as bench/planner_bench.py's ``bench_subsets`` draws them: ``random.Random(seed)``
samples ``--nodes`` node names from the sorted names, ``--subsets`` times per list (then
``--big-subsets`` of ``--big-nodes`` nodes, from the same generator). For each subset and solver:
the greedy plan's gain, the plan's gain and solver, its note, the LP iterations the exact stage
used (``ExactOutcome.work``: HiGHS's limit checks, the unit of the budget, and the nodes and LP
iterations, per solve with its CPU seconds), the CPU seconds of ``plan()`` (``time.process_time``, so other
engineers' load on the machine counts less than in wall time), that CPU time over a fixed
reference loop's (``reference_ms`` of bench/planner_bench.py, taken next to each run: the
machine's speed varies), and whether a second run gave the identical plan.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.planner_bench import reference_ms
from bench.planner_states import CACHE_DIR, replayed_states
from hami_place_core.planning import PlanOptions, plan
from hami_place_core.planning import exact as exact_planner
from hami_place_core.planning.bounds import restrict
from hami_place_core.planning.highs import WorkLimit
from hami_place_core.state import ClusterState

LISTS = ("gpushare40", "gpuspec25", "multigpu50")
CUT = 0.99


def cached_state(pod_list: str, cut: float, cache: Path) -> ClusterState:
    """The replayed state of `pod_list` at `cut` (no departures), through planner_bench's cache."""
    return next(replayed_states(pod_list, 0, [cut], cache))[1]


def run_plan(state: ClusterState, solver: str) -> tuple[Any, Any, float, list[float]]:
    """The plan, the exact stage's outcome (None if it did not run), the CPU seconds of plan() and
    of each HiGHS solve in it (reported next to the work each solve counted: the calibration)."""
    outcomes: list[Any] = []
    solve_cpu: list[float] = []
    solve, run = exact_planner.solve, WorkLimit.run

    def spy(*args: Any, **kwargs: Any) -> Any:
        outcomes.append(solve(*args, **kwargs))
        return outcomes[-1]

    def timed_run(self: WorkLimit, h: Any, cap: int | None = None) -> None:
        t = time.process_time()
        run(self, h, cap)
        solve_cpu.append(round(time.process_time() - t, 3))

    exact_planner.solve = spy
    WorkLimit.run = timed_run  # type: ignore[method-assign]
    try:
        t = time.process_time()
        p = plan(state, PlanOptions(solver=solver))  # type: ignore[arg-type]
        cpu = time.process_time() - t
    finally:
        exact_planner.solve = solve
        WorkLimit.run = run  # type: ignore[method-assign]
    return p, outcomes[-1] if outcomes else None, cpu, solve_cpu


def bench_subset(label: str, sub: ClusterState, solvers: Sequence[str]) -> list[dict[str, Any]]:
    greedy = plan(sub, PlanOptions(solver="greedy"))
    rows = []
    for solver in solvers:
        ref = reference_ms()
        p, outcome, cpu, solve_cpu = run_plan(sub, solver)
        again, _, cpu2, _ = run_plan(sub, solver)
        work = outcome.work if outcome is not None else None
        rows.append(
            {
                "subset": label,
                "solver": solver,
                "gpus": sum(len(n.devices) for n in sub.nodes.values()),
                "greedy": greedy.gpus_freed,
                "freed": p.gpus_freed,
                "moves": len(p.moves),
                "used": p.solver,
                "note": p.solver_note,
                "checks": work.checks if work else None,
                "limitHit": bool(work and work.hit),
                "lpIterations": work.lp_iterations if work else None,
                # per solve: limit checks, branch-and-bound nodes, LP iterations, CPU seconds
                "solves": [[*r, c] for r, c in zip(work.runs, solve_cpu, strict=True)] if work else [],
                "cpu": round(cpu, 2),
                "cpu2": round(cpu2, 2),
                "referenceMs": ref,
                "cpuOverRef": round(1000 * max(cpu, cpu2) / ref, 1),
                "same": again.moves == p.moves and again.solver_note == p.solver_note,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| solver | subsets | nodes | greedy | planner | exact used | work limit hit | CPU s max | CPU/ref max "
        "| identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["solver"], r["nodes"]) for r in rows})
    for solver, nodes in keys:
        rs = [r for r in rows if r["solver"] == solver and r["nodes"] == nodes]
        lines.append(
            f"| {solver} | {len(rs)} | {nodes} | {sum(r['greedy'] for r in rs)} | {sum(r['freed'] for r in rs)} "
            f"| {sum(r['used'] == 'exact' for r in rs)} | {sum(r['limitHit'] for r in rs)} "
            f"| {max(max(r['cpu'], r['cpu2']) for r in rs)} | {max(r['cpuOverRef'] for r in rs)} "
            f"| {sum(r['same'] for r in rs)}/{len(rs)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--lists", default=",".join(LISTS), help="comma-separated openb pod lists")
    ap.add_argument("--cut", type=float, default=CUT)
    ap.add_argument("--subsets", type=int, default=8, help="subsets of --nodes nodes per list")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--big-subsets", type=int, default=2, help="subsets of --big-nodes nodes per list")
    ap.add_argument("--big-nodes", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="comma-separated draw numbers to run (the others are drawn, not run)")
    ap.add_argument("--solvers", default="auto,exact", help="comma-separated: auto, exact")
    ap.add_argument("--auto-work", type=int, help="override AUTO_WORK (solver steps), for calibration")
    ap.add_argument("--exact-work", type=int, help="override EXACT_WORK (solver steps), for calibration")
    ap.add_argument("--cache", type=Path, default=CACHE_DIR, help="replayed states, shared with planner_bench")
    ap.add_argument("--cache-only", action="store_true", help="replay and cache the states, nothing else")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    solvers = args.solvers.split(",")
    if args.auto_work is not None:
        exact_planner.AUTO_WORK = args.auto_work
    if args.exact_work is not None:
        exact_planner.EXACT_WORK = args.exact_work
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "autoWork": exact_planner.AUTO_WORK,
        "exactWork": exact_planner.EXACT_WORK,
    }
    print(json.dumps(machine), flush=True)
    rows: list[dict[str, Any]] = []
    for pod_list in args.lists.split(","):
        state = cached_state(pod_list, args.cut, args.cache)
        if args.cache_only:
            continue
        names = sorted(state.nodes)
        rng = random.Random(args.seed)
        draws = [(args.nodes, i) for i in range(args.subsets)]
        draws += [(args.big_nodes, i) for i in range(args.big_subsets)]
        only = {int(i) for i in args.only.split(",")} if args.only else None
        for k, (nodes, i) in enumerate(draws):
            sub = restrict(state, rng.sample(names, nodes))
            if only is not None and k not in only:
                continue
            for row in bench_subset(f"{pod_list}/{nodes}/{i}", sub, solvers):
                rows.append({**row, "nodes": nodes})
    machine["loadAfter"] = os.getloadavg()
    print(json.dumps(machine))
    if rows:
        print(summary(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
