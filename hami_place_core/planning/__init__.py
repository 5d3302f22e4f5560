"""Defragmentation planning: an ordered list of pod moves that frees whole GPUs or lowers FGD.

``plan(state, PlanOptions(...))`` is the entry (and ``make_room(state, RoomRequest, PlanOptions)``
for one pending pod, in :mod:`~hami_place_core.planning.room`); the plan model (:class:`PlanOptions`,
:class:`Plan`, :class:`Move`) and the replay of moves (:func:`apply_moves`, :func:`check_moves`)
are exported here too. docs/planner.md describes the algorithm.

Layers, top to bottom; each module imports only modules below it (import-linter enforces it):

- ``gang_room``: ``make_room_for_gang()``, room for every member of a gang at once, member by
  member over the one-pod search, each member's room reserved for it;
- ``room``: ``make_room()``, the fewest moves after which one pending pod fits, and its request
  (from a pod or a ``--for-request`` string): a package of its own (request, result, explain, search);
- ``planner``: ``plan()``, the objective's strategy, then the exact planner where it applies;
- ``demand``: the demand objective: the free-gpus greedy with completely free nodes protected, then
  without, and the best prefix that leaves the demand no less room than it found;
- ``exact``: the exact planner for small clusters: solve, order, prune;
- ``exact_model``: its MILP over where every movable pod ends;
- ``strategies``: the greedy planner's objectives (free-gpus, fragmentation) as passes in order;
- ``exchange``: node-room exchanges: an exclusive pod carried off a CPU- or memory-full node to an
  empty GPU of a roomy node, so that other pods can use the full node's GPU room;
- ``chains``: seed chains: several empty GPUs of roomy nodes taken in turn, one GPU more freed;
- ``passes``: evacuations by cost, pairing into an empty GPU, seeded evacuations, single moves;
- ``fgd``: the FGD of a node over the engine's arrays (the formula is
  :func:`hami_place_core.fragmentation.node_fgd`);
- ``ordering``: the engine's moves in an order where each is valid when made;
- ``evacuation``: emptying one GPU, all or nothing, with ejection chains;
- ``targets``: best fit for one pod;
- ``engine``: GPUs and pods as arrays, best-fit buckets, apply and undo, and the verbs that are
  the only way the modules above change the engine (they read its arrays directly);
- ``milp_bounds``: the bound that counts node room, and the exact optimum of small states;
- ``bounds``: upper bounds on what any plan frees, blind to node room (L2, cutting stock);
- ``highs``: helpers for the HiGHS models;
- ``prefix``: a plan's prefixes measured by an objective (free GPUs, FGD, the demand's room), the
  best one within a limit;
- ``model``: options, moves, plans, and their replay and check on a state;
- ``constraints``: which nodes kube-scheduler accepts a pod's replacement on, which pods may move.
"""

from hami_place_core.planning.model import (
    OBJECTIVES,
    SOLVERS,
    Move,
    Objective,
    Plan,
    PlanMetrics,
    PlanOptions,
    Solver,
    apply_moves,
    check_moves,
    copy_state,
    moved_allocation,
)
from hami_place_core.planning.planner import SolverUnavailable, plan

__all__ = [
    "OBJECTIVES",
    "SOLVERS",
    "Move",
    "Objective",
    "Plan",
    "PlanMetrics",
    "PlanOptions",
    "Solver",
    "SolverUnavailable",
    "apply_moves",
    "check_moves",
    "copy_state",
    "moved_allocation",
    "plan",
]
