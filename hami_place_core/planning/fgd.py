"""FGD per node over the engine's arrays, for the objectives' accept tests: the planner asks for the
FGD of the few nodes a tentative change touches, thousands of times per plan, so it is computed
from the engine's GPU usage as it stands, with fit outcomes cached per GPU state (a
:class:`~hami_place_core.fragmentation.FitTable`). The formula itself is
:func:`hami_place_core.fragmentation.node_fgd`, the one the cluster metrics use.
"""

from __future__ import annotations

from hami_place_core.fragmentation import FitTable, WorkloadMix, free_share, node_fgd
from hami_place_core.planning.constraints import node_schedulable
from hami_place_core.planning.engine import Engine


class EngineFgd:
    """FGD of one node from the engine's arrays, with fit outcomes cached per GPU state."""

    def __init__(self, engine: Engine, mix: WorkloadMix) -> None:
        self.e = engine
        self.mix = mix
        self.fits = FitTable(mix)
        self.schedulable = {n: node_schedulable(s) for n, s in engine.state.nodes.items()}

    def node(self, name: str) -> float:
        e = self.e
        shares: list[float] = []
        ids: list[int] = []
        for g in e.node_gids[name]:
            d, u = e.g_dev[g], e.g_use[g]
            shares.append(free_share(d, u))
            ids.append(self.fits.state_id(d, u, e.g_cordoned[g]))
        return node_fgd(self.mix, self.fits, ids, shares, self.schedulable[name])
