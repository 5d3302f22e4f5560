"""A HamiDefragPolicy's status as typed values, read leniently and written back as the CRD says.

The status is written by the agent alone (agent/policy_writer.py) but may be written by anyone
with ``hamidefragpolicies/status`` rights (docs/security.md), so reading never trusts a type:
a field of the wrong type reads as absent, and a list keeps only its well-formed entries. A status
the agent wrote reads back to the same document (``to_dict(from_dict(x)) == x``), so an evaluation
that changed nothing writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


def _text(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _count(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _entries(d: Mapping[str, Any], key: str) -> tuple[dict[str, Any], ...] | None:
    value = d.get(key)
    if not isinstance(value, list):
        return None
    return tuple(dict(e) for e in value if isinstance(e, Mapping))


@dataclass(frozen=True)
class InFlight:
    """The move being executed (``status.inFlight``): the intent recorded before its placement."""

    placement: str = ""  # namespace/name of the HamiPodPlacement
    pod: str = ""  # namespace/name of the pod it moves
    pod_uid: str = ""
    started_at: str = ""
    node: str = ""
    gpus: tuple[str, ...] = ()
    req_id: str = ""
    workload: str | None = None  # namespace/Kind/name of its controller
    signature: str = ""  # the agent's HMAC (agent/intents.py)

    @classmethod
    def from_dict(cls, value: object) -> InFlight | None:
        if not isinstance(value, Mapping) or not value:
            return None
        gpus = value.get("gpus")
        return cls(
            placement=_text(value, "placement") or "",
            pod=_text(value, "pod") or "",
            pod_uid=_text(value, "podUID") or "",
            started_at=_text(value, "startedAt") or "",
            node=_text(value, "node") or "",
            gpus=tuple(g for g in gpus if isinstance(g, str)) if isinstance(gpus, list) else (),
            req_id=_text(value, "reqID") or "",
            workload=_text(value, "workload"),
            signature=_text(value, "signature") or "",
        )

    def to_dict(self, signed: bool = True) -> dict[str, Any]:
        """As the CRD spells it; `signed=False` leaves the signature out (what it is computed over)."""
        out: dict[str, Any] = {
            "placement": self.placement,
            "pod": self.pod,
            "podUID": self.pod_uid,
            "startedAt": self.started_at,
            "node": self.node,
            "gpus": list(self.gpus),
            "reqID": self.req_id,
        }
        if self.workload is not None:
            out["workload"] = self.workload
        if signed and self.signature:
            out["signature"] = self.signature
        return out


@dataclass(frozen=True)
class PolicyStatus:
    """Every field of the CRD's status; None: absent."""

    state: str | None = None
    message: str | None = None
    trigger: str | None = None
    last_evaluation_time: str | None = None
    observed_generation: int | None = None
    plan: dict[str, Any] | None = None
    in_flight: InFlight | None = None
    recent_moves: tuple[dict[str, Any], ...] | None = None
    failed_pods: tuple[dict[str, Any], ...] | None = None
    moves_succeeded: int | None = None
    moves_failed: int | None = None
    conditions: tuple[dict[str, Any], ...] | None = field(default=None)

    @classmethod
    def from_dict(cls, value: object) -> PolicyStatus:
        d: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
        plan = d.get("plan")
        return cls(
            state=_text(d, "state"),
            message=_text(d, "message"),
            trigger=_text(d, "trigger"),
            last_evaluation_time=_text(d, "lastEvaluationTime"),
            observed_generation=_count(d, "observedGeneration"),
            plan=dict(plan) if isinstance(plan, Mapping) else None,
            in_flight=InFlight.from_dict(d.get("inFlight")),
            recent_moves=_entries(d, "recentMoves"),
            failed_pods=_entries(d, "failedPods"),
            moves_succeeded=_count(d, "movesSucceeded"),
            moves_failed=_count(d, "movesFailed"),
            conditions=_entries(d, "conditions"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The document to write: absent fields left out, as the API server stores them."""
        fields = {
            "state": self.state,
            "message": self.message,
            "trigger": self.trigger,
            "lastEvaluationTime": self.last_evaluation_time,
            "observedGeneration": self.observed_generation,
            "plan": self.plan,
            "inFlight": self.in_flight.to_dict() if self.in_flight is not None else None,
            "recentMoves": list(self.recent_moves) if self.recent_moves is not None else None,
            "failedPods": list(self.failed_pods) if self.failed_pods is not None else None,
            "movesSucceeded": self.moves_succeeded,
            "movesFailed": self.moves_failed,
            "conditions": list(self.conditions) if self.conditions is not None else None,
        }
        return {k: v for k, v in fields.items() if v is not None}

    def with_(self, **changes: Any) -> PolicyStatus:
        return replace(self, **changes)
