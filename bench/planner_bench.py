"""Benchmark the defragmentation planner against baselines and bounds on replayed openb states.

    .venv/bin/python -m bench.planner_bench                       # full run (about 10 minutes)
    .venv/bin/python -m bench.planner_bench --cuts 0.99 --milp-instances 0 --no-frontier   # quick
    .venv/bin/python -m bench.planner_bench --all-lists --json all.json     # the evaluation (issue 22)
    .venv/bin/python -m bench.planner_bench --all-lists --subsets-only --seed 2   # its MILP subsets, another draw

``--all-lists``: every ``openb_pod_list_*.csv`` in ``$OPENB_DIR`` at cuts 0.95, 0.99 and 1.0
(``--cuts``), replayed with departure seeds 1 and 2 (``--seeds``; 0: no departures; each seed lets
a seeded tenth of the tasks leave, testbed/data/openb.py; lists without times have no departures and are
replayed once, as seed 0), in one table: whole GPUs free before; GPUs freed and moves of the
planner, best-fit greedy and the FFD prefix (the FFD repack's moves in the greedy order, up to
where it deadlocks, each checked when made); ``type_bound`` and the planner's share of it; moves
per freed GPU; the planner's CPU seconds (``time.process_time``, best of ``--repeat``) and, scaled
to the reference loop's nominal ``REF_NOMINAL_MS``, its ratio to the 2 s limit; flags where the
acceptance fails (planner below greedy; on gpuspec lists below 1.25 x greedy; an invalid plan;
over the limit). Per list, ``--milp-instances`` (default 4) random subsets of the ``--milp-seed``
state at ``--milp-cut`` with the planner's share of the settled ordered optimum, and the planner
run twice on each (identical moves). The slow baselines (HighNodeUtilization, FragmentationAware,
random) and the LP move bounds are not run. Replayed states are cached under ``--cache-dir``
(gzip JSON of the Node and Pod objects; delete it when the replay changes).

States: the openb trace (``$OPENB_DIR``, default /work/shared/data/openb) replayed with HAMi's
default policies (node binpack, GPU spread) and no departures (docs/openb.md), at several cut
times: 1,213 nodes, 6,212 GPUs. Sharing tasks ask gpu_milli/10 % of memory and cores.

For each state and method: whole GPUs freed, moves, moves per freed GPU, runtime, FGD before and
after, and whether ``check_moves`` accepts the moves in order (GPU Fit, node constraints, node CPU,
memory and pod slots, move by move). Upper bounds on the GPUs any plan can free: the Martello–Toth
L2 bound, and the exact optimum of the same relaxation (cutting stock, HiGHS), both blind to node
CPU and memory; the node-room bound (an aggregated MILP with per-node CPU, memory and pod-slot rows,
``planning.milp_bounds.node_room_bound``), the tightest; the LP lower bound on the moves needed for the
planner's gain. The target check: by that LP (blind to node room and order, so it holds for every
plan), the fewest moves per GPU for 92% of the node-room bound's gain, and the most GPUs any plan
can free at no more than 1.3 moves per GPU (``planning.bounds.most_gain_at_rate``). On random
subsets of nodes, the MILP optimum (HiGHS, proven within the time limit, node rows included)
against the planner, and whether the MILP's solution can be put in a valid order (the MILP ignores
order, so where it cannot, its optimum may be out of any plan's reach).
Every baseline checks node room for its moves as the planner does. Methods:

- ``hami-place``: :func:`hami_place_core.planning.plan` with its defaults;
- ``hami-place ≤1.3/GPU``: the longest prefix of that plan with at most 1.3 moves per freed GPU
  (every prefix of a plan is a valid plan);
- ``best-fit greedy``: the planner without ejection chains or rerouting (``max_moves_per_gpu=1``):
  a GPU is emptied only if each pod goes best-fit straight into another GPU (or, for pods alone
  on theirs, pairs up on an empty GPU);
- ``HighNodeUtilization``: descheduler style: nodes whose GPU compute use is under 50% are drained,
  least used first; every pod that fits elsewhere (nodeFit) is evicted and placed on the most
  allocated node where it fits (MostAllocated), on its most used GPU; no all-or-nothing;
- ``FragmentationAware``: Koordinator style: in cycles, each node may evict one pod, the one whose
  removal lowers the node's FGD most, if the cluster's FGD drops by at least 0.02 GPU once HAMi's
  scheduler (binpack, spread) re-places it on another node; until a cycle moves nothing;
- ``random``: as many random valid moves as hami-place makes (seeded);
- ``FFD repack``: all movable sharing pods repacked first-fit decreasing into the GPUs (fixed pods
  stay, node CPU and memory counted), each new bin matched to the old GPU of its node it shares
  most pods with; moves are put in the first order found where each fits, or reported as having
  none.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench.planner_report import (
    EFFICIENT,
    LIMIT_SECONDS,
    TARGET_SHARE,
    all_lists_table,
    merge_reports,
    print_all_lists,
    table,
)
from bench.planner_states import CACHE_DIR, all_lists, departure_seeds, replayed_states, type_constrained
from hami_place_core.fit import gpu_fit_reason
from hami_place_core.fragmentation import WorkloadMix, cluster_metrics, mix_from_state
from hami_place_core.planning import Move, Plan, PlanOptions, apply_moves, check_moves, plan
from hami_place_core.planning.bounds import l2_bound, most_gain_at_rate, move_frontier, pattern_bound, restrict
from hami_place_core.planning.milp_bounds import MilpResult, milp_bound, node_room_bound
from hami_place_core.state import ClusterState, build_state
from testbed.data import openb as replay
from testbed.reference.planner_baselines import ffd_repack, fragmentation_aware, high_node_utilization, random_moves

CUTS = (0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0)
# --all-lists: the evaluation of issue 22.
ALL_CUTS = (0.95, 0.99, 1.0)
ALL_SEEDS = (1, 2)  # departure seeds of the replay; 0 means no departures
TYPED_GAIN = 1.25  # the target on type-constrained (gpuspec) lists: this many times greedy's GPUs
# The reference loop's reading (ms) the 2 s limit is taken at: the middle of the 15.5-17.2 ms it
# read during the recorded gpushare40 run of docs/planner.md, where the planner took 0.66-0.99 s.
REF_NOMINAL_MS = 16.5


def reference_ms() -> float:
    """Milliseconds of a fixed pure-Python loop, the best of three, taken next to each planner
    timing: this machine is shared, and its speed has varied by up to 2x within an hour (a loop
    like it read 17 and 32 ms on the same day), so a planner time means little without it."""
    best = math.inf
    for _ in range(3):
        t = time.process_time()
        acc: dict[int, int] = {}
        for i in range(200_000):
            acc[i & 1023] = acc.get(i & 1023, 0) + i
        best = min(best, time.process_time() - t)
    return round(1000 * best, 1)


@dataclass
class Result:
    method: str
    moves: list[Move]
    seconds: float
    valid: bool = True
    note: str = ""
    freed: int = 0
    fgd_after: float = 0.0


# ---- running ----------------------------------------------------------------------------------------
def evaluate(state: ClusterState, mix: WorkloadMix, result: Result, options: PlanOptions) -> Result:
    result.valid = result.valid and not check_moves(state, result.moves, options)
    after = cluster_metrics(apply_moves(state, result.moves), mix).total
    before = cluster_metrics(state, mix).total
    result.freed = after.whole_free - before.whole_free
    result.fgd_after = after.fgd
    return result


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def timed_cpu(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """`fn()`, its wall seconds and its CPU seconds (``time.process_time``: on a shared machine the
    wall clock measures the other jobs too)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def prefix(p: Plan, per_gpu: float) -> list[Move]:
    """The longest prefix of the plan with at most `per_gpu` moves per GPU it frees."""
    best = 0
    freed = 0
    for i, m in enumerate(p.moves, start=1):
        freed += len(m.frees) - len(m.takes)
        if freed and i / freed <= per_gpu:
            best = i
    return list(p.moves[:best])


def bench_state(label: str, state: ClusterState, args: argparse.Namespace) -> dict[str, Any]:
    options = PlanOptions()
    mix = mix_from_state(state)
    before = cluster_metrics(state, mix).total
    results: list[Result] = []
    ref = reference_ms()
    p, secs = timed(lambda: plan(state, options))
    for _ in range(args.repeat - 1):  # the planner's time is the best of --repeat runs (a shared machine)
        here = reference_ms()
        took = timed(lambda: plan(state, options))[1]
        if took < secs:
            secs, ref = took, here
    results.append(Result("hami-place", list(p.moves), secs))
    planner_secs = secs
    pre = prefix(p, EFFICIENT)
    results.append(Result(f"hami-place, prefix ≤{EFFICIENT}/GPU", pre, secs, note=f"first {len(pre)} moves"))
    q, secs = timed(lambda: plan(state, PlanOptions(max_moves_per_gpu=1)))
    results.append(Result("best-fit greedy", list(q.moves), secs))
    moves, secs = timed(lambda: high_node_utilization(state, options))
    results.append(Result("HighNodeUtilization", moves, secs))
    if not args.no_koordinator:
        moves, secs = timed(lambda: fragmentation_aware(state, options, mix))
        results.append(Result("FragmentationAware", moves, secs))
    moves, secs = timed(lambda: random_moves(state, options, len(p.moves)))
    results.append(Result("random", moves, secs))
    (moves, ordered), secs = timed(lambda: ffd_repack(state, options))
    results.append(Result("FFD repack", moves, secs, valid=ordered, note="" if ordered else "no valid order found"))
    for r in results:
        evaluate(state, mix, r, options)
    l2, pat = l2_bound(state), pattern_bound(state)
    room = node_room_bound(state, time_limit=args.milp_time)
    frontier: dict[int, float] = {}
    target: dict[str, Any] = {}
    if not args.no_frontier and pat is not None:
        # The target's gain, so its least moves per GPU shows whether any plan can meet it at all.
        goal = math.ceil(TARGET_SHARE * room.gain) if room.gain else 0
        gains = sorted({p.gpus_freed, *(r.freed for r in results if r.freed > 0), *([goal] if goal else [])})
        frontier = move_frontier(state, gains)
        most = most_gain_at_rate(state, EFFICIENT, pat.gain)
        target = {
            "gain": goal,
            "minMovesPerGpu": round(frontier[goal] / goal, 3) if goal and math.isfinite(frontier[goal]) else None,
            "mostAtRate": most,
        }
    return {
        "state": label,
        "gpus": before.gpus,
        "wholeFreeBefore": before.whole_free,
        "fgdBefore": round(before.fgd, 1),
        "l2Gain": l2.gain,
        "patternGain": pat.gain if pat else None,
        "patternProven": bool(pat and pat.proven),
        # The tightest: counts node CPU, memory and pod slots; never above the other two.
        "boundGain": room.gain,
        "boundProven": room.proven,
        "minMovesLp": {str(k): round(val, 1) for k, val in frontier.items()},
        # The planner's best time against the limit, and the reference loop just before it.
        "plannerSeconds": round(planner_secs, 3),
        "limitRatio": round(planner_secs / LIMIT_SECONDS, 3),
        "referenceMs": ref,
        # LP lower bounds (no node room, no order: they hold for every plan): the fewest moves per
        # GPU for TARGET_SHARE of the node-room bound, and the most GPUs any plan frees at no more
        # than EFFICIENT moves per GPU.
        "target": target,
        "results": [
            {
                "method": r.method,
                "freed": r.freed,
                "moves": len(r.moves),
                "movesPerGpu": round(len(r.moves) / r.freed, 2) if r.freed > 0 else None,
                "seconds": round(r.seconds, 2),
                "fgdAfter": round(r.fgd_after, 1),
                "valid": r.valid,
                "note": r.note,
            }
            for r in results
        ],
    }


# The referee of the MILP subsets, as benchmarked (docs/planner.md): split it only with a bench re-run.
def orderable(state: ClusterState, assignment: Mapping[str, str], budget: int = 50_000) -> bool | None:  # noqa: C901
    """Whether the MILP's moves (it ignores their order) can be made one at a time, each valid when
    made (HAMi's Fit on the target GPU, CPU, memory and a pod slot on the target node): an
    exhaustive search over the orders, where the state after a set of moves is the same whichever
    order made them, so each set is looked at once. None if `budget` sets did not settle it.
    Each pod moves once, straight to its final GPU, as in the planner's plans."""
    where = {d.uuid: (n.name, d) for n in state.nodes.values() for d in n.devices}
    use = {u: state.nodes[name].usage[u].copy() for u, (name, _) in where.items()}
    room = {n: r for n in state.nodes if (r := state.free_resources(n)) is not None}
    moves = []
    for key, uuid in sorted(assignment.items()):
        a = state.pods[key]
        (src,) = a.per_gpu  # the MILP moves single-GPU pods only
        moves.append((a.request.gpu_containers[0], a.request.selectors, src, uuid, state.requests_of(key)))

    def shift(i: int, sign: int) -> None:
        req, _, src, dst, res = moves[i]
        for u, s in ((src, -sign), (dst, sign)):
            d = where[u][1]
            use[u].used += s
            use[u].usedmem += s * req.memory_on(d.devmem)
            use[u].usedcores += s * req.coresreq
        a, b = where[src][0], where[dst][0]
        if a != b:
            if a in room:
                room[a] = room[a] + res if sign > 0 else room[a] - res
            if b in room:
                room[b] = room[b] - res if sign > 0 else room[b] + res

    def ready(i: int) -> bool:
        req, sel, src, dst, res = moves[i]
        node, d = where[dst]
        if node != where[src][0] and node in room and not room[node].covers(res):
            return False
        return gpu_fit_reason(req, d, use[dst], sel, state.nodes[node].cordoned) is None

    full = (1 << len(moves)) - 1
    dead: set[int] = set()
    looked = 0

    def search(done: int) -> bool | None:
        nonlocal looked
        if done == full:
            return True
        if done in dead:
            return False
        looked += 1
        if looked > budget:
            return None
        for i in range(len(moves)):
            if done >> i & 1 or not ready(i):
                continue
            shift(i, +1)
            found = search(done | 1 << i)
            shift(i, -1)
            if found is not False:
                return found
        dead.add(done)
        return False

    return search(0)


@dataclass
class Reach:
    gain: int | None  # the most GPUs a plan whose moves have a valid order was found to free
    proven: bool  # and no plan of direct moves frees more
    first_orderable: bool | None  # the MILP's (fewest-moves) solution has a valid order
    excluded: int  # solutions cut off on the way for want of a valid order (or of a settled search)


def direct_optimum(sub: ClusterState, best: MilpResult, start: Sequence[Move], time_limit: float) -> Reach:
    """The MILP optimum over final assignments whose moves have a valid order: check the solution's
    orders exhaustively (`orderable`), and while it has none, exclude that assignment (a no-good
    row) and solve again. Each re-solve skips the fewest-moves stage, whose time-limited incumbent
    varies from run to run. An orderable solution is a plan's reach; it is the optimum of every plan
    that moves each pod once, straight to its final GPU (the planner's plans are such plans, and
    seed each solve), when it frees as many as the order-free optimum or every excluded solution
    was shown to have no valid order."""
    if not best.optimal:
        return Reach(None, False, None, 0)
    deadline = time.perf_counter() + time_limit
    forbid: list[Mapping[str, str]] = []
    first: bool | None = None
    exact = True
    result = best
    while True:
        if not result.optimal or (not result.assignment and result.gain):
            return Reach(None, False, first, len(forbid))
        ok = orderable(sub, result.assignment) if result.gain else True
        if first is None:
            first = ok
        if ok:
            return Reach(result.gain, exact or result.gain == best.gain, first, len(forbid))
        exact = exact and ok is False
        forbid.append(dict(result.assignment))
        left = deadline - time.perf_counter()
        if left < 1:
            return Reach(None, False, first, len(forbid))
        result = milp_bound(sub, time_limit=left, start=start, forbid=forbid, fewest_moves=False)


def bench_subsets(
    state: ClusterState, args: argparse.Namespace, again: Callable[[ClusterState, Plan], bool] | None = None
) -> dict[str, Any]:
    names = sorted(state.nodes)
    rng = random.Random(args.seed)
    rows = []
    for i in range(args.milp_instances):
        sub = restrict(state, rng.sample(names, args.milp_nodes))
        p, secs, cpu = timed_cpu(partial(plan, sub))  # auto: the exact planner runs on 16 nodes
        same = again(sub, p) if again else None
        g, greedy_secs = timed(partial(plan, sub, PlanOptions(solver="greedy")))
        best = milp_bound(sub, time_limit=args.milp_time, start=p.moves)
        reach = direct_optimum(sub, best, p.moves, args.order_time)
        rows.append(
            {
                "instance": i,
                "gpus": sum(len(n.devices) for n in sub.nodes.values()),
                "planner": p.gpus_freed,
                "plannerMoves": len(p.moves),
                "plannerSeconds": round(secs, 3),
                "plannerCpuSeconds": round(cpu, 3),
                "plannerSolver": p.solver,
                "plannerNote": p.solver_note,
                "greedy": g.gpus_freed,
                "greedyMoves": len(g.moves),
                "greedySeconds": round(greedy_secs, 3),
                "milp": best.gain if best.optimal else None,
                "milpMoves": best.moves,
                "milpBound": best.bound_gain,
                "proven": best.optimal,
                # The MILP ignores the order of moves; where its solution (fewest moves, or the
                # best found in the time) has a valid order, its optimum is one a plan can reach.
                "milpOrderable": reach.first_orderable,
                # The most GPUs any plan of direct moves frees, each valid when made (None: not
                # settled in the time), and the solutions without a valid order it excluded.
                "ordered": reach.gain,
                "orderedProven": reach.proven,
                "excluded": reach.excluded,
                "milpSeconds": round(best.seconds, 1),
                **({} if same is None else {"sameOnSecondRun": same}),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    proven = [r for r in rows if r["proven"]]
    got = sum(r["planner"] for r in proven)
    opt = sum(r["milp"] for r in proven)
    # The MILP's optimum is reachable by a real plan where a solution of it has a valid order, or
    # where the planner's (ordered, valid) plan reaches it.
    reachable = [r for r in proven if r["ordered"] == r["milp"] or r["planner"] == r["milp"]]
    # Where the optimum over plans with a valid order is settled (proven), the target's measure.
    settled = [r for r in proven if r["orderedProven"]]
    return {
        "nodesPerInstance": args.milp_nodes,
        "instances": len(rows),
        "proven": len(proven),
        "plannerFreed": got,
        "optimumFreed": opt,
        "ratio": round(got / opt, 4) if opt else None,
        "instancesAtOptimum": sum(1 for r in proven if r["planner"] == r["milp"]),
        "orderable": len(reachable),
        "orderablePlannerFreed": sum(r["planner"] for r in reachable),
        "orderableOptimumFreed": sum(r["milp"] for r in reachable),
        "ordered": len(settled),
        "orderedPlannerFreed": sum(r["planner"] for r in settled),
        "orderedOptimumFreed": sum(r["ordered"] for r in settled),
        "plannerMoves": sum(r["plannerMoves"] for r in proven),
        "plannerSecondsMax": max((r["plannerSeconds"] for r in rows), default=0),
        "plannerSecondsTotal": round(sum(r["plannerSeconds"] for r in rows), 1),
        "plannerCpuSecondsMax": max((r["plannerCpuSeconds"] for r in rows), default=0),
        "exactUsed": sum(1 for r in proven if r["plannerSolver"] == "exact"),
        "greedyFreed": sum(r["greedy"] for r in proven),
        "greedyMoves": sum(r["greedyMoves"] for r in proven),
        "greedyAtOptimum": sum(1 for r in proven if r["greedy"] == r["milp"]),
        "milpMinMoves": sum(r["milpMoves"] or 0 for r in proven if r["milpMoves"] is not None),
        "rows": rows,
    }


def type_bound(state: ClusterState) -> tuple[int | None, bool]:
    """The upper bound the all-lists table measures the planner against, and whether it is proven:
    the type-aware node-room bound (docs/planner.md, Bounds), run to a gap of 0 within its work
    limit; its wall-clock cap is a safety only (the result then says not proven)."""
    b = node_room_bound(state, PlanOptions())
    return b.gain, b.proven


def planner_cpu(state: ClusterState, repeat: int) -> tuple[Plan, float, float, bool]:
    """The planner's plan, its CPU seconds (the best of `repeat`), the reference loop read just
    before that best run, and whether every run made the same moves."""
    best, ref, first = math.inf, math.nan, None
    same = True
    for _ in range(max(1, repeat)):
        here = reference_ms()
        t = time.process_time()
        p = plan(state, PlanOptions())
        took = time.process_time() - t
        if first is None:
            first = p
        same = same and p.moves == first.moves
        if took < best:
            best, ref = took, here
    assert first is not None
    return first, best, ref, same


def freed_by(state: ClusterState, mix: WorkloadMix, moves: Sequence[Move]) -> tuple[int, bool]:
    """Whole GPUs the moves free, and whether check_moves accepts them in order."""
    r = evaluate(state, mix, Result("", list(moves), 0.0), PlanOptions())
    return r.freed, r.valid


def acceptance_flags(pod_list: str, planner: int, greedy: int, valid: bool, limit_ratio: float) -> list[str]:
    flags = []
    if planner < greedy:
        flags.append("<greedy")
    if type_constrained(pod_list) and planner < TYPED_GAIN * greedy:
        flags.append(f"<{TYPED_GAIN:g}x greedy")
    if not valid:
        flags.append("invalid")
    if limit_ratio > 1:
        flags.append(">2 s")
    return flags


def all_lists_row(
    pod_list: str, seed: int, cut: float, state: ClusterState, args: argparse.Namespace
) -> dict[str, Any]:
    mix = mix_from_state(state)
    before = cluster_metrics(state, mix).total
    p, cpu, ref, same = planner_cpu(state, args.repeat)
    planner, planner_valid = freed_by(state, mix, p.moves)
    g = plan(state, PlanOptions(max_moves_per_gpu=1))
    greedy, greedy_valid = freed_by(state, mix, g.moves)
    (ffd_moves, ffd_complete), ffd_secs = timed(lambda: ffd_repack(state, PlanOptions()))
    ffd, _ = freed_by(state, mix, ffd_moves)  # every move was checked when made: a valid prefix
    bound, proven = type_bound(state)
    # The planner's CPU time at the reference loop's nominal speed, against the 2 s limit.
    scaled = cpu * REF_NOMINAL_MS / ref
    row = {
        "list": pod_list,
        "cut": cut,
        "seed": seed,
        "gpus": before.gpus,
        "wholeFreeBefore": before.whole_free,
        "planner": planner,
        "plannerMoves": len(p.moves),
        "plannerValid": planner_valid,
        "plannerRepeatsIdentical": same,
        "greedy": greedy,
        "greedyMoves": len(g.moves),
        "greedyValid": greedy_valid,
        "vsGreedy": round(planner / greedy, 3) if greedy else None,
        "ffdPrefix": ffd,
        "ffdMoves": len(ffd_moves),
        "ffdComplete": ffd_complete,  # False: the greedy order deadlocked; the prefix before it
        "ffdSeconds": round(ffd_secs, 1),
        "bound": bound,
        "boundProven": proven,
        "shareOfBound": round(planner / bound, 3) if bound else None,
        "movesPerGpu": round(len(p.moves) / planner, 2) if planner > 0 else None,
        "plannerCpuSeconds": round(cpu, 3),
        "referenceMs": ref,
        "scaledCpuSeconds": round(scaled, 3),
        "limitRatio": round(scaled / LIMIT_SECONDS, 3),
    }
    row["flags"] = acceptance_flags(pod_list, planner, greedy, planner_valid and greedy_valid, row["limitRatio"])
    return row


def subsets_twice(state: ClusterState, args: argparse.Namespace) -> dict[str, Any]:
    """The MILP subsets, plus the determinism check: the planner run again on each subset (same
    seed, same nodes) must make the same moves."""
    out = bench_subsets(state, args, again=lambda sub, p: plan(sub).moves == p.moves)
    out["determinismDiffers"] = [r["instance"] for r in out["rows"] if not r["sameOnSecondRun"]]
    return out


def save_partial(args: argparse.Namespace, report: Mapping[str, Any]) -> None:
    """The report so far, after every row: a long run on a shared machine may be cut short."""
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def run_all_lists(args: argparse.Namespace, report: dict[str, Any]) -> None:
    cuts = [float(c) for c in args.cuts.split(",")] if args.cuts else list(ALL_CUTS)
    if args.subsets_only:
        cuts = []
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict[str, Any]] = report.setdefault("rows", [])
    subsets: dict[str, Any] = report.setdefault("subsets", {})
    report["cpuStart"] = time.process_time()
    for name in args.lists.split(",") if args.lists else all_lists():
        list_seeds = departure_seeds(name, seeds)
        for seed in list_seeds:
            # The subsets come from the --milp-seed state, or the one state of a list without times.
            subsets_here = bool(args.milp_instances) and (seed == args.milp_seed or list_seeds == [0])
            if args.subsets_only and not subsets_here:
                continue
            want = sorted({*cuts, *([args.milp_cut] if subsets_here else [])})
            for cut, state, summary in replayed_states(name, seed, want, args.cache_dir):
                if cut in cuts:
                    rows.append({**all_lists_row(name, seed, cut, state, args), "replay": summary})
                    print(all_lists_table(rows[-1:]).splitlines()[-1], flush=True)
                    save_partial(args, report)
                if subsets_here and cut == args.milp_cut:
                    subsets[name] = subsets_twice(state, args)
                    save_partial(args, report)
    report["cpuSeconds"] = round(time.process_time() - report.pop("cpuStart"), 1)


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load": os.getloadavg(),
    }


def main_all_lists(args: argparse.Namespace, report: dict[str, Any]) -> int:
    report.update(
        {
            "departureShare": replay.DEPARTURE_SHARE,
            "referenceNominalMs": REF_NOMINAL_MS,
            "limitSeconds": LIMIT_SECONDS,
            "subsetCut": args.milp_cut,
            "subsetSeed": args.milp_seed,
        }
    )
    started = time.perf_counter()
    run_all_lists(args, report)
    report["wallSeconds"] = round(time.perf_counter() - started, 1)
    report["machine"]["loadAfter"] = os.getloadavg()
    print_all_lists(report)
    print(
        f"\nCPU {report['cpuSeconds']} s, wall {report['wallSeconds']} s; load average "
        f"{report['machine']['load']} at the start, {report['machine']['loadAfter']} at the end"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", default="gpushare40", help="openb pod list (gpushare40, gpuspec10, ...)")
    ap.add_argument("--cuts", help=f"comma-separated cut times (default {CUTS}; with --all-lists {ALL_CUTS})")
    ap.add_argument(
        "--all-lists",
        action="store_true",
        help="every pod list at every cut and departure seed, planner against greedy, FFD and the type bound",
    )
    ap.add_argument("--lists", help="with --all-lists: only these lists (comma-separated)")
    ap.add_argument(
        "--subsets-only",
        action="store_true",
        help="with --all-lists: only the MILP subsets (no full-state rows); --seed draws them",
    )
    ap.add_argument(
        "--seeds",
        default=",".join(map(str, ALL_SEEDS)),
        help="with --all-lists: departure seeds of the replay (0: no departures)",
    )
    ap.add_argument(
        "--tables-from",
        nargs="+",
        type=Path,
        help="print one --all-lists table from these --json reports (a run split by --lists) and exit",
    )
    ap.add_argument("--milp-seed", type=int, default=1, help="with --all-lists: the departure seed of the subsets")
    ap.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="replayed states (gzip JSON) for --all-lists")
    ap.add_argument("--milp-instances", type=int, help="MILP subsets (default 20; with --all-lists 4 per list)")
    ap.add_argument("--milp-nodes", type=int, default=16)
    ap.add_argument("--milp-time", type=float, default=60.0)
    ap.add_argument("--milp-cut", type=float, default=0.99)
    ap.add_argument(
        "--order-time",
        type=float,
        help="seconds per subset for the best solution with a valid order (default 120; with --all-lists 20)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="time the planner this many times, report the best")
    ap.add_argument("--no-koordinator", action="store_true", help="skip the (slow) FragmentationAware baseline")
    ap.add_argument("--no-frontier", action="store_true", help="skip the LP move bounds")
    ap.add_argument("--json", type=Path, help="also write the report as JSON")
    args = ap.parse_args(argv)
    all_lists_run = args.all_lists
    if args.milp_instances is None:
        args.milp_instances = 4 if all_lists_run else 20
    if args.order_time is None:
        args.order_time = 20.0 if all_lists_run else 120.0
    report: dict[str, Any] = {"machine": machine(), "argv": sys.argv[1:] if argv is None else list(argv)}
    if args.tables_from:
        return merge_reports(args.tables_from, args.json)
    if all_lists_run:
        return main_all_lists(args, report)
    cuts = [float(c) for c in (args.cuts or ",".join(map(str, CUTS))).split(",")]
    nodes = replay.load_nodes(replay.DATA_DIR / replay.NODE_LIST)
    pods = replay.load_pods(replay.pod_list_path(args.pods))
    r = replay.Replayer(nodes, pods, departures=False)
    report.update({"pods": args.pods, "states": [], "subsetCut": args.milp_cut})
    subset_state = None
    for cut in sorted(set([*cuts, *([args.milp_cut] if args.milp_instances else [])])):
        r.advance(replay.resolve_cut(pods, cut))
        state = build_state(r.node_objects, r.pod_objects(include_pending=False))
        if cut in cuts:
            print(f"cut {cut}: benchmarking", file=sys.stderr, flush=True)
            report["states"].append(bench_state(str(cut), state, args))
            print(table({"states": report["states"][-1:]}), flush=True)
        if args.milp_instances and cut == args.milp_cut:
            subset_state = state
    if subset_state is not None:
        report["subsets"] = bench_subsets(subset_state, args)
    report["machine"]["loadAfter"] = os.getloadavg()
    print("\n## Summary\n" + table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
