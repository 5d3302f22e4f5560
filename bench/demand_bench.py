"""Benchmark: planning for the demand (issue 36) on replayed openb states.

    .venv/bin/python -m bench.demand_bench --json /tmp/demand.json            # every list, cut, seed
    .venv/bin/python -m bench.demand_bench --lists gpushare40 --cuts 0.99 --seeds 1   # one state

For every openb pod list at cuts 0.95, 0.99 and 1.0 with departure seeds 1 and 2 (lists without
departure times once, as seed 0; the states are the planner benchmark's, cached alike), and three
demand mixes (all 1-GPU pods; the running mix; 8-GPU and 4-GPU pods plus 1-GPU ones), the demand
objective's plan against today's (free-gpus) and the valid FFD prefix:

- the room for every shape of the demand and the completely free nodes, before and after (the
  acceptance: never lower after the demand plan);
- whole GPUs freed; with the all-1-GPU demand, as a share of today's (the target: at least 95%);
- the FFD prefix's gain, and the demand plan's whole GPUs against it (the target: at least it);
- the prefix rule for N in 5, 10, 50, 100, 250: the plan with ``max_moves=N`` against the first N
  moves of the plan without the limit, by the objective's own measure (free-gpus: whole GPUs;
  demand: its room, shapes largest first) -- never worse;
- the planner's CPU seconds.

A flag names each acceptance that fails on a state. The figures go in docs/planner.md ("Planning
for the demand").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.planner_bench import machine
from bench.planner_states import CACHE_DIR, all_lists, departure_seeds, replayed_states
from hami_place_core import capacity
from hami_place_core.planning import Plan, PlanOptions, apply_moves, plan
from hami_place_core.planning.prefix import Measure, demand_measure, free_gpus_measure, prefix_totals
from hami_place_core.state import ClusterState
from testbed.reference.planner_baselines import ffd_repack

MIXES = {"all-1-GPU": "1x100", "running": "", "8+4+1-GPU": "8x4,4x8,1x50"}
PREFIX_N = (5, 10, 50, 100, 250)


def demand_of(mix: str, state: ClusterState) -> capacity.Demand:
    if mix:
        return capacity.parse_demand(mix, source="--demand")
    return capacity.running_demand(state) or capacity.NOTHING


def timed_plan(state: ClusterState, options: PlanOptions) -> tuple[Plan, float]:
    started = time.process_time()
    p = plan(state, options)
    return p, time.process_time() - started


def whole_freed(state: ClusterState, moves: Sequence[Any]) -> int:
    totals = prefix_totals(state, moves, free_gpus_measure())
    return int(totals[-1][0] - totals[0][0])


def prefix_rule(state: ClusterState, options: PlanOptions, unlimited: Plan, measure: Measure) -> list[str]:
    """The N for which the limited plan does worse than the first N moves of `unlimited`."""
    broken = []
    for n in PREFIX_N:
        if n >= len(unlimited.moves):
            break
        limited = plan(state, dataclasses.replace(options, max_moves=n))
        ours = prefix_totals(state, limited.moves, measure)
        theirs = prefix_totals(state, unlimited.moves[:n], measure)
        if measure.admits(theirs[-1], theirs[0]) and measure.key(ours[-1], ours[0]) < measure.key(
            theirs[-1], theirs[0]
        ):
            broken.append(f"N={n}")
    return broken


def state_row(name: str, state: ClusterState, args: argparse.Namespace) -> dict[str, Any]:
    today, today_cpu = timed_plan(state, PlanOptions(objective="free-gpus", solver="greedy"))
    today_freed = whole_freed(state, today.moves)
    ffd_moves, _ = ffd_repack(state, PlanOptions())
    ffd = whole_freed(state, ffd_moves)
    row: dict[str, Any] = {"state": name, "today": {"freed": today_freed, "moves": len(today.moves)}, "ffd": ffd}
    flags = []
    if args.prefix:
        broken = prefix_rule(state, PlanOptions(solver="greedy"), today, free_gpus_measure())
        flags += [f"free-gpus prefix rule {b}" for b in broken]
    for mix_name, mix in MIXES.items():
        demand = demand_of(mix, state)
        opts = PlanOptions(objective="demand", solver="greedy", demand=demand)
        p, cpu = timed_plan(state, opts)
        assert p.room_before is not None and p.room_after is not None
        today_room = capacity.room(apply_moves(state, today.moves), demand, group_of=None)
        freed = whole_freed(state, p.moves)
        entry = {
            "moves": len(p.moves),
            "freed": freed,
            "cpu": round(cpu, 2),
            "shapes": [i.label for i in demand.items],
            "freeNodes": [p.room_before.free_nodes, p.room_after.free_nodes, today_room.free_nodes],
            "room": [list(x) for x in zip(p.room_before.pods, p.room_after.pods, today_room.pods, strict=True)],
        }
        if p.room_after.free_nodes < p.room_before.free_nodes or any(
            a < b for a, b in zip(p.room_after.pods, p.room_before.pods, strict=True)
        ):
            flags.append(f"{mix_name}: room lower after")
        if mix_name == "all-1-GPU" and today_freed and freed < 0.95 * today_freed:
            flags.append(f"{mix_name}: {freed / today_freed:.0%} of today's GPUs")
        if freed < ffd:
            flags.append(f"{mix_name}: below the FFD prefix ({freed} < {ffd})")
        if args.prefix and mix_name == "running":
            broken = prefix_rule(state, opts, p, demand_measure(demand))
            flags += [f"demand prefix rule {b}" for b in broken]
        row[mix_name] = entry
    row["todayCpu"] = round(today_cpu, 2)
    row["flags"] = flags
    return row


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        "| state | today: freed / moves | FFD | 1-GPU: freed (of today) | running: free nodes before → after "
        "(today) | running: room per shape before → after (today) | 8+4+1: room before → after | flags |"
    )
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        one, run, big = r["all-1-GPU"], r["running"], r["8+4+1-GPU"]
        share = f"{one['freed'] / r['today']['freed']:.0%}" if r["today"]["freed"] else "-"
        fn = run["freeNodes"]
        rooms = ", ".join(f"{s}: {b}→{a} ({t})" for s, (b, a, t) in zip(run["shapes"], run["room"], strict=True))
        big_rooms = ", ".join(f"{s}: {b}→{a}" for s, (b, a, _) in zip(big["shapes"], big["room"], strict=True))
        lines.append(
            f"| {r['state']} | {r['today']['freed']} / {r['today']['moves']} | {r['ffd']} | {one['freed']} ({share}) "
            f"| {fn[0]} → {fn[1]} ({fn[2]}) | {rooms} | {big_rooms} | {'; '.join(r['flags']) or 'ok'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lists", default="", help="comma-separated pod lists (default: every one)")
    ap.add_argument("--cuts", default="0.95,0.99,1.0")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    ap.add_argument("--no-prefix", dest="prefix", action="store_false", help="skip the prefix-rule checks")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    lists = [x for x in args.lists.split(",") if x] or all_lists()
    cuts = [float(c) for c in args.cuts.split(",")]
    rows = []
    for pod_list in lists:
        for seed in departure_seeds(pod_list, [int(s) for s in args.seeds.split(",")]):
            for cut, state, _ in replayed_states(pod_list, seed, cuts, args.cache_dir):
                name = f"{pod_list} s{seed} c{cut}"
                rows.append(state_row(name, state, args))
                print(f"{name}: {rows[-1]['flags'] or 'ok'}", file=sys.stderr, flush=True)
    report = {"machine": machine(), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print(table(rows))
    failing = sum(1 for r in rows if r["flags"])
    print(f"\n{len(rows)} states, {failing} with a flag")
    return 0


if __name__ == "__main__":
    sys.exit(main())
