"""Measure the node-room bounds (type-blind and type-aware) on replayed openb states.

For each pod list, the state at a cut is replayed as bench/planner_bench.py's ``main`` does (HAMi's
defaults, no departures) and cached as gzip JSON (the node and pod objects) under ``--cache``, since
a replay takes about a minute of CPU and the bounds take less. Then, per state: the type-blind bound
(``type_aware=False``), the type-aware one, whether each is proven, and the CPU seconds of each.

    .venv/bin/python -m bench.bound_bench --pods gpushare40,gpuspec10 --cut 0.99
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hami_place_core.planning.bounds import counted_gpus, l2_bound, pattern_bound
from hami_place_core.state import ClusterState, build_state

LISTS = ("gpushare40", "gpuspec10", "gpuspec20", "gpuspec25", "multigpu30", "multigpu50")


def cached_objects(pods: str, cut: float, cache: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The node and pod objects of list `pods` replayed to `cut`, from the cache or a fresh replay."""
    path = cache / f"{pods}-{cut}.json.gz"
    if path.exists():
        with gzip.open(path, "rt") as f:
            data = json.load(f)
        return data["nodes"], data["pods"]
    from testbed.data import openb as replay

    nodes = replay.load_nodes(replay.DATA_DIR / replay.NODE_LIST)
    trace = replay.load_pods(replay.pod_list_path(pods))
    r = replay.Replayer(nodes, trace, departures=False)
    r.advance(replay.resolve_cut(trace, cut))
    node_objects, pod_objects = r.node_objects, r.pod_objects(include_pending=False)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump({"nodes": node_objects, "pods": pod_objects}, f)
    tmp.rename(path)
    return node_objects, pod_objects


def cached_state(pods: str, cut: float, cache: Path) -> ClusterState:
    nodes, pod_objects = cached_objects(pods, cut, cache)
    return build_state(nodes, pod_objects)


def measure(state: ClusterState, type_aware: bool, work: dict[str, Any]) -> dict[str, Any]:
    from hami_place_core.planning.milp_bounds import node_room_bound

    started = time.process_time()
    b = node_room_bound(state, type_aware=type_aware, **work)
    return {
        "gain": b.gain,
        "binsNeeded": b.bins_needed,
        "proven": b.proven,
        "cpuSeconds": round(time.process_time() - started, 1),
        "seconds": round(b.seconds, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", default=",".join(LISTS))
    ap.add_argument("--cut", type=float, default=0.99)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/bound-states"))  # noqa: S108 - a cache, rebuilt when missing
    ap.add_argument("--cache-only", action="store_true", help="replay and cache the states, measure nothing")
    ap.add_argument("--blind", action="store_true", help="also measure the type-blind bound")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = []
    for name in args.pods.split(","):
        state = cached_state(name, args.cut, args.cache)
        print(f"{name}: {len(state.nodes)} nodes, {len(state.pods)} pods", file=sys.stderr, flush=True)
        if args.cache_only:
            continue
        row: dict[str, Any] = {"pods": name, "cut": args.cut, "gpus": len(counted_gpus(state))}
        row["l2Gain"] = l2_bound(state).gain
        pat = pattern_bound(state)
        row["patternGain"] = pat.gain if pat else None
        if args.blind:
            row["blind"] = measure(state, False, {})
        row["typed"] = measure(state, True, {})
        print(json.dumps(row), flush=True)
        out.append(row)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
