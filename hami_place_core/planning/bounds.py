"""Upper bounds on what any defragmentation plan can free, blind to node CPU and memory.

All in whole GPUs *freed*: GPUs that can take a whole-GPU request after the plan and could not
before. Only GPUs where a freed GPU counts (healthy, not cordoned, on a Ready, schedulable node)
are bins; an exclusive pod (all cores) keeps its GPUs to itself wherever it goes, so moving one
never frees anything and its GPUs are simply subtracted. What remains is bin packing of the
sharing pods: each GPU is a bin with ``devcore`` compute and ``count`` share slots.

- :func:`l2_bound`: Martello and Toth's L2 lower bound on the number of bins (1990, "Lower bounds
  and reduction procedures for the bin packing problem"), on the pods' compute requests, per GPU
  type for pods that may use only one type and over all pods together; also the slot count bound.
  Relaxes memory, node constraints and the order of moves, so the gain it gives is an upper bound.
- :func:`pattern_bound`: the exact minimum number of bins for the same relaxation (compute and
  slots), as an integer cutting-stock model over bin patterns solved by HiGHS. Needs every bin
  alike (one ``devcore`` and ``count``). On the openb clusters (all requests are percentages, no
  node selectors) it is the optimum of GPUs freed if node CPU and memory were unlimited: tighter
  than L2, still an upper bound, since it ignores that a node must have room for the pods it takes.
- :func:`fewest_bins`: the cutting-stock optimum (or its dual bound under a work limit, and never
  less than L2) for a given multiset of sizes: the type-aware node-room bound's per-type cuts.
- :func:`move_frontier`: a lower bound on the moves any plan needs to free F GPUs (the LP
  relaxation of an aggregated model: GPUs with the same pod sizes are one configuration; each
  ends as a bin pattern and pays one move per pod it loses). Same relaxation as pattern_bound.

The bounds that count node CPU, memory and pod slots, and the exact optimum of small states, are
in :mod:`hami_place_core.planning.milp_bounds`.

HiGHS (``highspy``) is imported only by the MILP/LP functions: a development dependency here, and
the optional ``exact`` extra for the exact planner (:mod:`hami_place_core.planning.exact`), which
shares the helpers of :mod:`hami_place_core.planning.highs` and uses :func:`pattern_bound` as a cut.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_place_core.annotations import GpuDevice
from hami_place_core.planning.constraints import (
    immovable_reason,
    node_schedulable,
)
from hami_place_core.planning.highs import WorkLimit, new_highs
from hami_place_core.planning.model import PlanOptions
from hami_place_core.state import ClusterState


@dataclass(frozen=True)
class Pool:
    """The bin-packing view of a state: bins, exclusive GPUs, and the sharing pods' sizes."""

    bins: int  # GPUs where an empty GPU counts as free
    whole_free: int  # of them, empty now
    exclusive: int  # of them, held by exclusive pods
    pinned: int  # of them, holding a sharing pod that may not move
    capacity: int  # the largest devcore among the bins
    slots: int  # the largest share count among the bins
    uniform: bool  # every bin has the same devcore and count
    sizes: tuple[int, ...]  # compute of every sharing pod on a bin
    single_type: Mapping[str, tuple[int, ...]]  # GPU type -> sizes of pods allowed on that type only
    bins_of_type: Mapping[str, int]


def pool(state: ClusterState, options: PlanOptions | None = None) -> Pool:
    options = options or PlanOptions()
    bins = counted_gpus(state)
    counted = {u: (d.type, d.devcore, d.count) for u, (_, d) in bins.items()}  # uuid -> (type, devcore, count)
    whole_free = sum(1 for u, (name, _) in bins.items() if state.nodes[name].usage[u].used == 0)
    types = sorted({t for t, _, _ in counted.values()})
    exclusive: set[str] = set()
    pinned: set[str] = set()
    sizes: list[int] = []
    single: dict[str, list[int]] = {}
    for alloc in state.pods.values():
        on = [u for u in alloc.per_gpu if u in counted]
        if not on:
            continue
        cores = max((r.coresreq for r in alloc.request.gpu_containers), default=0)
        if any(counted[u][1] <= cores for u in on):
            exclusive.update(on)
            continue
        if immovable_reason(alloc, options.excluded_namespaces, state.problems) is not None:
            pinned.update(on)
        for _ in on:
            sizes.append(cores)
        allowed = [t for t in types if alloc.request.selectors.type_allowed(t)]
        if len(allowed) == 1:
            single.setdefault(allowed[0], []).extend(cores for _ in on)
    shapes = {(c, n) for _, c, n in counted.values()}
    return Pool(
        bins=len(counted),
        whole_free=whole_free,
        exclusive=len(exclusive),
        pinned=len(pinned - exclusive),
        capacity=max((c for c, _ in shapes), default=100),
        slots=max((n for _, n in shapes), default=10),
        uniform=len(shapes) <= 1,
        sizes=tuple(sorted(sizes, reverse=True)),
        single_type={t: tuple(v) for t, v in sorted(single.items())},
        bins_of_type=dict(sorted(Counter(t for t, _, _ in counted.values()).items())),
    )


def l2(sizes: Sequence[int], capacity: int) -> int:
    """Martello–Toth L2: a lower bound on the bins of `capacity` that items of `sizes` need."""
    items = sorted((s for s in sizes if s > 0), reverse=True)
    if not items:
        return 0
    best = math.ceil(sum(items) / capacity)
    # For each threshold a <= C/2: J1 = items > C - a (nothing else fits with them), J2 = items in
    # (C/2, C - a], J3 = items in [a, C/2]. J1 and J2 need a bin each; J3 items fit only in the
    # room J2 leaves or in new bins.
    for a in sorted({0, *(s for s in items if s <= capacity / 2)}):
        j1 = j2 = 0
        room2 = 0
        size3 = 0
        for s in items:
            if s > capacity - a:
                j1 += 1
            elif s > capacity / 2:
                j2 += 1
                room2 += capacity - s
            elif s >= a:
                size3 += s
        best = max(best, j1 + j2 + max(0, math.ceil((size3 - room2) / capacity)))
    return best


@dataclass(frozen=True)
class Bound:
    method: str
    bins_needed: int  # bins the sharing pods need at least (or exactly, when proven)
    max_free: int  # whole free GPUs possible at most
    gain: int  # max_free - whole free now
    proven: bool = True  # bins_needed is the model's optimum (else its dual bound: still a bound)
    seconds: float = 0.0  # wall seconds to compute it (set by node_room_bound)


def l2_bound(state: ClusterState, options: PlanOptions | None = None) -> Bound:
    """Upper bound on GPUs freed from L2, the slot count and the pinned GPUs (see module docs)."""
    p = pool(state, options)
    need = max(
        l2(p.sizes, p.capacity),
        sum(l2(s, p.capacity) for s in p.single_type.values()),
        math.ceil(len(p.sizes) / p.slots) if p.slots else 0,
        p.pinned,
    )
    max_free = p.bins - p.exclusive - need
    return Bound("L2", need, max_free, max_free - p.whole_free)


def _patterns(counts: Mapping[int, int], capacity: int, slots: int) -> list[tuple[int, ...]]:
    """Every bin pattern (how many items of each size, sizes in decreasing order), the empty one too."""
    return list(_each_pattern(counts, capacity, slots))


def _each_pattern(counts: Mapping[int, int], capacity: int, slots: int) -> Iterator[tuple[int, ...]]:
    sizes = sorted(counts, reverse=True)
    cur: list[int] = []

    def rec(i: int, room: int, left: int) -> Iterator[tuple[int, ...]]:
        if i == len(sizes):
            yield tuple(cur)
            return
        s = sizes[i]
        for k in range(min(room // s if s else left, left, counts[s]), -1, -1):
            cur.append(k)
            yield from rec(i + 1, room - k * s, left - k)
            cur.pop()

    return rec(0, capacity, slots)


def _cutting_stock_model(counts: Mapping[int, int], pats: Sequence[tuple[int, ...]]) -> Any:
    """HiGHS model of the fewest patterns (integer counts) covering `counts`."""
    import highspy
    import numpy as np

    sizes = sorted(counts, reverse=True)
    h = new_highs()
    n = len(pats)
    inf = h.getInfinity()
    h.addVars(n, np.zeros(n), np.full(n, inf))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.ones(n))
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
    for j, s in enumerate(sizes):
        idx = [i for i, x in enumerate(pats) if x[j]]
        h.addRow(counts[s], inf, len(idx), np.array(idx, dtype=np.int32), np.array([pats[i][j] for i in idx], float))
    return h


def pattern_bound(
    state: ClusterState,
    options: PlanOptions | None = None,
    time_limit: float = 60.0,
    work: WorkLimit | None = None,
    work_cap: int | None = None,
) -> Bound | None:
    """The exact fewest bins for the sharing pods (compute and slots only), by cutting stock.

    None when bins differ (several devcore/count values), where the pattern model does not apply.
    With `work`, the solve spends from that budget (at most `work_cap` of it) instead of having
    `time_limit`: the exact planner's cut, whose result must not depend on the machine's speed.
    """
    import highspy

    p = pool(state, options)
    if not p.uniform:
        return None
    counts = Counter(p.sizes)
    h = _cutting_stock_model(counts, [x for x in _patterns(counts, p.capacity, p.slots) if any(x)])
    if work is None:
        h.setOptionValue("time_limit", float(time_limit))
        h.run()
    else:
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        work.run(h, cap=work_cap)
    info = h.getInfo()
    optimal = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    value = info.objective_function_value if optimal else info.mip_dual_bound
    need = round(value) if math.isfinite(value) else 0  # stopped before any bound: the trivial one
    need = max(need, p.pinned)
    max_free = p.bins - p.exclusive - need
    return Bound("patterns", need, max_free, max_free - p.whole_free, proven=optimal)


# Cutting-stock models with more patterns than this are not built: fewest_bins falls back to L2.
MAX_PATTERNS = 50_000


def fewest_bins(sizes: Sequence[int], capacity: int, slots: int, exact: bool = True, max_nodes: int = 2_000) -> int:
    """A lower bound on the bins of `capacity` compute and `slots` share slots that items of `sizes`
    need: L2 and the slot count, and (`exact`, when the bins are alike) the cutting-stock optimum
    over the bin patterns as :func:`pattern_bound` builds it, or its dual bound where `max_nodes`
    branch-and-bound nodes do not settle it (a work limit, so the answer does not depend on the
    machine's speed). For bins of several shapes pass the largest `capacity` and `slots` and
    `exact=False`: L2 and the slot count stay valid there, the pattern model does not."""
    floor = max(l2(sizes, capacity), math.ceil(len(sizes) / slots) if slots else 0)
    if not exact or not sizes:
        return floor
    pats = _patterns_upto(Counter(sizes), capacity, slots, MAX_PATTERNS)
    if pats is None:
        return floor
    return max(floor, _cutting_stock(Counter(sizes), pats, max_nodes))


def _patterns_upto(counts: Mapping[int, int], capacity: int, slots: int, most: int) -> list[tuple[int, ...]] | None:
    """:func:`_patterns` without the empty one, or None if there are more than `most`."""
    out = list(itertools.islice((x for x in _each_pattern(counts, capacity, slots) if any(x)), most + 1))
    return out if len(out) <= most else None


def _cutting_stock(counts: Mapping[int, int], pats: Sequence[tuple[int, ...]], max_nodes: int) -> int:
    """The fewest patterns covering `counts` (sizes in decreasing order, as in `pats`), or the
    solver's dual bound when `max_nodes` does not settle it."""
    h = _cutting_stock_model(counts, pats)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 1 - 1e-3)  # an integer count: a gap under one is a proof
    h.setOptionValue("mip_max_nodes", int(max_nodes))
    h.run()
    dual = h.getInfo().mip_dual_bound
    return math.ceil(dual - 1e-6) if math.isfinite(dual) else 0


def move_frontier(state: ClusterState, gains: Iterable[int], options: PlanOptions | None = None) -> dict[int, float]:
    """For each gain F: a lower bound on the moves any plan needs to free F GPUs (inf if impossible).

    LP relaxation of: each GPU with sharing pods, by its multiset of sizes (its configuration),
    ends as some bin pattern or empty, paying one move per pod of its configuration the pattern
    lacks; every size is conserved. Same relaxation as :func:`pattern_bound`. Requires uniform bins.
    """
    import highspy
    import numpy as np

    options = options or PlanOptions()
    p = pool(state, options)
    if not p.uniform:
        raise ValueError("move_frontier needs GPUs of one devcore and count")
    configs: Counter[tuple[int, ...]] = Counter()
    counted = {u: d.devcore for u, (_, d) in counted_gpus(state).items()}
    on_gpu: dict[str, list[int]] = {}
    for alloc in state.pods.values():
        cores = max((r.coresreq for r in alloc.request.gpu_containers), default=0)
        for u in alloc.per_gpu:
            if u in counted and cores < counted[u]:
                on_gpu.setdefault(u, []).append(cores)
    for v in on_gpu.values():
        configs[tuple(sorted(v, reverse=True))] += 1
    counts = Counter(s for c, n in configs.items() for s in c for _ in range(n))
    sizes = sorted(counts, reverse=True)
    pats = np.array(_patterns(counts, p.capacity, p.slots), dtype=np.int64)  # includes the empty pattern
    empty = int(np.flatnonzero(pats.sum(axis=1) == 0)[0])
    conf = list(configs.items())
    cv = np.array([[c.count(s) for s in sizes] for c, _ in conf], dtype=np.int64)
    n_c, n_p = len(conf), len(pats)
    cost = np.maximum(cv[:, None, :] - pats[None, :, :], 0).sum(axis=2).reshape(-1).astype(float)
    h = new_highs()
    n = n_c * n_p
    inf = h.getInfinity()
    h.addVars(n, np.zeros(n), np.full(n, inf))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    for ci, (_, count) in enumerate(conf):
        h.addRow(count, count, n_p, np.arange(ci * n_p, (ci + 1) * n_p, dtype=np.int32), np.ones(n_p))
    for j in range(len(sizes)):
        coef = (pats[None, :, j] - cv[:, j][:, None]).reshape(-1).astype(float)
        nz = np.flatnonzero(coef).astype(np.int32)
        h.addRow(0, 0, len(nz), nz, coef[nz])
    row = h.getNumRow()
    idx = np.array([ci * n_p + empty for ci in range(n_c)], dtype=np.int32)
    h.addRow(0, inf, n_c, idx, np.ones(n_c))
    out: dict[int, float] = {}
    for f in gains:
        h.changeRowBounds(row, float(f), inf)
        h.run()
        ok = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        out[f] = float(h.getInfo().objective_function_value) if ok else math.inf
    return out


def most_gain_at_rate(state: ClusterState, rate: float, ceiling: int, options: PlanOptions | None = None) -> int:
    """The most GPUs (up to `ceiling`, e.g. the pattern bound) any plan can free with at most `rate`
    moves per freed GPU, by :func:`move_frontier`'s lower bound on moves (so, like it, for plans
    that move single-GPU pods). That bound is an LP's optimum as a function of the gain asked for:
    convex and 0 at 0, so moves per GPU never fall as the gain grows, and a binary search over the
    gain finds the largest that stays within `rate`."""
    lo, hi = 0, ceiling
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if move_frontier(state, [mid], options)[mid] <= rate * mid + 1e-6:
            lo = mid
        else:
            hi = mid - 1
    return lo


def counted_gpus(state: ClusterState) -> dict[str, tuple[str, GpuDevice]]:
    """GPU UUID -> (node, device) for every GPU where an empty GPU counts as free (healthy, not
    cordoned, on a Ready and schedulable node), by node name."""
    out = {}
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if node_schedulable(node):
            for d in node.devices:
                if d.health and d.uuid not in node.cordoned:
                    out[d.uuid] = (name, d)
    return out


def restrict(state: ClusterState, names: Iterable[str]) -> ClusterState:
    """The state of the named nodes only (their pods, their problems): a small instance."""
    keep = set(names)
    return ClusterState(
        nodes={n: s for n, s in state.nodes.items() if n in keep},
        pods={k: p for k, p in state.pods.items() if p.node in keep},
        problems={k: m for k, m in state.problems.items() if k in state.pods and state.pods[k].node in keep},
        by_node={n: set(k) for n, k in state.by_node.items() if n in keep},
        pod_requests={k: v for k, v in state.pod_requests.items() if v[0] in keep},
        requested={n: r for n, r in state.requested.items() if n in keep},
    )
