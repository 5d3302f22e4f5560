"""Why a search found no room: the binding constraint, the first check that explains it (no node
accepts the pod, too few usable GPUs, node CPU or memory, pods that may not move, the limits on
moves, or pods with nowhere to go), looked for again over the search's nodes, GPUs and pods."""

from __future__ import annotations

from collections import Counter

from hami_place_core.node_resources import format_cpu, format_memory
from hami_place_core.planning.constraints import immovable_reason
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.model import PlanOptions
from hami_place_core.planning.room.explain import describe_request, relaxations, stay_reason
from hami_place_core.planning.room.search import Search
from hami_place_core.state import ClusterState


def why_not(s: Search, base: ClusterState, options: PlanOptions) -> str:
    """The binding constraint when no plan was found (the first that explains it)."""
    n = s.req.nums
    if not s.usable:
        return _refused(s)
    where, gids = min(s.usable.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(gids) < n:
        return _too_few_gpus(s, where, len(gids))
    roomy = _room_reason(s)
    if roomy is not None:
        return roomy
    cands = s.candidates()
    if not cands:
        return _held(s)
    # Would more moves do it? Then the limits bind.
    for label, relaxed in relaxations(options, _budgets_bind(s, options)):
        again = Search(Engine(base, relaxed), s.request)
        found = again.run()
        if found is not None:
            return label(found, options)
    best = cands[0]
    tried = f"{s.tried} node{'s' if s.tried != 1 else ''} tried"
    stuck = s.stuck.get(best.node)
    if stuck:
        e = s.e
        names = ", ".join(
            f"{e.p_alloc[p].key} ({describe_request(e.p_req[p])}, {format_cpu(e.p_res[p].cpu)} CPU)" for p in stuck
        )
        return (
            f"no room can be made: on node {best.node} (the cheapest on paper, {best.bound} "
            f"move{'s' if best.bound != 1 else ''}) pod {names} fits no other GPU whose node has its "
            f"CPU and memory; likewise elsewhere ({tried})"
        )
    return (
        f"no room can be made: on node {best.node} (the cheapest on paper) the pods to move, or the "
        f"node's CPU and memory, find no other place ({tried})"
    )


def _budgets_bind(s: Search, options: PlanOptions) -> bool:
    """Some workload has more pods that could move than moves left in its budget (else a
    search without the budgets would find nothing more; on the openb states no workload has
    two pods, and that search cost as much as the first)."""
    e = s.e
    movable: Counter[str] = Counter()
    for p, a in enumerate(e.p_alloc):
        wl = e.p_workload[p]
        if wl is not None and immovable_reason(a, options.excluded_namespaces, e.state.problems) is None:
            movable[wl] += 1
    return any(n > options.limit_of(w) - options.workload_moves_used.get(w, 0) for w, n in movable.items())


def _refused(s: Search) -> str:
    reasons = s.refusals.most_common()
    if not reasons:
        return "the cluster has no GPU nodes"
    sel = s.request.node_selector
    if any(r.startswith("nodeSelector") for r, _ in reasons) and sel:
        text = ",".join(f"{k}={v}" for k, v in sorted(sel.items()))
        return f"no node matches the pod's node selector ({text}) among the schedulable GPU nodes"
    top = "; ".join(f"{r} ({c} node{'s' if c != 1 else ''})" for r, c in reasons[:3])
    return f"no node accepts the pod: {top}"


def _too_few_gpus(s: Search, node: str, most: int) -> str:
    n, sel = s.req.nums, s.request.selectors
    where = f"any eligible node (node {node})" if most else "any eligible node"
    gpus = f"{most} usable GPU{'s' if most != 1 else ''}"
    if sel.use_types or sel.nouse_types:
        types = ",".join(sel.use_types) or "not " + ",".join(sel.nouse_types)
        here = "" if most else f" (GPU types here: {_types_here(s)})"
        return f"GPU type {types} has only {gpus} on {where}; the pod asks for {n}{here}"
    if sel.use_uuids or sel.nouse_uuids:
        return f"the pod's GPU UUID selectors leave at most {gpus} on {where}; it asks for {n}"
    if s.req.memreq or s.req.coresreq:
        return (
            f"no eligible node has {n} GPUs that are healthy, uncordoned and large enough for "
            f"{s.req.describe()} (the most is {most}, on node {node})"
        )
    return f"no eligible node has {n} usable GPUs (the most is {most}, on node {node})"


def _types_here(s: Search, shown: int = 6) -> str:
    """The GPU types of the cluster, most GPUs first: what a type selector that matches none
    could have asked for (a `type=` matches part of one, in any case: HAMi's CheckType)."""
    count = Counter(d.type for node in s.e.state.nodes.values() for d in node.devices)
    listed = ", ".join(f"{t} ({n})" for t, n in count.most_common(shown))
    more = len(count) - shown
    return listed + (f" and {more} more" if more > 0 else "") if count else "none"


def _room_reason(s: Search) -> str | None:
    """Node CPU, memory or slots short on every node with enough usable GPUs, even with every
    movable GPU pod gone from it."""
    e, need, n = s.e, s.request.resources, s.req.nums
    best: dict[str, tuple[int, str]] = {}
    for name, gids in s.usable.items():
        if len(gids) < n:
            continue
        free = e.n_free.get(name)
        if free is None:
            return None
        for p in {p for g in e.node_gids[name] for p in e.g_pods[g] if e.can_move(p)}:
            free = free + e.p_res[p]
        if free.covers(need):
            return None
        for what, have in (("cpu", free.cpu), ("memory", free.memory), ("pods", free.pods)):
            if what not in best or have > best[what][0]:
                best[what] = (have, name)
    if need.cpu > best["cpu"][0]:
        have, name = best["cpu"]
        return (
            f"node CPU: the pod asks {format_cpu(need.cpu)} cores, the most free after moves is "
            f"{format_cpu(max(have, 0))} on node {name}"
        )
    if need.memory > best["memory"][0]:
        have, name = best["memory"]
        return (
            f"node memory: the pod asks {format_memory(need.memory)}, the most free after moves is "
            f"{format_memory(max(have, 0))} on node {name}"
        )
    have, name = best["pods"]
    return f"node pod slots: no eligible node has a free pod slot even after moves (the most is {have}, on {name})"


def _held(s: Search) -> str:
    """No node has enough GPUs whose pods may move."""
    e, n = s.e, s.req.nums
    most, where = -1, ""
    for name, gids in s.usable.items():
        k = sum(1 for g in gids if s.sets.of(g))
        if k > most:
            most, where = k, name
    held: Counter[str] = Counter()
    for g in s.usable.get(where, ()):
        for p in e.g_pods[g]:
            if not e.can_move(p):
                held[stay_reason(e, p)] += 1
    why = ", ".join(f"{r} ({c})" for r, c in held.most_common(3))
    return (
        f"pods that may not move hold the GPUs: at most {most} GPUs of the {n} asked can be made "
        f"free on any eligible node (node {where}; pods kept: {why or 'none'})"
    )
