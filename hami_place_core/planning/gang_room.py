"""Make room for a gang: the fewest moves after which every member that must start fits at the same
time, each with its own node and GPUs; or the member that cannot fit and why.

A gang starts all together or not at all (:mod:`hami_place_core.gangs`), so room made for one
member is worth nothing unless the others get theirs too, and two members must not be counted on
the same free GPUs. Members are served one after another by the one-pod search
(:func:`~hami_place_core.planning.room.make_room`): after each, its moves are applied and the
member is *reserved* where it will go (an allocation of its request on its GPUs and node, which no
later move may touch: a kept pod), so the next member's search sees the room as taken. The moves
of all members together are valid in the order they are listed, because each member's were valid
on the state the earlier ones left.

Which member is served first changes the total: several orders are tried (largest request first,
then as given) and the plan with the fewest moves is kept, ties to the first order. The limits of
the options (max_moves, the per-workload budgets) hold for the gang's moves together.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_place_core.planning.model import Move, PlanOptions, apply_moves
from hami_place_core.planning.room import RoomPlan, RoomRequest, make_room
from hami_place_core.requests import PodRequest
from hami_place_core.state import ClusterState, PodAllocation, add_pod, set_pod_requests

KEPT_AS_MEMBER = "a gang member's room, reserved for it"


@dataclass(frozen=True)
class MemberRoom:
    name: str  # namespace/name of the pod, or "gang/member-N" for a hypothetical member
    node: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    moves: int  # moves this member's room took (after the members served before it)

    def as_dict(self) -> dict[str, Any]:
        return {"pod": self.name, "node": self.node, "gpus": list(self.gpus), "moves": self.moves}


@dataclass(frozen=True)
class GangRoom:
    """The moves after which every member fits at once (in a valid order), and where each goes;
    or no moves, the member that could not be placed and why (`reason`)."""

    members: tuple[MemberRoom, ...]
    moves: tuple[Move, ...]
    wanted: int  # members that must fit at once
    reason: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.reason and len(self.members) == self.wanted

    def as_dict(self) -> dict[str, Any]:
        return {
            "fits": self.ok,
            "wanted": self.wanted,
            "members": [m.as_dict() for m in self.members],
            "moves": [m.as_dict() for m in self.moves],
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }


def make_room_for_gang(
    state: ClusterState, requests: Sequence[RoomRequest], options: PlanOptions | None = None
) -> GangRoom:
    """Room for all of `requests` at once (the members to place), with the fewest moves found over
    the orders tried. `state` is not modified."""
    started = time.perf_counter()
    options = options or PlanOptions()
    if not requests:
        return GangRoom((), (), 0, seconds=time.perf_counter() - started)
    best: GangRoom | None = None
    for order in _orders(requests):
        found = _in_order(state, order, options)
        if best is None or _better(found, best):
            best = found
    assert best is not None
    return replace(best, seconds=time.perf_counter() - started)


def _better(a: GangRoom, b: GangRoom) -> bool:
    if a.ok != b.ok:
        return a.ok
    return a.ok and len(a.moves) < len(b.moves)


def _orders(requests: Sequence[RoomRequest]) -> list[tuple[RoomRequest, ...]]:
    """Largest first (GPUs, then memory and cores per GPU: the hardest to place go where room is
    widest), then the order given; each order once."""
    largest = tuple(sorted(requests, key=lambda r: (-r.gpus, -r.gpu.memreq, -r.gpu.mem_percentage, -r.gpu.coresreq)))
    given = tuple(requests)
    return [largest] if largest == given else [largest, given]


def _in_order(state: ClusterState, requests: Sequence[RoomRequest], options: PlanOptions) -> GangRoom:
    current = state
    moves: list[Move] = []
    placed: list[MemberRoom] = []
    kept = dict(options.kept_pods)
    used: Counter[str] = Counter(options.workload_moves_used)
    for i, req in enumerate(requests):
        name = _member_name(req, i)
        left = None if options.max_moves is None else options.max_moves - len(moves)
        step = replace(options, max_moves=left, kept_pods=dict(kept), workload_moves_used=dict(used))
        room = make_room(current, req, step)
        if not room.ok or room.node is None:
            why = f"member {i + 1} of {len(requests)} ({name}) cannot fit: {room.reason}"
            return GangRoom(tuple(placed), (), len(requests), reason=why)
        current = apply_moves(current, room.moves)
        _reserve(current, req, name, room)
        kept[name] = KEPT_AS_MEMBER
        used.update(m.workload for m in room.moves if m.workload)
        moves.extend(room.moves)
        placed.append(MemberRoom(name, room.node, room.gpus, room.uuids, len(room.moves)))
    return GangRoom(tuple(placed), tuple(moves), len(requests))


def _member_name(req: RoomRequest, i: int) -> str:
    """The member's pod key; a hypothetical member (``--for-request``) is ``gang/member-N``."""
    return req.name if "/" in req.name else f"gang/member-{i + 1}"


def _reserve(state: ClusterState, req: RoomRequest, name: str, room: RoomPlan) -> None:
    """The member as an allocation where it will go: its GPU shares on its GPUs, its CPU, memory
    and slot on its node, so the next member's search cannot count on them."""
    assert room.node is not None
    node = state.nodes[room.node]
    per_gpu = {}
    for uuid in room.uuids:
        gpu = node.by_uuid(uuid)
        assert gpu is not None
        per_gpu[uuid] = (1, req.gpu.memory_on(gpu.devmem), req.gpu.coresreq)
    namespace, _, pod = name.partition("/")
    alloc = PodAllocation(
        namespace=namespace,
        name=pod,
        uid=f"gang-member:{name}",
        node=room.node,
        phase="Pending",
        labels={},
        owner_kind=None,
        owner_name=None,
        per_gpu=per_gpu,
        containers=(tuple(room.uuids),),
        request=PodRequest(init=(), containers=(req.gpu,), selectors=req.selectors),
    )
    add_pod(state, alloc)
    set_pod_requests(state, alloc.key, room.node, req.resources)
