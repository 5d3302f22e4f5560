"""The fewest moves after which one pod fits, as a MILP (HiGHS): the yardstick for
:func:`~hami_place_core.planning.room.make_room` on small states.

Over the planner's engine (the same movable pods, node constraints and budgets): binaries v[p,n]
(movable pod p ends on node n) and x[p,g] (on GPU g; a pod takes ``nums`` GPUs of its node), w[n]
(the new pod goes to node n) and z[g] (it takes GPU g, ``nums`` of them on its node); per GPU the
slots, memory and compute of what ends there (with the pods that stay), an exclusive request or
pod alone on its GPU; per node its CPU, memory and pod slots (kube-scheduler's NodeResourcesFit:
a node may keep today's load, and takes the new pod only if what is left covers it); per workload
its disruption budget, and ``max_moves``. It minimises the pods away from their GPUs.

The MILP ignores the order of moves: its optimum may be an assignment no order makes valid (two
full nodes trading pods, each waiting for the other's CPU). Each optimum is checked by a search
over the sets of moves made; one without an order is cut off (exactly that assignment) and HiGHS
solves again, so the answer is the fewest moves of an assignment that has an order, and
``unordered`` keeps the first optimum (a lower bound on any plan). HAMi's rule that a 0-core
request does not fit a GPU whose cores are all used is not modelled (a relaxation).

HiGHS (``highspy``, with numpy) is imported only when the model is built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hami_place_core.fit import gpu_fit_reason
from hami_place_core.node_resources import Resources
from hami_place_core.planning.constraints import node_refusal, replacement_state
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.highs import new_highs, scaled
from hami_place_core.planning.model import PlanOptions
from hami_place_core.planning.room import RoomRequest
from hami_place_core.state import ClusterState

# An assignment the MILP finds may have no order in which every move is valid when made (pods of
# two full nodes trading places): it is cut off and HiGHS solves again, at most this many times.
MAX_CUTS = 30
ORDER_STATES = 20_000  # sets of moves made that the order search may visit per assignment


@dataclass(frozen=True)
class RoomOptimum:
    moves: int | None  # fewest moves of an assignment with a valid order; None: none found
    proven: bool  # every solve optimal (or proven infeasible), and the order search settled
    node: str | None
    seconds: float
    columns: int
    unordered: int | None = None  # the MILP's first optimum, order ignored (a lower bound)
    cuts: int = 0  # assignments cut off for having no valid order


def fewest_moves(
    state: ClusterState, request: RoomRequest, options: PlanOptions | None = None, time_limit: float = 120.0
) -> RoomOptimum:
    """The fewest pods that must move (ignoring order) for `request` to fit, proven optimal within
    `time_limit` seconds (a safety cap; the result says whether it was proven)."""
    import highspy
    import numpy as np

    started = time.perf_counter()
    options = options or PlanOptions()
    e = Engine(replacement_state(state), options)
    m = _Model(e, request)
    h = new_highs()
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 0.0)
    m.build(h, options)
    unordered: int | None = None
    proven = True
    for cuts in range(MAX_CUTS + 1):
        left = time_limit - (time.perf_counter() - started)
        if left <= 0:
            return RoomOptimum(None, False, None, time.perf_counter() - started, m.n, unordered, cuts)
        h.setOptionValue("time_limit", float(left))
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return RoomOptimum(None, proven, None, time.perf_counter() - started, m.n, unordered, cuts)
        if int(h.getInfo().primal_solution_status) != 2:  # no feasible solution found in time
            return RoomOptimum(None, False, None, time.perf_counter() - started, m.n, unordered, cuts)
        proven = proven and status == highspy.HighsModelStatus.kOptimal
        sol = np.array(h.getSolution().col_value)
        node = next((n for n, i in m.w.items() if sol[i] > 0.5), None)
        moves = round(float(sum(sol[i] for i in m.moved.values())))
        unordered = moves if unordered is None else unordered
        assignment = m.assignment(sol)
        settled = _orderable(e, assignment)
        if settled:
            return RoomOptimum(moves, proven, node, time.perf_counter() - started, m.n, unordered, cuts)
        proven = proven and settled is not None
        m.cut(h, assignment)
    return RoomOptimum(None, False, None, time.perf_counter() - started, m.n, unordered, MAX_CUTS)


def _orderable(e: Engine, assignment: dict[int, tuple[int, ...]]) -> bool | None:
    """Whether the moves (pod -> its final GPUs) have an order in which each is valid when made
    (HAMi's Fit on its GPUs, its node's CPU, memory and pod slot); None if the search gave up."""
    return _Order(e, assignment).search(frozenset())


class _Order:
    """A depth-first search over the sets of moves made, each set seen once."""

    def __init__(self, e: Engine, assignment: dict[int, tuple[int, ...]]) -> None:
        self.e = e
        self.assignment = assignment
        self.use = {g: e.g_use[g].copy() for p, gs in assignment.items() for g in (*e.p_origin[p], *gs)}
        self.room = dict(e.n_free)
        self.pods = sorted(assignment)
        self.seen: set[frozenset[int]] = set()

    def shift(self, p: int, src: tuple[int, ...], dst: tuple[int, ...]) -> None:
        e, req = self.e, self.e.p_req[p]
        assert req is not None
        for g, sign in [*((g, -1) for g in src), *((g, 1) for g in dst)]:
            u, d = self.use[g], e.g_dev[g]
            u.used += sign
            u.usedmem += sign * req.memory_on(d.devmem)
            u.usedcores += sign * req.coresreq
        a, b = e.g_node[src[0]], e.g_node[dst[0]]
        if a != b:
            if a in self.room:
                self.room[a] = self.room[a] + e.p_res[p]
            if b in self.room:
                self.room[b] = self.room[b] - e.p_res[p]

    def ready(self, p: int) -> bool:
        e = self.e
        req, dst, src = e.p_req[p], self.assignment[p], e.p_origin[p]
        assert req is not None
        node = e.g_node[dst[0]]
        free = self.room.get(node)
        if free is not None and node != e.g_node[src[0]] and not free.covers(e.p_res[p]):
            return False
        sel = e.p_alloc[p].request.selectors
        for g in dst:
            u = self.use[g].copy()
            if g in src:
                u.used -= 1
                u.usedmem -= req.memory_on(e.g_dev[g].devmem)
                u.usedcores -= req.coresreq
            if gpu_fit_reason(req, e.g_dev[g], u, sel, e.g_cordoned[g]) is not None:
                return False
        return True

    def search(self, done: frozenset[int]) -> bool | None:
        if len(done) == len(self.pods):
            return True
        if done in self.seen:
            return False
        if len(self.seen) >= ORDER_STATES:
            return None
        self.seen.add(done)
        gave_up = False
        for p in self.pods:
            if p in done or not self.ready(p):
                continue
            src, dst = self.e.p_origin[p], self.assignment[p]
            self.shift(p, src, dst)
            found = self.search(done | {p})
            self.shift(p, dst, src)
            if found:
                return True
            gave_up = gave_up or found is None
        return None if gave_up else False


class _Model:
    def __init__(self, e: Engine, request: RoomRequest) -> None:
        self.e = e
        self.request = request
        self.n = 0  # columns
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.cost: list[float] = []
        self.movers = [p for p in range(len(e.p_alloc)) if e.can_move(p) and e.p_req[p] is not None]
        mover_set = set(self.movers)
        # What the pods that stay leave of each GPU and node.
        self.base = [u.copy() for u in e.g_use]
        self.room: dict[str, Resources] = dict(e.n_free)
        for p in self.movers:
            req = e.p_req[p]
            assert req is not None
            for g in e.p_origin[p]:
                self.base[g].used -= 1
                self.base[g].usedmem -= req.memory_on(e.g_dev[g].devmem)
                self.base[g].usedcores -= req.coresreq
            node = e.g_node[e.p_origin[p][0]]
            if node in self.room:
                self.room[node] = self.room[node] + e.p_res[p]
        self.home_res: dict[str, Resources] = {}
        for p in mover_set:
            node = e.g_node[e.p_origin[p][0]]
            self.home_res[node] = self.home_res.get(node, Resources()) + e.p_res[p]
        self.v: dict[tuple[int, str], int] = {}
        self.x: dict[tuple[int, int], int] = {}
        self.w: dict[str, int] = {}
        self.z: dict[int, int] = {}
        self.moved: dict[int, int] = {}

    def assignment(self, sol: Any) -> dict[int, tuple[int, ...]]:
        """The pods the solution moves, each with the GPUs it ends on."""
        out: dict[int, list[int]] = {}
        for (p, g), i in self.x.items():
            if sol[i] > 0.5 and sol[self.moved[p]] > 0.5:
                out.setdefault(p, []).append(g)
        return {p: tuple(sorted(gs)) for p, gs in out.items()}

    def cut(self, h: Any, assignment: dict[int, tuple[int, ...]]) -> None:
        """Cut off exactly this assignment: the same moves and no other pod moving."""
        import numpy as np

        terms = [(self.x[(p, g)], 1.0) for p, gs in assignment.items() for g in gs]
        terms += [(i, -1.0) for p, i in self.moved.items() if p not in assignment]
        size = sum(len(gs) for gs in assignment.values())
        idx = np.array([i for i, _ in terms], dtype=np.int32)
        h.addRow(-h.getInfinity(), float(size - 1), len(terms), idx, np.array([c for _, c in terms]))

    def col(self, hi: float = 1.0, cost: float = 0.0) -> int:
        self.lo.append(0.0)
        self.hi.append(hi)
        self.cost.append(cost)
        self.n += 1
        return self.n - 1

    def _columns(self) -> None:
        e = self.e
        for p in self.movers:
            req = e.p_req[p]
            assert req is not None
            nodes = e.eligible_nodes(p)
            sel = e.p_alloc[p].request.selectors
            home_node = e.g_node[e.p_origin[p][0]]
            for name, gids in sorted(e.node_gids.items()):
                if name != home_node and nodes is not None and name not in nodes:
                    continue
                gs = [
                    g
                    for g in gids
                    if g in e.p_origin[p]
                    or (
                        e.g_counts[g]
                        and (e.p_plain[p] or e.allowed(p, e.g_dev[g]))
                        and gpu_fit_reason(req, e.g_dev[g], self.base[g], sel, e.g_cordoned[g]) is None
                    )
                ]
                if len(gs) < req.nums:
                    continue
                self.v[(p, name)] = self.col()
                for g in gs:
                    self.x[(p, g)] = self.col()
            self.moved[p] = self.col(cost=1.0)
        probe = self.request.as_allocation()
        req, sel = self.request.gpu, self.request.selectors
        for name, gids in sorted(e.node_gids.items()):
            if node_refusal(probe, e.state.nodes[name]) is not None:
                continue
            gs = [
                g
                for g in gids
                if e.g_counts[g] and gpu_fit_reason(req, e.g_dev[g], self.base[g], sel, e.g_cordoned[g]) is None
            ]
            if len(gs) < req.nums:
                continue
            self.w[name] = self.col()
            for g in gs:
                self.z[g] = self.col()

    def build(self, h: Any, options: PlanOptions) -> None:
        import highspy
        import numpy as np

        self._columns()
        e, inf = self.e, h.getInfinity()
        h.addVars(self.n, np.array(self.lo), np.array(self.hi))
        h.changeColsCost(self.n, np.arange(self.n, dtype=np.int32), np.array(self.cost))
        relaxed = set(self.moved.values())  # continuous, and exactly 1 - x by the rows below
        ints = [i for i in range(self.n) if i not in relaxed]
        h.changeColsIntegrality(
            len(ints), np.array(ints, dtype=np.int32), np.full(len(ints), highspy.HighsVarType.kInteger)
        )

        def row(lo: float, hi: float, terms: list[tuple[int, float]]) -> None:
            if terms:
                idx = np.array([i for i, _ in terms], dtype=np.int32)
                h.addRow(lo, hi, len(terms), idx, np.array([c for _, c in terms]))

        by_pod_node: dict[int, list[tuple[str, int]]] = {}
        for (p, name), i in self.v.items():
            by_pod_node.setdefault(p, []).append((name, i))
        by_gpu: dict[int, list[tuple[int, int]]] = {}
        for (p, g), i in self.x.items():
            by_gpu.setdefault(g, []).append((p, i))
        for p in self.movers:
            req = e.p_req[p]
            assert req is not None
            row(1, 1, [(i, 1.0) for _, i in by_pod_node.get(p, [])])
            for name, i in by_pod_node.get(p, []):
                xs = [(self.x[(p, g)], 1.0) for g in e.node_gids[name] if (p, g) in self.x]
                row(0, 0, [*xs, (i, -float(req.nums))])
            for g in e.p_origin[p]:  # moved[p] >= 1 - x[p, g] for each GPU it holds now
                row(1, inf, [(self.moved[p], 1.0), (self.x[(p, g)], 1.0)])
            # and moved[p] = 0 when it keeps them all (exact, for the cuts of unordered assignments)
            origin = e.p_origin[p]
            row(-inf, float(len(origin)), [(self.moved[p], 1.0), *((self.x[(p, g)], 1.0) for g in origin)])
        row(1, 1, [(i, 1.0) for i in self.w.values()])
        for name, i in self.w.items():
            zs = [(self.z[g], 1.0) for g in e.node_gids[name] if g in self.z]
            row(0, 0, [*zs, (i, -float(self.request.gpu.nums))])
        self._gpu_rows(row, by_gpu)
        self._node_rows(row, inf)
        self._limit_rows(row, options)

    def _gpu_rows(self, row: Any, by_gpu: dict[int, list[tuple[int, int]]]) -> None:
        e, req = self.e, self.request.gpu
        for g in range(len(e.g_dev)):
            pods = by_gpu.get(g, [])
            zi = self.z.get(g)
            if not pods and zi is None:
                continue
            d, b = e.g_dev[g], self.base[g]
            for k, cap in ((0, d.count - b.used), (1, d.devmem - b.usedmem), (2, d.devcore - b.usedcores)):
                terms = []
                for p, i in pods:
                    r = e.p_req[p]
                    assert r is not None
                    terms.append((i, 1.0 if k == 0 else float(r.memory_on(d.devmem) if k == 1 else r.coresreq)))
                if zi is not None:
                    terms.append((zi, 1.0 if k == 0 else float(req.memory_on(d.devmem) if k == 1 else req.coresreq)))
                row(-1e30, float(cap), terms)
            # HAMi: an exclusive (100% cores) request or pod needs a GPU no other pod uses.
            exclusive = [i for p, i in pods if (r := e.p_req[p]) is not None and r.coresreq >= 100]
            if zi is not None and d.devcore == 100 and req.coresreq >= 100:
                exclusive.append(zi)
            if exclusive and d.devcore == 100:
                every = [i for _, i in pods] + ([zi] if zi is not None else [])
                # total on g <= count - (count - 1 - fixed) * [an exclusive one is there]
                slack = d.count - 1 - b.used
                row(
                    -1e30,
                    float(d.count - b.used),
                    [*((i, 1.0) for i in every), *((i, float(slack)) for i in exclusive)],
                )
                if b.used > 0:
                    for i in exclusive:
                        row(0, 0, [(i, 1.0)])

    def _node_rows(self, row: Any, inf: float) -> None:
        e, need = self.e, self.request.resources
        for name in sorted(e.node_gids):
            if name not in self.room:
                continue
            terms_by_dim: list[list[tuple[int, float]]] = [[], [], []]
            for (p, n), i in self.v.items():
                if n == name:
                    for dim, c in enumerate(scaled(e.p_res[p])):
                        terms_by_dim[dim].append((i, c))
            free = scaled(self.room[name])
            home = scaled(self.home_res.get(name, Resources()))
            asks = scaled(need)
            wi = self.w.get(name)
            for dim in range(3):
                terms = terms_by_dim[dim]
                row(-inf, max(free[dim], home[dim]), terms)  # a node may keep today's load
                if wi is not None:
                    big = max(0.0, home[dim] - free[dim]) + asks[dim]
                    row(-inf, free[dim] + big, [*terms, (wi, asks[dim] + big)])

    def _limit_rows(self, row: Any, options: PlanOptions) -> None:
        e = self.e
        by_wl: dict[str, list[int]] = {}
        for p, i in self.moved.items():
            wl = e.p_workload[p]
            if wl is not None:
                by_wl.setdefault(wl, []).append(i)
        for wl, cols in sorted(by_wl.items()):
            left = options.limit_of(wl) - options.workload_moves_used.get(wl, 0)
            if left < len(cols):
                row(-1e30, float(left), [(i, 1.0) for i in cols])
        if options.max_moves is not None:
            row(-1e30, float(options.max_moves), [(i, 1.0) for i in self.moved.values()])
