"""The freeGPUs trigger: fewer whole GPUs free in the policy's pool than `below`.

The plan is the defragmentation planner's, cut to the prefix that keeps movesPerNode (every prefix
of a plan is a valid plan); it fires but is blocked when no such prefix frees a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_place_core import capacity
from hami_place_core.planning import Plan, apply_moves, plan
from hami_place_core.planning.bounds import counted_gpus
from hami_place_core.planning.model import Move
from hami_place_core.policy_fields import PolicyError, integer, mapping
from hami_place_core.state import ClusterState
from hami_place_core.triggers.base import Decision, TriggerContext, node_budget

FIELD = "freeGPUs"
MAX_BELOW = 100_000


@dataclass(frozen=True)
class FreeGPUs:
    below: int  # fires while fewer whole GPUs than this are free


class Trigger:
    field = FIELD

    def parse(self, value: object, where: str) -> FreeGPUs:
        below = integer(mapping(value, where).get("below"), f"{where}.below", 0, 1, MAX_BELOW)
        if below == 0:
            raise PolicyError(f"{where}.below is required (at least 1)")
        return FreeGPUs(below)

    def evaluate(self, ctx: TriggerContext, config: FreeGPUs) -> Decision | None:
        free = whole_free_gpus(ctx.state)
        if free >= config.below:
            return None
        trigger = f"{free} whole GPUs free (below {config.below})"
        p = plan(ctx.state, ctx.options)
        per_node = ctx.policy.budgets.moves_per_node
        fit, node = node_budget(p.moves, per_node)
        moves = p.moves[:fit]
        freed = sum(len(m.frees) - len(m.takes) for m in moves)
        if not moves or freed <= 0:
            return Decision(trigger, blocked="no moves within the budgets free a whole GPU")
        notes = (f"cut at movesPerNode {per_node} on node {node}",) if node else ()
        return Decision(trigger, moves, gpus_freed=freed, notes=notes, room=_room(ctx.state, p, moves))


def _room(state: ClusterState, p: Plan, moves: tuple[Move, ...]) -> dict[str, Any] | None:
    """The demand's room before and after the moves that will run (the plan's own, or a prefix)."""
    if p.demand is None or p.room_before is None or p.room_after is None:
        return None
    after = p.room_after if len(moves) == len(p.moves) else capacity.room(apply_moves(state, moves), p.demand)
    return capacity.change_view(p.demand, p.room_before, after)


def whole_free_gpus(state: ClusterState) -> int:
    """GPUs nothing uses on schedulable nodes, as the planner counts them."""
    free = 0
    for uuid, (node, _) in counted_gpus(state).items():
        usage = state.nodes[node].usage.get(uuid)
        free += usage is None or usage.used == 0
    return free


TRIGGER = Trigger()
