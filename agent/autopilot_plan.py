"""What the autopilot would do for one policy now: which trigger fires and the plan for it.

Plain logic over the cache's state (no I/O), called by agent/autopilot.py on every evaluation, so
the plan always starts from the live cluster: a move that failed, or one someone else made, is
simply not in the next plan. The triggers are the core's registry (hami_place_core/triggers/:
pending pods first, oldest first, then the free-GPU threshold); this module gives them the policy's
pool (its nodeSelector) and planner options: the policy's budgets as limits, and every pod the
policy does not select, whose move failed within the hour, or that a surge is removing, kept where
it is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from hami_place_core import placement as hp
from hami_place_core.defrag_policy import Policy
from hami_place_core.planning import PlanOptions
from hami_place_core.planning.bounds import restrict
from hami_place_core.state import ClusterState
from hami_place_core.triggers import TRIGGERS, Decision, TriggerContext
from hami_place_core.triggers.free_gpus import whole_free_gpus

__all__ = ["Decision", "decide", "kept_pods", "pool", "surge_leaving", "whole_free_gpus"]


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


def pool(policy: Policy, state: ClusterState) -> ClusterState:
    """The nodes the policy counts (nodeSelector), or the whole state."""
    if policy.node_selector is None:
        return state
    return restrict(state, [n for n, s in state.nodes.items() if policy.selects_node(s.labels)])


def decide(
    policy: Policy,
    state: ClusterState,
    pods: Mapping[str, Mapping[str, Any]],
    cooling: Mapping[str, str],
    excluded: Iterable[str],
    now: dt.datetime,
    leaving: Mapping[str, str] | None = None,
) -> Decision:
    """The first trigger of the registry (hami_place_core/triggers/) that fires for `policy`, and
    the plan for it; an empty Decision when none fires."""
    view = pool(policy, state)
    options = _options(policy, kept_pods(policy, view, pods, cooling, leaving), excluded)
    ctx = TriggerContext(policy, view, pods, cooling, options, now)
    for trigger in TRIGGERS:
        config = policy.triggers.get(trigger.field)
        decision = trigger.evaluate(ctx, config) if config is not None else None
        if decision is not None:
            return decision
    return Decision()
