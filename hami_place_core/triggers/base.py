"""What a trigger is: the shape every trigger module fills in, and what it is given.

A trigger reads its own block of ``spec.triggers`` (``parse``: a typed config, or PolicyError) and,
on each evaluation, says whether it fires and with what plan (``evaluate``: a Decision, or None
when it does not fire). The registry (``triggers/__init__.py``) tries them in order; the first that
fires decides the evaluation. Pure: no clock but the one passed in, no I/O.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hami_place_core.pending import PendingPod
from hami_place_core.planning import PlanOptions
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
    room: Mapping[str, Any] | None = None  # the demand's room before and after (capacity.change_view)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def pins_pending_pod(self) -> bool:
        """Room is made: the next step puts the pending pod itself on it (no moves left)."""
        return self.pending is not None and self.node is not None and not self.moves


class PolicyView(Protocol):
    """What a trigger may ask of the policy (hami_place_core/defrag_policy.py's Policy)."""

    @property
    def budgets(self) -> Any: ...

    def selects_pod(self, pod: Mapping[str, Any]) -> bool: ...


@dataclass(frozen=True)
class TriggerContext:
    policy: PolicyView
    state: ClusterState  # the policy's pool (its nodeSelector applied)
    pods: Mapping[str, Mapping[str, Any]]  # the pods the agent serves, by namespace/name
    cooling: Mapping[str, str]  # pods and workloads whose move failed within the hour
    options: PlanOptions  # the policy's budgets and kept pods, as planner options
    now: dt.datetime


class Trigger(Protocol):
    """One kind of trigger: `field` is its key under spec.triggers."""

    field: str

    def parse(self, value: object, where: str) -> object: ...

    def evaluate(self, ctx: TriggerContext, config: Any) -> Decision | None: ...


def node_budget(moves: Sequence[Move], per_node: int) -> tuple[int, str]:
    """How many leading moves stay within `per_node` moves out of or into any one node, and the
    node that stops the rest ("" when all fit)."""
    count: Counter[str] = Counter()
    for i, m in enumerate(moves):
        for node in {m.from_node, m.to_node}:
            count[node] += 1
            if count[node] > per_node:
                return i, node
    return len(moves), ""
