"""What the autopilot would do for one policy now: which trigger fires and the plan for it.

Plain logic over the cache's state (no I/O), called by agent/autopilot.py on every evaluation, so
the plan always starts from the live cluster: a move that failed, or one someone else made, is
simply not in the next plan. Pending pods come first (oldest first): the first one the planner can
make room for within the budgets gets the plan; the free-GPU threshold is looked at when no pod
waits. The planner is the core's (``make_room`` for a pod, ``plan`` for free GPUs), with the
policy's budgets as its limits and every pod the policy does not select, or whose move failed
within the hour, kept where it is.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_place_core import placement as hp
from hami_place_core.defrag_policy import Policy
from hami_place_core.pending import PendingPod, pending_gpu_pods
from hami_place_core.planning import PlanOptions, plan
from hami_place_core.planning.bounds import counted_gpus, restrict
from hami_place_core.planning.make_room import RoomRequest, make_room
from hami_place_core.planning.model import Move
from hami_place_core.state import ClusterState


@dataclass(frozen=True)
class Decision:
    trigger: str = ""  # what fired; "" when nothing did
    moves: tuple[Move, ...] = ()
    pending: PendingPod | None = None  # the pod the plan makes room for
    node: str | None = None  # where that pod goes
    gpus: tuple[int, ...] = ()
    gpus_freed: int = 0
    blocked: str = ""  # why a trigger fired but no plan can be run
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def pins_pending_pod(self) -> bool:
        """Room is made: the next step puts the pending pod itself on it (no moves left)."""
        return self.pending is not None and self.node is not None and not self.moves


def _options(policy: Policy, kept: Mapping[str, str], excluded: Iterable[str]) -> PlanOptions:
    b = policy.budgets
    return PlanOptions(
        max_moves=b.moves_per_run,
        excluded_namespaces=frozenset(excluded),
        max_moves_per_workload=b.moves_per_workload,
        kept_pods=dict(kept),
        solver="greedy",  # bounded time on any cluster; the exact stage is for interactive plans
    )


def surge_leaving(placements: Iterable[hp.Placement]) -> dict[str, str]:
    """The old pods surges are removing, by key: the Deployment is already back to its count, but
    the pod stays in the cache (not even terminating) until the ReplicaSet controller deletes it,
    and a plan made in that window would move it again."""
    return {
        f"{p.namespace}/{p.status.remove_pod}": f"being removed by surge placement {p.key}"
        for p in placements
        if p.status.remove_pod and p.phase in (hp.SCALING_DOWN, hp.COMPLETED)
    }


def kept_pods(
    policy: Policy,
    state: ClusterState,
    pods: Mapping[str, Mapping[str, Any]],
    cooling: Mapping[str, str],
    leaving: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Pods the plan must leave alone: outside the policy's selector, their move failed recently,
    or a surge is removing them (`leaving`)."""
    kept = {}
    for key in state.pods:
        pod = pods.get(key)
        why = cooling.get(key) or cooling.get(hp.workload_key(pod) or "")
        if leaving and key in leaving:
            kept[key] = leaving[key]
        elif why is not None:
            kept[key] = f"its move (or its workload's) failed within the hour ({why or 'no reason recorded'})"
        elif pod is None or not policy.selects_pod(pod):
            kept[key] = f"not selected by policy {policy.name}"
    return kept


def _node_budget(moves: Sequence[Move], per_node: int) -> tuple[int, str]:
    """How many leading moves stay within `per_node` moves out of or into any one node, and the
    node that stops the rest ("" when all fit)."""
    count: Counter[str] = Counter()
    for i, m in enumerate(moves):
        for node in {m.from_node, m.to_node}:
            count[node] += 1
            if count[node] > per_node:
                return i, node
    return len(moves), ""


def pool(policy: Policy, state: ClusterState) -> ClusterState:
    """The nodes the policy counts (nodeSelector), or the whole state."""
    if policy.node_selector is None:
        return state
    return restrict(state, [n for n, s in state.nodes.items() if policy.selects_node(s.labels)])


def whole_free_gpus(state: ClusterState) -> int:
    """GPUs nothing uses on schedulable nodes, as the planner counts them."""
    free = 0
    for uuid, (node, _) in counted_gpus(state).items():
        usage = state.nodes[node].usage.get(uuid)
        free += usage is None or usage.used == 0
    return free


def _for_pending(policy: Policy, state: ClusterState, options: PlanOptions, waiting: list[PendingPod]) -> Decision:
    why = []
    for pp in waiting:
        try:
            request = RoomRequest.from_pod(pp.pod, webhook=True)
        except ValueError as e:
            why.append(f"{pp.key}: {e}")
            continue
        room = make_room(state, request, options)
        if not room.ok:
            why.append(f"{pp.key}: {room.reason}")
            continue
        fit, node = _node_budget(room.moves, policy.budgets.moves_per_node)
        if fit < len(room.moves):
            per_node = policy.budgets.moves_per_node
            why.append(f"{pp.key}: the plan moves more than movesPerNode {per_node} on node {node}")
            continue
        # The time it became unschedulable, not its age: the trigger (and so the status) stays the
        # same from one evaluation to the next.
        trigger = f"pod {pp.key} unschedulable since {pp.since.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        return Decision(trigger, room.moves, pp, room.node, room.gpus)
    trigger = f"{len(waiting)} GPU pod(s) unschedulable, oldest {waiting[0].key}"
    return Decision(trigger, blocked="; ".join(why)[:1000])


def _for_free_gpus(policy: Policy, state: ClusterState, options: PlanOptions) -> Decision:
    assert policy.free_below is not None
    free = whole_free_gpus(state)
    if free >= policy.free_below:
        return Decision()
    trigger = f"{free} whole GPUs free (below {policy.free_below})"
    p = plan(state, options)
    fit, node = _node_budget(p.moves, policy.budgets.moves_per_node)
    moves = p.moves[:fit]  # every prefix of a plan is a valid plan
    freed = sum(len(m.frees) - len(m.takes) for m in moves)
    if not moves or freed <= 0:
        return Decision(trigger, blocked="no moves within the budgets free a whole GPU")
    notes = (f"cut at movesPerNode {policy.budgets.moves_per_node} on node {node}",) if node else ()
    return Decision(trigger, moves, gpus_freed=freed, notes=notes)


def decide(
    policy: Policy,
    state: ClusterState,
    pods: Mapping[str, Mapping[str, Any]],
    cooling: Mapping[str, str],
    excluded: Iterable[str],
    now: dt.datetime,
    leaving: Mapping[str, str] | None = None,
) -> Decision:
    """The trigger that fires for `policy` and the plan for it (see the module docstring)."""
    view = pool(policy, state)
    options = _options(policy, kept_pods(policy, view, pods, cooling, leaving), excluded)
    if policy.pending_after is not None:
        candidates = (
            pod
            for pod in pods.values()
            if policy.selects_pod(pod) and _pod_key(pod) not in cooling and hp.workload_key(pod) not in cooling
        )
        waiting = pending_gpu_pods(candidates, now, policy.pending_after)
        if waiting:
            return _for_pending(policy, view, options, waiting)
    if policy.free_below is not None:
        return _for_free_gpus(policy, view, options)
    return Decision()


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
