"""The pendingPods trigger: GPU pods of the policy's scope unschedulable for longer than `after`.

Oldest first, the first pod the planner can make room for within the budgets gets the plan (the
moves of ``make_room``, then the pod itself pinned to the room); when none can, the trigger still
fires and the evaluation is blocked with each pod's reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_place_core import placement as hp
from hami_place_core.pending import PendingPod, pending_gpu_pods
from hami_place_core.planning.room import RoomRequest, make_room
from hami_place_core.policy_fields import PolicyError, duration, mapping
from hami_place_core.triggers.base import Decision, TriggerContext, node_budget

FIELD = "pendingPods"


@dataclass(frozen=True)
class PendingPods:
    after: float  # seconds a pod has been unschedulable before it counts


class Trigger:
    field = FIELD

    def parse(self, value: object, where: str) -> PendingPods:
        after = duration(mapping(value, where).get("after"), f"{where}.after", None)
        if after is None:
            raise PolicyError(f"{where}.after is required (e.g. 5m)")
        return PendingPods(after)

    def evaluate(self, ctx: TriggerContext, config: PendingPods) -> Decision | None:
        candidates = (
            pod
            for pod in ctx.pods.values()
            if ctx.policy.selects_pod(pod)
            and _pod_key(pod) not in ctx.cooling
            and hp.workload_key(pod) not in ctx.cooling
        )
        waiting = pending_gpu_pods(candidates, ctx.now, config.after)
        return _for_pending(ctx, waiting) if waiting else None


def _for_pending(ctx: TriggerContext, waiting: list[PendingPod]) -> Decision:
    why = []
    per_node = ctx.policy.budgets.moves_per_node
    for pp in waiting:
        try:
            request = RoomRequest.from_pod(pp.pod, webhook=True)
        except ValueError as e:
            why.append(f"{pp.key}: {e}")
            continue
        room = make_room(ctx.state, request, ctx.options)
        if not room.ok:
            why.append(f"{pp.key}: {room.reason}")
            continue
        fit, node = node_budget(room.moves, per_node)
        if fit < len(room.moves):
            why.append(f"{pp.key}: the plan moves more than movesPerNode {per_node} on node {node}")
            continue
        # The time it became unschedulable, not its age: the trigger (and so the status) stays the
        # same from one evaluation to the next.
        trigger = f"pod {pp.key} unschedulable since {pp.since.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        return Decision(trigger, room.moves, pp, room.node, room.gpus)
    trigger = f"{len(waiting)} GPU pod(s) unschedulable, oldest {waiting[0].key}"
    return Decision(trigger, blocked="; ".join(why)[:1000])


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


TRIGGER = Trigger()
