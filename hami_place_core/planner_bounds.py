"""Upper bounds on what any defragmentation plan can free, and the MILP optima to judge a plan by.

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
  alike (one ``devcore`` and ``count``); on the openb clusters (all requests are percentages, no
  node constraints) it is the true optimum of GPUs freed, which L2 overestimates.
- :func:`milp_bound`: the exact optimum of a small state, pod by pod and GPU by GPU (HAMi's memory,
  compute, slots, GPU type and UUID selectors, node constraints): the most GPUs any assignment of
  the movable pods frees, then the fewest moves that frees that many. Exclusive pods stay put.
  Ignores only the order of moves (a relaxation: the planner's plans are ordered and valid).
- :func:`move_frontier`: a lower bound on the moves any plan needs to free F GPUs (the LP
  relaxation of an aggregated model: GPUs with the same pod sizes are one configuration; each
  ends as a bin pattern and pays one move per pod it loses). Same relaxation as pattern_bound.

HiGHS (``highspy``) is imported only by the MILP/LP functions; it is a development dependency.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_place_core.fit import gpu_fit_reason
from hami_place_core.planner import Move, PlanOptions, apply_moves
from hami_place_core.planner_constraints import immovable_reason, node_refusal, node_schedulable
from hami_place_core.state import ClusterState, PodAllocation


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
    counted: dict[str, tuple[str, int, int]] = {}  # uuid -> (type, devcore, count)
    whole_free = 0
    for node in state.nodes.values():
        if not node_schedulable(node):
            continue
        for d in node.devices:
            if d.health and d.uuid not in node.cordoned:
                counted[d.uuid] = (d.type, d.devcore, d.count)
                if node.usage[d.uuid].used == 0:
                    whole_free += 1
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
    proven: bool = True


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


def _highs() -> Any:
    import highspy

    h = highspy.Highs()
    h.silent()
    return h


def _patterns(counts: Mapping[int, int], capacity: int, slots: int) -> list[tuple[int, ...]]:
    sizes = sorted(counts, reverse=True)
    out: list[tuple[int, ...]] = []
    cur: list[int] = []

    def rec(i: int, room: int, left: int) -> None:
        if i == len(sizes):
            out.append(tuple(cur))
            return
        s = sizes[i]
        for k in range(min(room // s if s else left, left, counts[s]), -1, -1):
            cur.append(k)
            rec(i + 1, room - k * s, left - k)
            cur.pop()

    rec(0, capacity, slots)
    return out


def pattern_bound(state: ClusterState, options: PlanOptions | None = None, time_limit: float = 60.0) -> Bound | None:
    """The exact fewest bins for the sharing pods (compute and slots only), by cutting stock.

    None when bins differ (several devcore/count values), where the pattern model does not apply.
    """
    import numpy as np

    p = pool(state, options)
    if not p.uniform:
        return None
    counts = Counter(p.sizes)
    sizes = sorted(counts, reverse=True)
    pats = [x for x in _patterns(counts, p.capacity, p.slots) if any(x)]
    h = _highs()
    n = len(pats)
    inf = h.getInfinity()
    h.addVars(n, np.zeros(n), np.full(n, inf))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.ones(n))
    import highspy

    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger))
    for j, s in enumerate(sizes):
        idx = [i for i, x in enumerate(pats) if x[j]]
        h.addRow(counts[s], inf, len(idx), np.array(idx, dtype=np.int32), np.array([pats[i][j] for i in idx], float))
    h.setOptionValue("time_limit", float(time_limit))
    h.run()
    info = h.getInfo()
    optimal = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    need = round(info.objective_function_value if optimal else info.mip_dual_bound)
    need = max(need, p.pinned)
    max_free = p.bins - p.exclusive - need
    return Bound("patterns", need, max_free, max_free - p.whole_free, proven=optimal)


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
    counted = _counted_uuids(state)
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
    h = _highs()
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


def _counted_uuids(state: ClusterState) -> dict[str, int]:
    out = {}
    for node in state.nodes.values():
        if node_schedulable(node):
            for d in node.devices:
                if d.health and d.uuid not in node.cordoned:
                    out[d.uuid] = d.devcore
    return out


@dataclass(frozen=True)
class MilpResult:
    gain: int  # most GPUs freed (proven when optimal)
    moves: int | None  # fewest moves for that gain (None if not proven within the time limit)
    optimal: bool
    bound_gain: int  # the solver's bound on the gain (== gain when optimal)
    seconds: float


def milp_bound(
    state: ClusterState,
    options: PlanOptions | None = None,
    time_limit: float = 60.0,
    start: Sequence[Move] = (),
) -> MilpResult:
    """The most GPUs any reassignment of the movable sharing pods frees, and the fewest moves for it.

    Variables x[p,g] (pod p ends on GPU g, for every GPU where p alone passes HAMi's Fit and node
    constraints, plus its own GPU) and y[g] (GPU g stays in use); per GPU, the compute, memory and
    slots of the pods ending there fit what the pods that stay put leave. Maximise the unused bins,
    then minimise the pods not on their own GPU. Multi-GPU and exclusive pods stay where they are.
    Meant for small states (tens of nodes). `start` (a plan's moves) seeds the solver with a
    feasible assignment; it changes how fast the optimum is found, never what it is.
    """
    import time

    import highspy
    import numpy as np

    started = time.perf_counter()
    options = options or PlanOptions()
    counted: dict[str, tuple[str, Any]] = {}
    for name in sorted(state.nodes):
        node = state.nodes[name]
        if node_schedulable(node):
            for d in node.devices:
                if d.health and d.uuid not in node.cordoned:
                    counted[d.uuid] = (name, d)
    uuids = list(counted)
    gi = {u: i for i, u in enumerate(uuids)}
    fixed = {u: [0, 0, 0] for u in uuids}  # slots, mem, cores of pods that stay
    movers = []
    for key in sorted(state.pods):
        alloc = state.pods[key]
        gpus = alloc.request.gpu_containers
        req = gpus[0] if len(gpus) == 1 else None
        stays = (
            req is None
            or req.nums != 1
            or req.coresreq >= 100
            or req.mem_percentage == 100
            or immovable_reason(alloc, options.excluded_namespaces, state.problems) is not None
            or any(u not in counted for u in alloc.per_gpu)
        )
        if stays:
            for u, (slots, mem, cores) in alloc.per_gpu.items():
                if u in fixed:
                    f = fixed[u]
                    f[0] += slots
                    f[1] += mem
                    f[2] += cores
        else:
            movers.append(alloc)
    free_now = sum(1 for u in uuids if state.nodes[counted[u][0]].usage[u].used == 0)
    h = _highs()
    inf = h.getInfinity()
    n_g = len(uuids)
    # y[g]: columns 0..n_g-1
    y_lo = np.array([1.0 if fixed[u][0] else 0.0 for u in uuids])
    h.addVars(n_g, y_lo, np.ones(n_g))
    h.changeColsIntegrality(n_g, np.arange(n_g, dtype=np.int32), np.full(n_g, highspy.HighsVarType.kInteger))
    h.changeColsCost(n_g, np.arange(n_g, dtype=np.int32), np.ones(n_g))
    cols: list[tuple[int, int, int, int, bool]] = []  # (mover, gpu, mem, cores, is home)
    from hami_place_core.fit import GpuUsage

    for m, alloc in enumerate(movers):
        req = alloc.request.gpu_containers[0]
        home = next(iter(alloc.per_gpu))
        for u in uuids:
            name, d = counted[u]
            if u != home:
                if node_refusal(alloc, state.nodes[name]) is not None:
                    continue
                f = fixed[u]
                base = GpuUsage(f[0], f[1], f[2])
                if gpu_fit_reason(req, d, base, alloc.request.selectors, state.nodes[name].cordoned) is not None:
                    continue
            cols.append((m, gi[u], req.memory_on(d.devmem), req.coresreq, u == home))
    n_x = len(cols)
    h.addVars(n_x, np.zeros(n_x), np.ones(n_x))
    x0 = n_g
    h.changeColsIntegrality(n_x, np.arange(x0, x0 + n_x, dtype=np.int32), np.full(n_x, highspy.HighsVarType.kInteger))
    by_mover: dict[int, list[int]] = {}
    by_gpu: dict[int, list[int]] = {}
    for j, (m, g, _, _, _) in enumerate(cols):
        by_mover.setdefault(m, []).append(x0 + j)
        by_gpu.setdefault(g, []).append(j)
    for idx in by_mover.values():
        h.addRow(1, 1, len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))
    for g, js in by_gpu.items():
        _, d = counted[uuids[g]]
        f = fixed[uuids[g]]
        for k, cap in ((0, d.count - f[0]), (1, d.devmem - f[1]), (2, d.devcore - f[2])):
            coef = [1.0 if k == 0 else float(cols[j][2] if k == 1 else cols[j][3]) for j in js]
            idx = [x0 + j for j in js] + [g]
            h.addRow(-inf, 0, len(idx), np.array(idx, dtype=np.int32), np.array([*coef, -float(cap)]))
    for j, (_, g, _, _, _) in enumerate(cols):  # x[p,g] <= y[g]: tightens the LP relaxation
        h.addRow(-inf, 0, 2, np.array([x0 + j, g], dtype=np.int32), np.array([1.0, -1.0]))
    cut = pattern_bound(state, options, time_limit=min(30.0, time_limit))
    if cut is not None and cut.proven:
        # A valid cut: the bins can never be fewer than the pattern relaxation's optimum.
        h.addRow(float(n_g - cut.max_free), inf, n_g, np.arange(n_g, dtype=np.int32), np.ones(n_g))
    if start:
        _seed(h, state, start, movers, cols, uuids, x0)
    h.setOptionValue("time_limit", float(time_limit))
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    optimal = status == highspy.HighsModelStatus.kOptimal
    used = round(info.objective_function_value) if status in (highspy.HighsModelStatus.kOptimal,) else None
    bound_used = math.ceil(info.mip_dual_bound - 1e-6)
    gain = (n_g - used - free_now) if used is not None else 0
    bound_gain = n_g - bound_used - free_now
    moves = None
    if optimal and used is not None:
        # Second stage: fewest moves among the assignments that free as many GPUs.
        h.addRow(-inf, float(used), n_g, np.arange(n_g, dtype=np.int32), np.ones(n_g))
        h.changeColsCost(n_g, np.arange(n_g, dtype=np.int32), np.zeros(n_g))
        home_cost = np.array([0.0 if c[4] else 1.0 for c in cols])
        h.changeColsCost(n_x, np.arange(x0, x0 + n_x, dtype=np.int32), home_cost)
        left = max(1.0, time_limit - (time.perf_counter() - started))
        h.setOptionValue("time_limit", left)
        h.run()
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            moves = round(h.getInfo().objective_function_value)
    return MilpResult(gain, moves, optimal, bound_gain, time.perf_counter() - started)


def _seed(
    h: Any,
    state: ClusterState,
    start: Sequence[Move],
    movers: Sequence[PodAllocation],
    cols: Sequence[tuple[int, int, int, int, bool]],
    uuids: Sequence[str],
    x0: int,
) -> None:
    import numpy as np

    final = {a.key: next(iter(a.per_gpu)) for a in movers}
    for m in start:
        if m.pod in final and len(m.to_uuids) == 1:
            final[m.pod] = m.to_uuids[0]
    values = np.zeros(x0 + len(cols))
    for j, (mi, g, _, _, _) in enumerate(cols):
        if final[movers[mi].key] == uuids[g]:
            values[x0 + j] = 1.0
    after = apply_moves(state, start)
    for g, u in enumerate(uuids):
        node = next((n for n in after.nodes.values() if u in n.usage), None)
        values[g] = 1.0 if node is not None and node.usage[u].used > 0 else 0.0
    h.setSolution(len(values), np.arange(len(values), dtype=np.int32), values)


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
