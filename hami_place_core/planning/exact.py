"""The exact planner for small clusters: a MILP over where every movable pod ends, then an order.

The greedy planner (:mod:`hami_place_core.planning.strategies`) moves a pod only as part of emptying one GPU,
and finds room on a full node only among the pods leaving it for that same GPU. On 16-node
subsets of the openb trace that leaves about one GPU in six that a plan of direct, valid moves
can free (the benchmark's MILP subsets): the missing plans move pods between several nodes at
once, each evacuation making the CPU or memory room another one needs. A solver sees those.

Three steps, deterministic: HiGHS runs single-threaded with a fixed seed, and every solve of one
plan (the bins cut, the first solve, the order search's re-solves) spends from one budget of
solver work (:class:`~hami_place_core.planning.highs.WorkLimit`: HiGHS's own limit checks,
counted by a callback), besides 1,000 branch-and-bound nodes per solve. No clock decides
anything, so the same state and options give the same plan on any machine; ``seconds`` is only
reported. ``--solver auto`` has AUTO_WORK, ``exact`` the larger EXACT_WORK. Where the budget runs
out, the best assignment found so far is still used if it frees more than the greedy plan and
has an order, and the note says it is not proven optimal:

1. *Most GPUs freed, then fewest moves that must wait*: binaries x[p,g] (pod p ends on GPU g) and
   y[g] (GPU g stays in use), with each GPU's slots, memory and compute, each node's CPU, memory
   and pod slots, per-workload disruption budgets, ``max_moves`` and at most
   ``max_moves_per_gpu`` moves per freed GPU as rows; the bins' cutting-stock optimum
   (:func:`~hami_place_core.planning.bounds.pattern_bound`) as a cut, without which HiGHS takes
   minutes to prove what it finds in a second. One lexicographic objective: a GPU in use weighs
   more than all the rest, which is the moves that must wait for another (their target GPU or
   node has no room now; cycles of them are what leave an assignment without an order), plus a
   little per other move. Until this was one objective, a second solve with the gain fixed looked
   for the fewest waiting moves: it took HiGHS about three times the first solve's work, so
   ``auto`` ran out of work before an order on the openb subsets where one was needed.
2. *An order*: the solution goes into a fresh planner engine, which orders the moves as it orders
   its own (cheapest frees first); if that deadlocks, an exhaustive search over the sets of
   moves made (the state after a set does not depend on its order; at most ORDER_BUDGET sets).
   With no order, exactly that assignment is cut off and HiGHS solves again with the gain fixed,
   a few times; then one GPU less.
3. *Only the moves needed*: last move first, a pod goes back home where the plan then frees as
   many GPUs and still has an order.

Where step 1 spends its work without finding an assignment freeing more than the greedy plan, a
second attempt (SECOND_WORK times `auto`'s budget more): a row asks for one GPU more than the greedy
plan, the moves-per-freed-GPU row is left out and HiGHS stops at its first solution (a reshuffle
of most movable pods, found in a few dozen steps where the capped model needed thousands); from
there the lexicographic objective shortens it; then steps 2 and 3, with the limit checked on each
ordered plan and added as a row for the re-solves.

Only pods with one GPU container on one shared GPU move (as in the bounds); multi-GPU pods and
exclusive requests stay put. HiGHS (``highspy``) is optional: without it, or on a state too large
for it (``EXACT_MAX_PAIRS``, ``EXACT_MAX_COLUMNS``), ``plan()`` keeps the greedy plan.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from hami_place_core.fit import gpu_fit_reason
from hami_place_core.planning.bounds import pattern_bound, pool
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.exact_model import ExactModel
from hami_place_core.planning.highs import WorkLimit
from hami_place_core.planning.model import Move, PlanOptions
from hami_place_core.planning.ordering import fits_now, moves_of, sequence, start, step

# Above this many (movable pod, GPU) pairs `--solver exact` refuses the state, and above
# EXACT_AUTO_PAIRS `auto` leaves it to the greedy planner. The openb 16-node subsets have
# 1,300-7,200 pairs; the 1,213-node example has 21.5 million. Pairs are counted before any
# model is built; columns (pairs HAMi's Fit and node room allow) after. With the work budgets
# below, the time the exact stage takes is bounded by its budget more than by the pairs.
EXACT_MAX_PAIRS = 250_000
EXACT_AUTO_PAIRS = 8_000
EXACT_MAX_COLUMNS = 40_000
# Solver steps per plan (HiGHS's limit checks, :class:`~hami_place_core.planning.highs.WorkLimit`),
# shared by every solve of one plan: a work limit, never a time limit, so that the plan does not
# depend on the machine's speed. A step costs 5-105 ms of CPU on the openb 16-node subsets. With
# 50, `auto` took at most 3.4 s of CPU on 60 of them (three lists) and found 4 of the exact
# planner's plans; 40 found 1 and saved about 0.1 s at worst. `exact`, with 6,000, frees on
# gpushare40's subsets what the planner did with its former 60 s net, in up to 37 s
# (bench/exact_bench.py; docs/planner.md, "The exact planner's work limit"). Since steps 1 and 2
# are one solve, a step carries more LP work: up to 3.4 s there, 3.9 s on issue 22's subsets.
AUTO_WORK = 50
EXACT_WORK = 6_000
# A step's LP is about as large as the model, so a model with fewer columns than this gets
# proportionally more steps (a 3-node state of 204 columns needs 137, in well under a second).
SMALL_MODEL_COLUMNS = 1_000
# Of that, the most the bins cut's solve may spend: without the cut HiGHS still solves, slower.
CUT_WORK = 500
# Assignments without a valid order cut off before giving up (each costs a re-solve).
MAX_RETRIES = 6
# The cost of a move that need not wait for another (one that must costs 1), in the search for an
# assignment with an order.
MOVE_COST = 0.05
LEAN_TRIES = 3
# Sets of moves the order search may look at for one assignment.
ORDER_BUDGET = 5_000
# Where the lexicographic solve spends its work without a better plan, a second attempt that
# finds any assignment freeing more first and then shortens it (_OrderSearch.find) gets
# SECOND_WORK times `auto`'s budget more, 1/FIND_SHARE of it for the finding, the rest once found. On issue
# 22's MILP subsets (docs/planner.md) it freed the one GPU the first attempt missed with 100 steps
# (20 to find a 40-move reshuffle, 24 to cut it to 9 moves, one over the limit, 56 for a 6-move
# plan under the limit as a row); once the budget of `auto` was not enough.
SECOND_WORK = 2
FIND_SHARE = 4
# HiGHS's default for mip_max_improving_sols (no limit), restored after the first solution.
_UNLIMITED = 2**31 - 1


@dataclass(frozen=True)
class ExactOutcome:
    moves: list[Move] | None  # None: nothing better than `floor` found
    gain: int  # GPUs the solver's assignment frees (0 when not solved)
    proven: bool  # the first step proved that no assignment frees more
    retries: int  # assignments cut off for want of a valid order
    seconds: float  # reported only: nothing in the planner depends on a clock
    why: str  # why the result is what it is, for the plan's header
    work: WorkLimit | None = None  # the solver work spent, and whether the budget ran out


# What `plan` and `defrag` say when HiGHS is not importable: the plugin's default release archive
# leaves it out (docs/release.md), as does `pip install hami-place` without the extra.
ABSENT = (
    "exact stage not in this build (HiGHS absent): pip install 'hami-place[exact]', "
    "or use the release's -full archive (kubectl-hami_place_<version>_<os>_<arch>-full.tar.gz)"
)


def available() -> bool:
    try:
        import highspy  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def work_budget(options: PlanOptions, columns: int) -> int:
    """Solver steps for one plan over a model of `columns` pod-GPU columns: `auto` less than
    `exact` (see AUTO_WORK), more for models under SMALL_MODEL_COLUMNS."""
    return _scaled(EXACT_WORK if options.solver == "exact" else AUTO_WORK, columns)


def _scaled(steps: int, columns: int) -> int:
    return max(steps, steps * SMALL_MODEL_COLUMNS // max(columns, 1))


def _has_solution(h: Any) -> bool:
    return bool(h.getInfo().primal_solution_status == 2)


def solve(engine: Engine, options: PlanOptions, floor: int, seed: Sequence[Move] = ()) -> ExactOutcome:
    """A plan freeing more than `floor` GPUs (the greedy plan's gain), or None in `moves`.

    `engine` must hold every pod at its original place; it is left holding the returned plan's
    final places (or its original state).
    """

    started = time.perf_counter()
    model = ExactModel(engine, options)
    work = WorkLimit(work_budget(options, len(model.cols)))
    outcome = partial(_no_plan, started, work)
    if not model.movers:
        return outcome(0, True, "no pod can move")
    if len(model.cols) > EXACT_MAX_COLUMNS:
        return outcome(0, False, f"{len(model.cols)} pod-GPU pairs, over the exact planner's {EXACT_MAX_COLUMNS}")
    cut = _bins_cut(engine, options, model, work)
    if work.left == 0:
        return outcome(0, False, _gave_up(work, options, floor))
    first = _attempt(model, cut, floor, started, work, seed)
    if first.moves is not None or first.proven or not work.hit or first.gain > floor:
        return first
    # The lexicographic solve spent its work without finding an assignment better than the greedy
    # plan (where it found one without an order, looking again for any is no help): look for any
    # assignment freeing more first, then shorten it (_OrderSearch.find), with more work.
    more = SECOND_WORK * _scaled(AUTO_WORK, len(model.cols))
    work.extend(more // FIND_SHARE)
    second = _attempt(model, cut, floor, started, work, (), find_first=more - more // FIND_SHARE)
    if second.moves is not None or second.proven:
        return second
    best = max(first.gain, second.gain)
    return outcome(best, False, _gave_up(work, options, floor, best))


def _attempt(
    model: ExactModel, cut: int | None, floor: int, started: float, work: WorkLimit, seed: Sequence[Move],
    find_first: int | None = None,
) -> ExactOutcome:  # fmt: skip
    """One search for a plan freeing more than `floor`, from a fresh model: the lexicographic
    solve from `seed`'s places, or with `find_first` (the work added once an assignment is found)
    any assignment freeing more first, then shorter ones."""
    options = model.options
    outcome = partial(_no_plan, started, work)
    h = model.build(cut)
    search = _OrderSearch(h, model, started, work)
    if find_first is not None:
        status = search.find(floor)
        if status == "infeasible":
            return outcome(floor, True, "no assignment frees more")
        if status is not None:
            if work.hit:
                return outcome(floor, False, _gave_up(work, options, floor))
            return outcome(floor, False, "the solver found none that frees more within its node limit")
        work.extend(find_first)
        search.improve()
    else:
        search.lexicographic(seed)
        if not _has_solution(h):
            return outcome(0, False, _gave_up(work, options, floor) if work.hit else "the solver found no assignment")
    best, proven = search.result()
    if best <= floor:
        if proven:
            return outcome(best, True, "no assignment frees more")
        if work.hit:
            return outcome(best, False, _gave_up(work, options, floor))
        return outcome(best, False, "the solver found none that frees more within its node limit")
    return search.run(floor, best, proven)


def _no_plan(started: float, work: WorkLimit, gain: int, proven: bool, why: str) -> ExactOutcome:
    """An outcome without a plan better than the greedy one (`gain`: what the best assignment found frees)."""
    return ExactOutcome(None, gain, proven, 0, time.perf_counter() - started, why, work)


def _gave_up(work: WorkLimit, options: PlanOptions, floor: int, best: int = 0) -> str:
    """The note for a solve that spent its work without a plan better than the greedy one
    (`best`: what the best assignment found frees, which had no valid order)."""
    found = f"before finding a valid order for an assignment freeing {best}" if best > floor else "with nothing better"
    hint = "; --solver exact works longer" if options.solver != "exact" else ""
    return f"stopped at its work limit ({work}) {found}; the greedy plan frees {floor}{hint}"


def _found_note(work: WorkLimit, floor: int, gain: int, best: int, proven: bool) -> str:
    """The note for a plan freeing `gain` (`best`: the most any assignment the solver found frees)."""
    if proven and gain == best:
        return f"a MILP frees {gain} (greedy {floor})"
    if work.hit:
        note = f"stopped at its work limit ({work}); best assignment found frees {gain} (greedy {floor})"
        if gain < best:
            note += f"; {best} with no valid order found"
        return note + ("" if proven else ", not proven optimal")
    note = f"a MILP frees {gain} (greedy {floor}"
    return note + (")" if gain == best else f"; {best} with no valid order found)")


class _OrderSearch:
    """Steps 1 and 2 of :func:`solve`. First *any* assignment freeing more than the greedy plan
    (:meth:`find`: a row asks for one GPU more, the objective is only the GPUs in use, and HiGHS
    stops at its first solution), then, from there, one lexicographic objective (:meth:`improve`):
    the fewest GPUs in use first, then the fewest moves that must wait for another (plus MOVE_COST
    per other move for the first LEAN_TRIES tries). The moves-per-freed-GPU limit is not a row
    while the solver looks for the first assignment: with it, an assignment freeing one GPU more
    may make only max_moves_per_gpu moves, and HiGHS needed 3,000-6,000 steps to find the one
    such on some openb subsets, where without it the first (a reshuffle of most movable pods)
    comes in about 20 and the second solve cuts it down to a short plan in about 25 more. The
    limit is checked on each ordered, pruned plan, and is a row for the re-solves.

    The assignment found is tried first; without an order (or over the limit) it is cut off and
    HiGHS solves again, with the gain fixed; then one GPU less, down to one more than the floor.
    Not the fewest moves: those assignments are the ones that swap pods between full nodes, which
    no order can make (on the openb subsets most had none); the moves an ordered plan did not
    need are dropped afterwards (_prune). Every solve spends from the plan's `work`; when it runs
    out mid-solve, the solve's incumbent (the best assignment found) is tried as it is."""

    def __init__(self, h: Any, model: ExactModel, started: float, work: WorkLimit) -> None:
        import numpy as np

        self.h, self.model, self.started, self.work = h, model, started, work
        self.first: dict[int, int] = {}
        self.retries = 0
        self.capped = False  # the moves-per-freed-GPU row is in the model
        n_g = len(model.counted)
        self.idx_away = np.array([model.x0 + j for j in model.away], dtype=np.int32)
        # Fewest moves that must wait for others: a move whose target GPU or node has no room for
        # it now needs pods to leave first, and cycles of such moves are what leave an assignment
        # without an order. Other moves cost a little (MOVE_COST), for shorter plans, for the first
        # LEAN_TRIES tries; then nothing, which lets the solver add moves that make room.
        self.waits = np.array([1.0 if _waits(model.engine, *model.cols[j]) else 0.0 for j in model.away])
        # A GPU in use outweighs the second objective, which is at most 1 per mover (one column of
        # each pod ends in the solution): solving for both at once costs HiGHS about what the
        # first alone did, where solving for the second with the gain fixed took three times that.
        self.weight = float(len(model.movers) + 1)
        h.changeColsCost(n_g, np.arange(n_g, dtype=np.int32), np.full(n_g, self.weight))

    def find(self, floor: int) -> str | None:
        """Solve for the first assignment freeing more than `floor`: None when there is one (in
        the model's solution), else "infeasible" (proven: none exists) or "stopped" (the work or
        the node limit ran out first). The row asking for it stays for every later solve."""
        import highspy
        import numpy as np

        h = self.h
        self._ask_gain(floor + 1)
        h.changeColsCost(len(self.idx_away), self.idx_away, np.zeros(len(self.idx_away)))
        h.setOptionValue("mip_max_improving_sols", 1)
        self.work.run(h)
        h.setOptionValue("mip_max_improving_sols", _UNLIMITED)
        if _has_solution(h):
            return None
        return "infeasible" if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible else "stopped"

    def lexicographic(self, seed: Sequence[Move]) -> None:
        """One solve for the lexicographic objective with the moves-per-freed-GPU row from the
        start, from `seed`'s final places (the greedy plan's)."""
        import numpy as np

        self._cap_moves()
        self.h.changeColsCost(len(self.idx_away), self.idx_away, np.where(self.waits > 0, 1.0, MOVE_COST))
        _seed(self.h, self.model, seed)
        self.work.run(self.h)

    def improve(self) -> None:
        """From the assignment :meth:`find` found, a solve for the lexicographic objective (without
        the moves-per-freed-GPU row, which that assignment may break)."""
        import numpy as np

        h = self.h
        h.changeColsCost(len(self.idx_away), self.idx_away, np.where(self.waits > 0, 1.0, MOVE_COST))
        if self.work.left > 0:
            h.setSolution(h.getSolution())
            self.work.run(h)

    def result(self) -> tuple[int, bool]:
        """The GPUs the best assignment found frees, and whether the solver proved that none frees
        more."""
        h, model = self.h, self.model
        n_g = len(model.counted)
        used = round(sum(h.getSolution().col_value[:n_g]))
        # Proven: no assignment keeps fewer GPUs in use. Any such one would cost at most
        # weight * (used - 1) + weight - 1 (the second objective stays under the weight).
        proven = h.getInfo().mip_dual_bound > self.weight * used - 1 + 1e-6
        return n_g - used - model.free_now, proven

    def _cap_moves(self) -> None:
        """The row: moves <= max_moves_per_gpu * (GPUs freed), for the re-solves."""
        import numpy as np

        if self.capped:
            return
        self.capped = True
        h, model = self.h, self.model
        n_g = len(model.counted)
        k = float(model.options.max_moves_per_gpu)
        idx = np.concatenate([self.idx_away, np.arange(n_g, dtype=np.int32)])
        coef = np.concatenate([np.ones(len(self.idx_away)), np.full(n_g, k)])
        h.addRow(-h.getInfinity(), k * (n_g - model.free_now), len(idx), idx, coef)

    def run(self, floor: int, best: int, proven: bool) -> ExactOutcome:
        import numpy as np

        self.first = self.model.assignment(self.h)
        moves = self._try(self.first)
        if moves is not None:
            return self._found(moves, floor, best, proven)
        self._failed()
        self._cap_moves()
        for gain in range(best, floor, -1):
            row_gain = self._ask_gain(gain)
            if gain == best:
                _no_good(self.h, self.model, self.first)
            moves = self._ordered_at(gain)
            if moves is not None:
                return self._found(moves, floor, best, proven)
            if self.work.left == 0:
                break
            self.h.deleteRows(1, np.array([row_gain], dtype=np.int32))
            if self.retries > MAX_RETRIES:
                break
        if self.work.hit:
            return self._outcome(None, best, proven, _gave_up(self.work, self.model.options, floor, best))
        why = f"the solver's assignments freeing more than {floor} had no valid order"
        return self._outcome(None, best, proven, why)

    def _found(self, moves: list[Move], floor: int, best: int, proven: bool) -> ExactOutcome:
        """The outcome of an ordered plan (the engine holds its final places)."""
        gain = _freed(self.model.engine, self.model)
        return self._outcome(moves, gain, proven, _found_note(self.work, floor, gain, max(best, gain), proven))

    def _failed(self) -> None:
        """One more assignment without an order: after LEAN_TRIES, moves that need not wait cost
        nothing (more moves, more room made)."""
        self.retries += 1
        if self.retries == LEAN_TRIES:
            self.h.changeColsCost(len(self.idx_away), self.idx_away, self.waits)

    def _outcome(self, moves: list[Move] | None, gain: int, proven: bool, why: str) -> ExactOutcome:
        seconds = time.perf_counter() - self.started
        return ExactOutcome(moves, gain, proven, self.retries, seconds, why, self.work)

    def _ask_gain(self, gain: int) -> int:
        """A row: `gain` GPUs freed at least; its index."""
        import numpy as np

        h, model = self.h, self.model
        n_g = len(model.counted)
        bins = n_g - model.free_now - gain
        row_gain = int(h.getNumRow())
        h.addRow(-h.getInfinity(), float(bins), n_g, np.arange(n_g, dtype=np.int32), np.ones(n_g))
        return row_gain

    def _ordered_at(self, gain: int) -> list[Move] | None:
        """Solve, and while the solution has no order cut it off and solve again: the pruned plan,
        or None when the solver finds nothing more, the retries are spent or the work is."""
        h = self.h
        while self.retries <= MAX_RETRIES and self.work.left > 0:
            self.work.run(h)
            if not _has_solution(h):
                break
            chosen = self.model.assignment(h)
            moves = self._try(chosen)
            if moves is not None:
                return moves
            self._failed()
            _no_good(h, self.model, chosen)
        return None

    def _try(self, chosen: dict[int, int]) -> list[Move] | None:
        """`chosen`'s moves ordered and pruned, or None if they have no order."""
        engine, model = self.model.engine, self.model
        moves = _ordered(engine, chosen)
        if moves is not None:
            moves = _prune(engine, model, moves)
            if len(moves) > model.options.max_moves_per_gpu * _freed(engine, model):
                engine.restore(list(engine.p_origin), [0] * len(engine.p_alloc))
                return None
        return moves


def _waits(engine: Engine, p: int, g: int) -> bool:
    """Pod p cannot go to GPU g before some pod leaves g or its node (as things stand now)."""
    e = engine
    req = e.p_req[p]
    assert req is not None
    src, dst = e.g_node[e.p_origin[p][0]], e.g_node[g]
    if src != dst and dst in e.n_free and not e.n_free[dst].covers(e.p_res[p]):
        return True
    return gpu_fit_reason(req, e.g_dev[g], e.g_use[g], e.p_alloc[p].request.selectors, e.g_cordoned[g]) is not None


def _freed(engine: Engine, model: ExactModel) -> int:
    return sum(1 for g in model.counted if not engine.g_pods[g]) - model.free_now


def _prune(engine: Engine, model: ExactModel, moves: list[Move]) -> list[Move]:
    """Send back home, last move first, every pod whose move the plan does not need: as many GPUs
    freed and still an order. The engine is left holding the returned plan's places."""
    gain = _freed(engine, model)
    where = {engine.p_alloc[p].key: p for p in model.movers}
    for m in reversed(moves):
        p = where[m.pod]
        home = engine.p_origin[p]
        if not engine.fits_back(p, home):
            continue
        record = engine.apply(p, home)
        if _freed(engine, model) >= gain:
            shorter = _sequenced(engine)
            if shorter is not None:
                moves = shorter
                continue
        engine.undo(record)
    return moves


def _bins_cut(engine: Engine, options: PlanOptions, model: ExactModel, work: WorkLimit) -> int | None:
    """Fewest GPUs in use, by the pattern model: a valid cut that lets HiGHS prove in a second.
    Its solve spends at most CUT_WORK of the plan's work."""
    p = pool(engine.state, options)
    if p.bins != len(model.counted):
        return None
    bound = pattern_bound(engine.state, options, work=work, work_cap=CUT_WORK)
    if bound is None or not bound.proven:
        return None
    return p.bins - bound.max_free


def _seed(h: Any, model: ExactModel, seed: Sequence[Move]) -> None:
    """Start from the greedy plan's final places (changes how fast, never what, HiGHS finds)."""
    e = model.engine
    where = {e.p_alloc[p].key: p for p in model.movers}
    uuid_gid = {e.g_dev[g].uuid: g for g in model.counted}
    chosen = {}
    for m in seed:
        p = where.get(m.pod)
        if p is not None and len(m.to_uuids) == 1 and m.to_uuids[0] in uuid_gid:
            chosen[p] = uuid_gid[m.to_uuids[0]]
    _seed_assignment(h, model, chosen)


def _seed_assignment(h: Any, model: ExactModel, chosen: dict[int, int]) -> None:
    import numpy as np

    e = model.engine
    values = np.zeros(model.x0 + len(model.cols))
    in_use = set()
    for j, (p, g) in enumerate(model.cols):
        if chosen.get(p, e.p_origin[p][0]) == g:
            values[model.x0 + j] = 1.0
            in_use.add(g)
    for g, i in model.yi.items():
        if g in in_use or model.base[g].used > 0:
            values[i] = 1.0
    h.setSolution(len(values), np.arange(len(values), dtype=np.int32), values)


def _no_good(h: Any, model: ExactModel, chosen: dict[int, int]) -> None:
    """Cut off exactly this assignment (every mover where it puts it, the other pods at home).
    Cutting off more (every assignment making these moves, or sending these pods to these nodes)
    found fewer plans on the openb subsets: an assignment that adds moves often has an order."""
    import numpy as np

    idx = [model.x0 + j for j, (p, g) in enumerate(model.cols) if chosen.get(p, model.engine.p_origin[p][0]) == g]
    bound = float(len(model.movers) - 1)
    h.addRow(-h.getInfinity(), bound, len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))


def _ordered(engine: Engine, chosen: dict[int, int]) -> list[Move] | None:
    """The moves of `chosen` in an order where each is valid when made, or None."""
    for p in sorted(chosen):
        engine.apply(p, (chosen[p],))
    moves = _sequenced(engine)
    if moves is None:
        engine.restore(list(engine.p_origin), [0] * len(engine.p_alloc))
    return moves


def _sequenced(engine: Engine) -> list[Move] | None:
    """The engine's moves in its own order (cheapest frees first), or else any order found by
    search; None if neither exists."""
    moves = sequence(engine)
    if moves is None:
        pending = [p for p in range(len(engine.p_alloc)) if engine.moved(p)]
        order = _search_order(engine, pending)
        if order is not None:
            final_empty = {g for g in range(len(engine.g_dev)) if engine.g_counts[g] and not engine.g_pods[g]}
            moves = moves_of(engine, order, final_empty)
    return moves


def _search_order(engine: Engine, pending: list[int]) -> list[int] | None:
    """Exhaustive over the sets of moves made (each set once: its state is the same whatever
    order made it), at most ORDER_BUDGET sets."""
    use, pods, room = start(engine, pending)
    full = (1 << len(pending)) - 1
    dead: set[int] = set()
    looked = 0
    order: list[int] = []

    def search(done: int) -> bool | None:
        nonlocal looked
        if done == full:
            return True
        if done in dead:
            return False
        looked += 1
        if looked > ORDER_BUDGET:
            return None
        for i, p in enumerate(pending):
            if done >> i & 1 or not fits_now(engine, p, use, room):
                continue
            step(engine, p, use, pods, room)
            order.append(p)
            found = search(done | 1 << i)
            if found is not False:
                return found
            order.pop()
            step(engine, p, use, pods, room, back=True)
        dead.add(done)
        return False

    return list(order) if search(0) else None


__all__ = [
    "ABSENT",
    "AUTO_WORK",
    "EXACT_AUTO_PAIRS",
    "EXACT_MAX_COLUMNS",
    "EXACT_MAX_PAIRS",
    "EXACT_WORK",
    "SMALL_MODEL_COLUMNS",
    "ExactOutcome",
    "available",
    "solve",
    "work_budget",
]
