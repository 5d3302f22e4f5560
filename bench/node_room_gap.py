"""Where the FFD gap comes from: the planner and the FFD repack with and without node room.

Issue 22, item 4: where a node-aware first-fit-decreasing repack of every movable pod has a valid
order, it frees 15-30% more GPUs than the planner. This runs both on the evaluation's replayed
states twice: as they are, and with every node's allocatable CPU, memory and pod slots removed
(``allocatable=None``: kube-scheduler's NodeResourcesFit no longer binds, HAMi's Fit and every
other constraint still do). If the two free about as many GPUs without node room, the gap is the
planner's handling of node room, not its packing of GPU shares (docs/planner.md, Limitations).

States come from bench/planner_bench.py's cache (``--cache-dir``, default /tmp/hami-place-bench;
a missing state is replayed, about a minute of CPU each):

    .venv/bin/python -m bench.node_room_gap --lists gpushare40,gpuspec25 --cuts 0.95,0.99 --seeds 1,2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.planner_bench import freed_by
from bench.planner_states import CACHE_DIR, all_lists, departure_seeds, replayed_states
from hami_place_core.fragmentation import mix_from_state
from hami_place_core.planning import PlanOptions, plan
from hami_place_core.state import ClusterState
from testbed.reference.planner_baselines import ffd_repack


def without_node_room(state: ClusterState) -> ClusterState:
    """The same cluster with no node stating its allocatable: node room never binds."""
    nodes = {n: dataclasses.replace(s, allocatable=None) for n, s in state.nodes.items()}
    return dataclasses.replace(state, nodes=nodes)


def measure(state: ClusterState) -> dict[str, Any]:
    mix = mix_from_state(state)
    t = time.process_time()
    p = plan(state, PlanOptions(solver="greedy"))
    cpu = time.process_time() - t
    ffd, ordered = ffd_repack(state, PlanOptions())
    freed, valid = freed_by(state, mix, ffd)
    return {
        "planner": p.gpus_freed,
        "plannerMoves": len(p.moves),
        "plannerCpu": round(cpu, 2),
        "ffd": freed,
        "ffdMoves": len(ffd),
        "ffdOrdered": ordered and valid,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lists", default=",".join(all_lists()), help="comma-separated pod lists")
    ap.add_argument("--cuts", default="0.95,0.99,1.0", help="comma-separated cuts")
    ap.add_argument("--seeds", default="1,2", help="departure seeds (lists without times run once)")
    ap.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    cuts = [float(c) for c in args.cuts.split(",")]
    rows = []
    heads = (
        "list",
        "cut",
        "seed",
        "planner (moves)",
        "FFD (moves)",
        "planner, no node room (moves)",
        "FFD, no node room (moves)",
    )
    print("| " + " | ".join(heads) + " |")
    print("|---|---|---|---|---|---|---|")
    for pod_list in args.lists.split(","):
        for seed in departure_seeds(pod_list, [int(s) for s in args.seeds.split(",")]):
            for cut, state, _ in replayed_states(pod_list, seed, cuts, args.cache_dir):
                real, relaxed = measure(state), measure(without_node_room(state))
                rows.append({"list": pod_list, "cut": cut, "seed": seed, "real": real, "noNodeRoom": relaxed})

                def cell(r: dict[str, Any], who: str) -> str:
                    flag = "" if who == "planner" or r["ffdOrdered"] else ", no order"
                    return f"{r[who]} ({r[who + 'Moves']}{flag})"

                print(
                    f"| {pod_list} | {cut:g} | {seed} | {cell(real, 'planner')} | {cell(real, 'ffd')} "
                    f"| {cell(relaxed, 'planner')} | {cell(relaxed, 'ffd')} |",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
