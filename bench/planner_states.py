"""The planner benchmark's states: every openb pod list replayed to its cuts with departure seeds,
cached as gzip JSON of the Node and Pod objects (``--cache-dir``), and read back from that cache so a
run from the cache measures exactly what the run that filled it did. Shared with the exact,
make-room and node-room-gap benchmarks."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_place_core.state import ClusterState, build_state
from testbed.data import openb as replay

CACHE_DIR = Path("/tmp/hami-place-bench")  # noqa: S108 (scratch copies of public replays)


# ---- --all-lists: every list, cut and departure seed in one table ---------------------------------------
def all_lists() -> list[str]:
    """Every pod list in the data directory, by short name (gpushare40, ...)."""
    return sorted(
        p.name.removeprefix("openb_pod_list_").removesuffix(".csv")
        for p in replay.DATA_DIR.glob("openb_pod_list_*.csv")
    )


def list_csv(pod_list: str) -> Path:
    return replay.DATA_DIR / f"openb_pod_list_{pod_list}.csv"


def type_constrained(pod_list: str) -> bool:
    """The lists where a share of the tasks name their GPU models (gpu_spec)."""
    return pod_list.startswith("gpuspec")


def cache_path(cache_dir: Path, pod_list: str, seed: int, cut: float) -> Path:
    # The departure share is part of the state, so part of the name: a new default replays afresh.
    share = f"-share{replay.DEPARTURE_SHARE:g}" if seed else ""
    return cache_dir / f"{pod_list}-seed{seed}{share}-cut{cut:g}.json.gz"


def save_state(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", compresslevel=1) as f:  # level 1: these are scratch files
        json.dump(doc, f, separators=(",", ":"))
    tmp.replace(path)  # a run killed mid-write leaves no half file under the real name


def load_state(path: Path) -> tuple[ClusterState, dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return build_state(doc["nodes"], doc["pods"]), doc["summary"]


def departure_seeds(pod_list: str, seeds: Sequence[int]) -> list[int]:
    """The seeds worth replaying: a list without times (multigpu30, multigpu50) has no departures
    to draw from, so every seed gives the state of seed 0 and it is replayed once, as seed 0."""
    timed_list = any(p.deletion is not None for p in replay.load_pods(list_csv(pod_list)))
    return list(seeds) if timed_list else [0]


def replayer(pod_list: str, seed: int) -> tuple[replay.Replayer, list[replay.TracePod]]:
    nodes = replay.load_nodes(replay.DATA_DIR / replay.NODE_LIST)
    pods = replay.load_pods(list_csv(pod_list))
    if seed == 0:
        return replay.Replayer(nodes, pods, departures=False), pods
    return replay.Replayer(nodes, pods, departure_seed=seed), pods


def replayed_states(
    pod_list: str, seed: int, cuts: Sequence[float], cache_dir: Path
) -> Iterator[tuple[float, ClusterState, dict[str, Any]]]:
    """(cut, state, replay summary) in cut order, from the cache, or from one replay advanced
    through the cuts (a replay to cut 0.99 costs about a minute). Every state is built from the
    cached JSON, so a run from the cache measures exactly what the run that filled it did."""
    paths = {c: cache_path(cache_dir, pod_list, seed, c) for c in sorted(cuts)}
    r: replay.Replayer | None = None
    trace: list[replay.TracePod] = []
    for cut, path in paths.items():
        if not path.exists():
            if r is None:  # a missing cut needs the replay from the start
                print(f"{pod_list} seed {seed}: replaying", file=sys.stderr, flush=True)
                r, trace = replayer(pod_list, seed)
            r.advance(replay.resolve_cut(trace, cut))
            pods = r.pod_objects(include_pending=False)
            save_state(path, {"nodes": r.node_objects, "pods": pods, "summary": r.summary()})
        elif r is not None:
            r.advance(replay.resolve_cut(trace, cut))  # keep the replay in step for later cuts
        state, summary = load_state(path)
        yield cut, state, summary
