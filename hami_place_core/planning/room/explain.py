"""Why there is no room, in words: the binding constraint of a request no plan can meet, and how
the pieces of a request read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from hami_place_core.node_resources import Resources
from hami_place_core.planning.constraints import immovable_reason
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.model import PlanOptions
from hami_place_core.planning.room.result import Found
from hami_place_core.requests import GpuRequest


def describe_request(req: GpuRequest | None) -> str:
    if req is None:
        return "no GPU"
    mem = f"{req.memreq} MiB" if req.memreq else f"{req.mem_percentage}% memory"
    return f"{req.nums} GPU{'s' if req.nums != 1 else ''}, {mem}, {req.coresreq}% cores"


def stay_reason(e: Engine, p: int) -> str:
    if not e.p_movable[p]:
        why = immovable_reason(e.p_alloc[p], e.options.excluded_namespaces, e.state.problems)
        return (why or "its workload has used its disruption budget").split(":")[0]
    if e.moves_made >= e.max_moves:
        return "--max-moves reached"
    return "its workload has used its disruption budget"


def closes(res: Resources, short: Resources) -> float:
    """How much of the shortfall `short` a pod's requests `res` close (0-3)."""
    total = 0.0
    for have, want in ((res.cpu, short.cpu), (res.memory, short.memory), (res.pods, short.pods)):
        if want > 0:
            total += min(have, want) / want
    return total


def relaxations(
    options: PlanOptions, budgets_bind: bool
) -> list[tuple[Callable[[Found, PlanOptions], str], PlanOptions]]:
    out: list[tuple[Callable[[Found, PlanOptions], str], PlanOptions]] = []
    if options.max_moves is not None:
        out.append((over_max_moves, replace(options, max_moves=None)))
    if not budgets_bind:
        return out
    out.append(
        (
            over_budgets,
            replace(
                options, max_moves=None, max_moves_per_workload=1 << 20, workload_limits={}, workload_moves_used={}
            ),
        )
    )
    return out


def over_max_moves(found: Found, options: PlanOptions) -> str:
    n = len(found.gpus)
    return (
        f"node {found.node} has room for {n} GPU{'s' if n != 1 else ''} only after "
        f"{found.key[0]} moves, over --max-moves {options.max_moves}"
    )


def over_budgets(found: Found, options: PlanOptions) -> str:
    per: Counter[str] = Counter(m.workload for m in found.moves if m.workload)
    over = [
        f"{w} ({c} moves, budget {options.limit_of(w) - options.workload_moves_used.get(w, 0)})"
        for w, c in sorted(per.items())
        if c > options.limit_of(w) - options.workload_moves_used.get(w, 0)
    ]
    return (
        f"node {found.node} has room only after {found.key[0]} moves, over the workloads' disruption "
        f"budgets (--max-moves-per-workload {options.max_moves_per_workload}): {', '.join(over)}"
    )
