"""Make room for one pod: the fewest moves after which a pending pod (or a hypothetical request)
fits, with the node and GPUs it will get, or the constraint that makes it impossible.

``make_room(state, RoomRequest, PlanOptions) -> RoomPlan``. The request is read from a real pod by
the core's own parsers (:func:`~hami_place_core.requests.pod_request`,
:func:`~hami_place_core.node_resources.pod_requests`) or built from a ``--for-request`` string
(:func:`~hami_place_core.planning.room.request.parse_room_request`), which is turned into a pod
and read the same way. docs/planner.md ("Making room for one pod") describes the algorithm:

1. the nodes kube-scheduler would accept for the pod (:func:`constraints.node_refusal`), and on
   each the GPUs HAMi's Fit could ever give it (health, cordon, type and UUID selectors, size);
2. per GPU, the fewest resident pods whose leaving makes the pod fit there (HAMi's Fit on the
   usage without them); per node, the sum over its cheapest GPUs is a lower bound on its moves;
3. nodes in order of that bound: the chosen GPUs' pods are relocated by the planner's engine
   (best fit, else ejection chains, :func:`evacuation.relocate`), then pods leave the node until
   its CPU, memory and pod slots cover the pod (kube-scheduler's NodeResourcesFit); the moves are
   put in an order valid step by step (:func:`ordering.sequence`). The search stops when no
   node's bound can beat the best plan found: fewest moves, then least GPU compute moved, then
   node name.

Pure and deterministic: the state is not modified, and the same input gives the same plan.

The package, top to bottom (each module imports only those below it): ``why_not`` (the binding
constraint when the search found nothing), ``search`` (the search: nodes by bound, room made on
each), ``detours`` (node-room chains and bumps, where relocation alone cannot place a pod),
``eviction`` (the pods that must leave a GPU, and the bound), ``explain`` (how a request and a
reason read), ``result`` (what a search finds), ``request`` (what room is asked for); and here the
entry and its plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hami_place_core.planning.constraints import replacement_state
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.model import Move, PlanOptions
from hami_place_core.planning.room.request import KNOWN_KEYS, RoomRequest, parse_room_request
from hami_place_core.planning.room.search import Search
from hami_place_core.planning.room.why_not import why_not
from hami_place_core.state import ClusterState


# ---- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoomPlan:
    """The moves after which the pod fits (in an order valid step by step), and where it goes; or,
    when no plan within the options' limits exists, no moves and the binding constraint."""

    request: RoomRequest
    moves: tuple[Move, ...]
    node: str | None  # where the pod fits after the moves; None: no room can be made
    gpus: tuple[int, ...] = ()  # NVML indices on `node`
    uuids: tuple[str, ...] = ()
    reason: str = ""  # why no room can be made (empty when it can)
    nodes_tried: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.node is not None

    @property
    def gpu_devices(self) -> list[str]:
        return [f"gpu-{i}" for i in self.gpus]

    def as_dict(self) -> dict[str, Any]:
        return {
            "request": self.request.as_dict(),
            "fits": self.ok,
            "node": self.node,
            "gpus": list(self.gpus),
            "uuids": list(self.uuids),
            "moves": [m.as_dict() for m in self.moves],
            "reason": self.reason,
            "notes": list(self.request.notes),
            "nodesTried": self.nodes_tried,
            "seconds": round(self.seconds, 3),
        }


def make_room(state: ClusterState, request: RoomRequest, options: PlanOptions | None = None) -> RoomPlan:
    """The fewest moves (within `options`' limits: max_moves, the workload budgets, the namespaces
    and pods that may move) after which `request` fits on one node, with that node and its GPUs;
    or an empty plan and the binding constraint. `state` is not modified."""
    options = options or PlanOptions()
    if options.max_moves is not None and options.max_moves < 0:
        raise ValueError("max_moves must be >= 0")
    started = time.perf_counter()
    base = replacement_state(state)
    search = Search(Engine(base, options), request)
    found = search.run()
    if found is None:
        reason = why_not(search, base, options)
        return RoomPlan(request, (), None, reason=reason, nodes_tried=search.tried, seconds=since(started))
    return RoomPlan(
        request,
        tuple(found.moves),
        found.node,
        found.gpus,
        found.uuids,
        nodes_tried=search.tried,
        seconds=since(started),
    )


def since(started: float) -> float:
    return time.perf_counter() - started


__all__ = ["KNOWN_KEYS", "RoomPlan", "RoomRequest", "make_room", "parse_room_request"]
