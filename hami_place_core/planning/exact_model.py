"""The exact planner's MILP over one engine's state: where every movable pod ends.

Binaries x[p,g] (pod p ends on GPU g, for every GPU where p alone passes HAMi's Fit and node
constraints, plus its own) and y[g] (GPU g stays in use), with each GPU's slots, memory and
compute, each node's CPU, memory and pod slots, per-workload disruption budgets and
``max_moves`` as rows. :mod:`~hami_place_core.planning.exact` sets the objectives and solves.
"""

from __future__ import annotations

from typing import Any

from hami_place_core.fit import gpu_fit_reason
from hami_place_core.node_resources import Resources
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.highs import new_highs, scaled
from hami_place_core.planning.model import PlanOptions

# Branch-and-bound nodes per HiGHS solve: a work limit, so the plan does not depend on the
# machine's speed (a time limit would). On the openb 16-node subsets 2,000 found no more plans
# than 1,000, in up to twice the time.
NODE_LIMIT = 1_000


class ExactModel:
    """The MILP of one engine's state (the engine holds every pod at its original place)."""

    def __init__(self, engine: Engine, options: PlanOptions) -> None:
        self.engine = e = engine
        self.options = options
        self.counted = [g for g in range(len(e.g_dev)) if e.g_counts[g]]
        self.movers = [
            p for p in range(len(e.p_alloc)) if e.p_static[p] and len(e.p_origin[p]) == 1 and self._on_counted(p)
        ]
        mover_set = set(self.movers)
        # What the pods that stay leave of each GPU and node.
        self.base = [u.copy() for u in e.g_use]
        for p in self.movers:
            req = e.p_req[p]
            assert req is not None
            (g,) = e.p_origin[p]
            self.base[g].used -= 1
            self.base[g].usedmem -= req.memory_on(e.g_dev[g].devmem)
            self.base[g].usedcores -= req.coresreq
        self.room: dict[str, Resources] = dict(e.n_free)
        for p in mover_set:
            node = e.g_node[e.p_origin[p][0]]
            if node in self.room:
                self.room[node] = self.room[node] + e.p_res[p]
        # Columns: (pod, GPU); a pod's own GPU is always one.
        self.cols: list[tuple[int, int]] = []
        for p in self.movers:
            req = e.p_req[p]
            assert req is not None
            (home,) = e.p_origin[p]
            nodes = e.eligible_nodes(p)
            sel = e.p_alloc[p].request.selectors
            for g in self.counted:
                if g != home:
                    node = e.g_node[g]
                    if nodes is not None and node not in nodes:
                        continue
                    if not e.p_plain[p] and not e.allowed(p, e.g_dev[g]):
                        continue
                    if node != e.g_node[home] and node in self.room and not self.room[node].covers(e.p_res[p]):
                        continue
                    if gpu_fit_reason(req, e.g_dev[g], self.base[g], sel, e.g_cordoned[g]) is not None:
                        continue
                self.cols.append((p, g))
        self.free_now = sum(1 for g in self.counted if e.g_use[g].used == 0)

    def _on_counted(self, p: int) -> bool:
        return self.engine.g_counts[self.engine.p_origin[p][0]]

    def home(self, j: int) -> bool:
        p, g = self.cols[j]
        return self.engine.p_origin[p][0] == g

    def build(self, cut_bins: int | None) -> Any:
        """The model with every row but an objective: x[p,g] (pod p ends on GPU g) after the
        y[g] (GPU g stays in use); `cut_bins`, if known, the fewest GPUs that can stay in use."""
        import highspy
        import numpy as np

        e = self.engine
        h = new_highs()
        # Deterministic: one thread, a fixed seed, and work limits rather than time limits.
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("mip_max_nodes", NODE_LIMIT)
        inf = h.getInfinity()
        n_g = len(self.counted)
        self.yi = {g: i for i, g in enumerate(self.counted)}
        fixed_in_use = [1.0 if self.base[g].used > 0 else 0.0 for g in self.counted]
        h.addVars(n_g, np.array(fixed_in_use), np.ones(n_g))
        self.x0 = x0 = n_g
        n_x = len(self.cols)
        h.addVars(n_x, np.zeros(n_x), np.ones(n_x))
        integer = highspy.HighsVarType.kInteger
        h.changeColsIntegrality(n_g + n_x, np.arange(n_g + n_x, dtype=np.int32), np.full(n_g + n_x, integer))
        by_pod: dict[int, list[int]] = {}
        by_gpu: dict[int, list[int]] = {}
        by_node: dict[str, list[int]] = {}
        for j, (p, g) in enumerate(self.cols):
            by_pod.setdefault(p, []).append(j)
            by_gpu.setdefault(g, []).append(j)
            by_node.setdefault(e.g_node[g], []).append(j)
        for js in by_pod.values():
            h.addRow(1, 1, len(js), np.array([x0 + j for j in js], dtype=np.int32), np.ones(len(js)))
        self._gpu_rows(h, by_gpu)
        self._node_rows(h, by_node)
        self.away = [j for j in range(n_x) if not self.home(j)]
        self._limit_rows(h)
        if cut_bins is not None:
            h.addRow(float(cut_bins), inf, n_g, np.arange(n_g, dtype=np.int32), np.ones(n_g))
        return h

    def _gpu_rows(self, h: Any, by_gpu: dict[int, list[int]]) -> None:
        """Per GPU, the slots, memory and compute of the pods ending there fit what the pods that
        stay leave, and only on a GPU in use."""
        import numpy as np

        e, x0, inf = self.engine, self.x0, h.getInfinity()
        for g, js in by_gpu.items():
            d, b = e.g_dev[g], self.base[g]
            for k, cap in ((0, d.count - b.used), (1, d.devmem - b.usedmem), (2, d.devcore - b.usedcores)):
                coef = []
                for j in js:
                    req = e.p_req[self.cols[j][0]]
                    assert req is not None
                    coef.append(1.0 if k == 0 else float(req.memory_on(d.devmem) if k == 1 else req.coresreq))
                idx = [x0 + j for j in js] + [self.yi[g]]
                h.addRow(-inf, 0, len(idx), np.array(idx, dtype=np.int32), np.array([*coef, -float(cap)]))
            for j in js:  # x[p,g] <= y[g]: tightens the LP relaxation
                h.addRow(-inf, 0, 2, np.array([x0 + j, self.yi[g]], dtype=np.int32), np.array([1.0, -1.0]))

    def _node_rows(self, h: Any, by_node: dict[str, list[int]]) -> None:
        """kube-scheduler's NodeResourcesFit: the movers ending on a node fit what the others leave
        (a node may always keep today's load, even when it is overcommitted)."""
        import numpy as np

        e, x0, inf = self.engine, self.x0, h.getInfinity()
        for name, js in sorted(by_node.items()):
            if name not in self.room:
                continue
            # Today's load of the movers at home here: each pod once, however many of this node's
            # GPUs it has columns on. (Summed over columns, as until this was found, a pod with
            # columns on all 8 of its node's GPUs counted 8 times: the row let pods into nodes
            # without room, and such assignments have no order.)
            at_home = {p for p, _ in (self.cols[j] for j in js) if e.g_node[e.p_origin[p][0]] == name}
            for dim, free in enumerate(scaled(self.room[name])):
                need = np.array([scaled(e.p_res[self.cols[j][0]])[dim] for j in js])
                home = sum(scaled(e.p_res[p])[dim] for p in sorted(at_home))
                limit = float(max(free, home))
                if need.sum() <= limit:
                    continue
                nz = np.flatnonzero(need)
                h.addRow(-inf, limit, len(nz), np.array([x0 + js[i] for i in nz], dtype=np.int32), need[nz])

    def _limit_rows(self, h: Any) -> None:
        """Disruption budgets per workload, and the plan's move limit."""
        import numpy as np

        e, x0, inf, away = self.engine, self.x0, h.getInfinity(), self.away
        by_workload: dict[str, list[int]] = {}
        for j in away:
            wl = e.p_workload[self.cols[j][0]]
            if wl is not None:
                by_workload.setdefault(wl, []).append(j)
        for wl, js in sorted(by_workload.items()):
            left = self.options.limit_of(wl) - self.options.workload_moves_used.get(wl, 0)
            if left < len({self.cols[j][0] for j in js}):
                h.addRow(-inf, float(left), len(js), np.array([x0 + j for j in js], dtype=np.int32), np.ones(len(js)))
        if self.options.max_moves is not None:
            h.addRow(
                -inf, float(self.options.max_moves), len(away), np.array([x0 + j for j in away], dtype=np.int32),
                np.ones(len(away)),
            )  # fmt: skip

    def assignment(self, h: Any) -> dict[int, int]:
        """Pod -> the GPU it ends on, for the pods the solution moves."""
        values = h.getSolution().col_value
        return {self.cols[j][0]: self.cols[j][1] for j in self.away if values[self.x0 + j] > 0.5}
