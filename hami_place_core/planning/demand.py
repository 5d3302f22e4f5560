"""The objective ``demand``: plan for the pods that wait, not for a count of free GPUs.

The free-gpus greedy takes empty GPUs as seeds and targets wherever that frees one GPU more, and
on the shipped example it spends 60 completely free nodes doing so: after 529 moves an 8-GPU pod
has less room than before. This objective keeps what the demand needs
(:mod:`hami_place_core.capacity`):

1. **Protected phase.** The free-gpus greedy on a copy of the state where the GPUs of every
   completely free node are cordoned: no move lands on them, so none is broken up; everything
   else the greedy does (evacuations, chains, seeds on GPUs of nodes in use) stays.
2. **Open phase.** The free-gpus greedy again, on the state the first phase leaves, with nothing
   cordoned and the per-workload budgets the first phase used counted: it may break up a free
   node where that frees more.
3. **The best prefix** of the two phases' moves (every prefix of the plan is valid): among the
   prefixes after which no figure of the demand's room and not the number of completely free
   nodes is lower than before, the one with the most room for the largest shapes first, then the
   most whole GPUs; the shortest among equals (:func:`prefix.best_prefix`). So the plan never
   leaves the demand less room than it found, and ``--max-moves N`` is the best prefix of at
   most N moves.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from hami_place_core import capacity
from hami_place_core.fragmentation import WorkloadMix
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.model import Move, PlanOptions, apply_moves
from hami_place_core.planning.prefix import best_prefix, demand_measure
from hami_place_core.planning.strategies import free_gpus
from hami_place_core.state import ClusterState


def protect_free_nodes(state: ClusterState) -> ClusterState:
    """`state` with the GPUs of every completely free node cordoned (a shallow copy: nodes that
    change are new NodeStates, the rest are shared)."""
    nodes = {
        name: dataclasses.replace(n, cordoned=frozenset(g.uuid for g in n.devices)) if capacity.node_is_free(n) else n
        for name, n in state.nodes.items()
    }
    return dataclasses.replace(state, nodes=nodes)


def demand_moves(
    state: ClusterState, options: PlanOptions, mix: WorkloadMix, demand: capacity.Demand
) -> tuple[tuple[Move, ...], Engine]:
    """The demand objective's moves on `state` (already the replacement state), and the first
    phase's engine (whose immovable pods the plan reports)."""
    unlimited = dataclasses.replace(options, max_moves=None)
    engine = Engine(protect_free_nodes(state), unlimited)
    first = tuple(free_gpus(engine, unlimited, mix))
    used = Counter(options.workload_moves_used)
    used.update(m.workload for m in first if m.workload)
    # A pod the first phase moves stays where it goes: a second move would be a second eviction.
    kept = {**options.kept_pods, **{m.pod: "moved in the plan's first phase" for m in first}}
    opened = dataclasses.replace(unlimited, workload_moves_used=dict(used), kept_pods=kept)
    second = tuple(free_gpus(Engine(apply_moves(state, first), opened), opened, mix))
    moves = first + second
    keep = best_prefix(state, moves, demand_measure(demand), limit=options.max_moves)
    return moves[:keep], engine
