"""A HamiPodPlacement's status, typed: parsed from the CR's dict and written back unchanged.

The fields mirror the CRD's status schema (crds/hamipodplacements...yaml). Parsing never raises:
a value of the wrong type (or a phase this version does not know) is reported as a Problem and
kept, untouched, in ``extra`` with the keys this version does not know, so writing a status back
never loses what another writer put there. ``to_dict(parse(d)) == d`` for every status the agent
writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeGuard

from hami_place_core.problems import Code, Problem


class Phase(StrEnum):
    PENDING = "Pending"
    CLAIMED = "Claimed"
    BOUND = "Bound"
    EVICTING = "Evicting"
    WAITING = "WaitingForPod"
    SCALING_UP = "ScalingUp"  # a surge move: one replica added, waiting for the pinned new pod
    SCALING_DOWN = "ScalingDown"  # a surge move: restoring the replica count, then terminal
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in (Phase.COMPLETED, Phase.FAILED, Phase.CANCELLED)


_PHASES = tuple(str(p.value) for p in Phase)
MAX_CONDITIONS = 16  # the CRD's maxItems
CONDITION_MESSAGE_LIMIT = 1024  # what the agent writes; the CRD allows more
MESSAGE_LIMIT = 4096  # the CRD's maxLength of status.message


# Not frozen (a frozen dataclass sets each field through object.__setattr__: 4 µs of the 14 µs a
# status took to parse, and the cache parses one per placement event); nothing changes one once
# parsed: with_changes and merge_conditions make copies.
@dataclass(slots=True)
class Condition:
    """A metav1.Condition. Keys absent from the object stay None and are not written back."""

    type: str
    status: str | None = None  # "True", "False" or "Unknown"
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, type_: str, ok: bool, reason: str, message: str, generation: int, now: str) -> Condition:
        return cls(
            type=type_,
            status="True" if ok else "False",
            reason=reason,
            message=message[:CONDITION_MESSAGE_LIMIT],
            last_transition_time=now,
            observed_generation=generation,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.extra, "type": self.type}
        for key, attr in _CONDITION_FIELDS:
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        return out


_CONDITION_FIELDS = (
    ("status", "status"),
    ("reason", "reason"),
    ("message", "message"),
    ("lastTransitionTime", "last_transition_time"),
    ("observedGeneration", "observed_generation"),
)


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(value, Mapping), fast for the dicts JSON decodes to (the ABC check cost 7 µs of
    each placement the cache parses)."""
    return type(value) is dict or isinstance(value, Mapping)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_condition(raw: object) -> Condition | None:
    """None when it is not a condition at all (then the caller keeps the whole list as it was).
    A value of the wrong type (or null) stays in extra, as it was."""
    if not is_mapping(raw) or not isinstance(raw.get("type"), str):
        return None
    known = dict(_CONDITION_FIELDS)
    values: dict[str, Any] = {}
    extra = {k: v for k, v in raw.items() if k != "type" and k not in known}
    for key, attr in _CONDITION_FIELDS:
        if key not in raw:
            continue
        value = raw[key]
        if _is_int(value) if attr == "observed_generation" else isinstance(value, str):
            values[attr] = value
        else:
            extra[key] = value
    return Condition(type=raw["type"], extra=extra, **values)


def merge_conditions(old: tuple[Condition, ...], new: list[Condition]) -> tuple[Condition, ...]:
    """Standard condition semantics: one per type; lastTransitionTime moves only when status flips."""
    out = {c.type: c for c in old}
    for c in new:
        prev = out.get(c.type)
        if prev is not None and prev.status == c.status:
            c = dataclasses.replace(c, last_transition_time=prev.last_transition_time or c.last_transition_time)
        out[c.type] = c
    return tuple(out.values())[:MAX_CONDITIONS]


# (key in the CR, attribute, kind): kind "str", "int" or "strs" (a list of strings).
_FIELDS = (
    ("reason", "reason", "str"),
    ("message", "message", "str"),
    ("boundPod", "bound_pod", "str"),
    ("boundPodUID", "bound_pod_uid", "str"),
    ("claim", "claim", "str"),
    ("claimedBy", "claimed_by", "str"),
    ("claimedAt", "claimed_at", "str"),
    ("claimLeaseExpiresAt", "claim_lease_expires_at", "str"),
    ("consumedAt", "consumed_at", "str"),
    ("targetUUIDs", "target_uuids", "strs"),
    ("allocatedDevices", "allocated_devices", "strs"),
    ("evictedPod", "evicted_pod", "str"),
    ("evictedPodUID", "evicted_pod_uid", "str"),
    ("evictionAttempts", "eviction_attempts", "int"),
    ("workload", "workload", "str"),
    ("siblingUIDs", "sibling_uids", "strs"),
    ("moveStartedAt", "move_started_at", "str"),
    ("evictedAt", "evicted_at", "str"),
    ("nextAttemptAt", "next_attempt_at", "str"),
    ("strategy", "strategy", "str"),
    ("surgeTarget", "surge_target", "str"),
    ("surgeReplicas", "surge_replicas", "int"),
    ("scaledUpAt", "scaled_up_at", "str"),
    ("removePod", "remove_pod", "str"),
    ("removePodUID", "remove_pod_uid", "str"),
    ("surgeOutcome", "surge_outcome", "str"),
    ("observedGeneration", "observed_generation", "int"),
)
_BY_KEY = {key: (attr, kind) for key, attr, kind in _FIELDS}
_ATTR_KEYS = {attr: key for key, attr, _ in _FIELDS} | {"phase": "phase", "conditions": "conditions"}
# The fields a claim sets: a lapsed claim drops them all (the move's own record stays).
CLAIM_FIELDS = (
    "claim",
    "claimed_by",
    "claimed_at",
    "claim_lease_expires_at",
    "target_uuids",
    "bound_pod",
    "bound_pod_uid",
)


def _typed(kind: str, value: object) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return _is_int(value)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


@dataclass(slots=True)
class PlacementStatus:
    """Every field is None when absent from the object (and is then not written back)."""

    phase: Phase | None = None
    reason: str | None = None
    message: str | None = None
    conditions: tuple[Condition, ...] | None = None
    bound_pod: str | None = None
    bound_pod_uid: str | None = None
    claim: str | None = None
    claimed_by: str | None = None
    claimed_at: str | None = None
    claim_lease_expires_at: str | None = None
    consumed_at: str | None = None
    target_uuids: tuple[str, ...] | None = None
    allocated_devices: tuple[str, ...] | None = None
    evicted_pod: str | None = None
    evicted_pod_uid: str | None = None
    eviction_attempts: int | None = None
    workload: str | None = None
    sibling_uids: tuple[str, ...] | None = None
    move_started_at: str | None = None
    evicted_at: str | None = None
    next_attempt_at: str | None = None
    # A surge move (strategy Surge): the scaled controller as Kind/name, its replica count before,
    # when the replica was added, the pod the scale-down must remove, and the terminal phase the
    # placement takes once the count is restored (ScalingDown).
    strategy: str | None = None
    surge_target: str | None = None
    surge_replicas: int | None = None
    scaled_up_at: str | None = None
    remove_pod: str | None = None
    remove_pod_uid: str | None = None
    surge_outcome: str | None = None
    observed_generation: int | None = None
    # Keys this version does not know and values of the wrong type, as they were.
    extra: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()

    @property
    def current_phase(self) -> Phase:
        return self.phase or Phase.PENDING

    @property
    def attempts(self) -> int:
        return self.eviction_attempts or 0

    @classmethod
    def parse(cls, raw: object) -> PlacementStatus:
        if raw is None:
            return cls()
        if not is_mapping(raw):
            return cls(problems=(Problem(Code.MALFORMED_STATUS, f"status must be an object, got {raw!r:.80}"),))
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        problems: list[Problem] = []
        for key, value in raw.items():
            field_ = _BY_KEY.get(key)
            if field_ is not None:
                attr, kind = field_
                if _typed(kind, value):
                    values[attr] = tuple(value) if kind == "strs" else value
                    continue
                what = {"str": "a string", "int": "an integer", "strs": "a list of strings"}[kind]
            elif key == "phase":
                if value in _PHASES:
                    values["phase"] = Phase(value)
                    continue
                what = "one of " + ", ".join(Phase)
            elif key == "conditions":
                parsed = [_parse_condition(c) for c in value] if isinstance(value, list) else [None]
                if all(c is not None for c in parsed):
                    values["conditions"] = tuple(c for c in parsed if c is not None)
                    continue
                what = "a list of conditions with a type"
            else:
                extra[key] = value  # a field this version does not know
                continue
            extra[key] = value
            problems.append(Problem(Code.MALFORMED_STATUS, f"status.{key} must be {what}, got {value!r:.80}"))
        return cls(**values, extra=extra, problems=tuple(problems))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        if self.phase is not None:
            out["phase"] = str(self.phase.value)
        for key, attr, kind in _FIELDS:
            value = getattr(self, attr)
            if value is not None:
                out[key] = list(value) if kind == "strs" else value
        if self.conditions is not None:
            out["conditions"] = [c.to_dict() for c in self.conditions]
        return out

    def with_changes(self, **changes: Any) -> PlacementStatus:
        """A copy with `changes`; a typed value replaces a malformed one kept in extra."""
        if self.extra:
            replaced = {_ATTR_KEYS[a] for a in changes if a in _ATTR_KEYS}
            changes["extra"] = {k: v for k, v in self.extra.items() if k not in replaced}
        return dataclasses.replace(self, **changes)

    def without_claim(self) -> PlacementStatus:
        return self.with_changes(**dict.fromkeys(CLAIM_FIELDS))
