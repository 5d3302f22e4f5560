"""PlacementStatus: the CR's status dict, typed, written back exactly; malformed input never raises.
And Placement.from_object over any shape: problems, never exceptions."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_place_core.lifecycle import Observation, Seen, decide
from hami_place_core.placement import Placement
from hami_place_core.placement_status import Phase, PlacementStatus
from hami_place_core.problems import Code, Problem

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
SPEC = {
    "reqID": "req-1",
    "podSelector": {"matchLabels": {"app": "web"}},
    "nodeName": "n1",
    "gpuDevices": ["gpu-0"],
    "evictPod": "old",
}


def _walk(status: dict[str, Any], *seen: Observation) -> list[dict[str, Any]]:
    """The statuses the agent writes along one path of the lifecycle, as the CR would hold them."""
    out = []
    for obs in seen:
        p = Placement.from_object(
            {"metadata": {"name": "p", "namespace": "ns", "generation": 2}, "spec": SPEC, "status": status}
        )
        t = decide(p, obs, NOW)
        assert t is not None, (p.phase, obs.seen)
        status = {**t.status.to_dict(), "observedGeneration": 2}  # as agent/transitions.py writes it
        out.append(json.loads(json.dumps(status)))
    return out


PATHS = [
    # a move: slot wait, intent, a PDB block, the eviction, the claim, the bind, completion
    _walk(
        {},
        Observation(Seen.MOVE_SLOT_BUSY, detail="3 moves in flight"),
        Observation(Seen.MOVE_STARTED, pod_uid="u-old", workload="ns/ReplicaSet/rs", siblings=("u-old", "u-2")),
        Observation(Seen.EVICTION_BLOCKED, attempts=1, retry_seconds=2, detail="PDB x allows 0 disruptions (y)"),
        Observation(Seen.EVICTION_ATTEMPTED, attempts=2),
        Observation(Seen.EVICTION_ACCEPTED, attempts=2),
        Observation(Seen.POD_CLAIMED, pod="web-<generated>", claim="tok", agent="a-0", lease_seconds=60, uuids=("G",)),
        Observation(Seen.POD_APPEARED, pod="web-x", pod_uid="u-new", claim="tok"),
        Observation(Seen.POD_UNSCHEDULED, reason="FilteringFailed", detail="no fit"),
        Observation(Seen.ALLOCATED_ON_TARGET, uuids=("G",)),
    ),
    _walk(
        {},
        Observation(Seen.MOVE_STARTED, pod_uid="u-old", workload="w"),
        Observation(Seen.POD_CLAIMED, pod="web-x", claim="tok", agent="a-0", lease_seconds=60, uuids=("G",)),
        Observation(Seen.EVICTED_POD_GONE),
        Observation(Seen.LEASE_EXPIRED),
        Observation(Seen.REPLACEMENT_DEADLINE, seconds=600),
    ),
    _walk({}, Observation(Seen.MOVE_REFUSED, problems=(Problem(Code.NODE_NOT_FOUND, "node n1 not found"),))),
    _walk({}, Observation(Seen.MOVE_STARTED, pod_uid="u"), Observation(Seen.EVICTION_FORBIDDEN, detail="no")),
]


def test_every_status_the_agent_writes_round_trips_exactly() -> None:
    statuses = [s for path in PATHS for s in path]
    assert len(statuses) == 17
    for status in statuses:
        parsed = PlacementStatus.parse(status)
        assert parsed.problems == () and parsed.extra == {}, status
        assert parsed.to_dict() == status
        assert json.dumps(parsed.to_dict(), sort_keys=True) == json.dumps(status, sort_keys=True)


def test_the_typed_fields_are_the_crds() -> None:
    crd = yaml.safe_load((REPO / "crds" / "hamipodplacements.scheduling.hami.placement.com.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    full = {k: ("x" if v["type"] == "string" else 1 if v["type"] == "integer" else []) for k, v in schema.items()}
    full["phase"] = "Pending"
    parsed = PlacementStatus.parse(full)
    assert parsed.extra == {} and parsed.problems == ()  # every schema field has a typed home
    assert [str(p) for p in Phase] == schema["phase"]["enum"]
    assert parsed.to_dict() == full


def test_malformed_values_are_problems_and_survive_a_write() -> None:
    raw = {
        "phase": "Paused",
        "evictionAttempts": "three",
        "targetUUIDs": "GPU-a",
        "conditions": [{"type": "Ready"}, "nonsense"],
        "futureField": {"a": 1},
        "message": "hi",
    }
    parsed = PlacementStatus.parse(raw)
    assert parsed.phase is None and parsed.eviction_attempts is None and parsed.message == "hi"
    assert sorted(p.message.split(" must ")[0] for p in parsed.problems) == [
        "status.conditions",
        "status.evictionAttempts",
        "status.phase",
        "status.targetUUIDs",
    ]
    assert all(p.code == Code.MALFORMED_STATUS for p in parsed.problems)
    assert parsed.to_dict() == raw  # nothing lost
    fixed = parsed.with_changes(eviction_attempts=4)
    assert fixed.to_dict() == {**raw, "evictionAttempts": 4}
    for bad in ("a string", 7, ["a"], True):
        s = PlacementStatus.parse(bad)
        assert s.problems and s.problems[0].code == Code.MALFORMED_STATUS and s.to_dict() == {}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_STATUS_KEYS = st.sampled_from(
    ["phase", "reason", "claim", "conditions", "evictionAttempts", "targetUUIDs", "siblingUIDs", "x", "boundPod"]
)
_VALUES = (
    _JSON
    | st.sampled_from(["Pending", "Claimed", "Bound"])
    | st.lists(
        st.fixed_dictionaries({"type": st.text(max_size=3)}, optional={"status": _JSON, "observedGeneration": _JSON}),
        max_size=2,
    )
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(_STATUS_KEYS, _VALUES, max_size=6))
def test_any_status_parses_and_round_trips(raw: dict[str, Any]) -> None:
    parsed = PlacementStatus.parse(raw)
    assert parsed.to_dict() == raw


@settings(max_examples=500, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": _JSON | st.fixed_dictionaries({}, optional={"name": _JSON, "generation": _JSON}),
            "spec": _JSON
            | st.fixed_dictionaries(
                {},
                optional={k: _JSON for k in ("reqID", "podSelector", "nodeName", "gpuDevices", "evictPod", "timeouts")},
            ),
            "status": _JSON,
        },
    )
)
def test_any_placement_object_parses(obj: dict[str, Any]) -> None:
    p = Placement.from_object(obj)
    assert isinstance(p.selector, dict) and isinstance(p.req_id, str) and isinstance(p.phase, str)
    assert all(isinstance(x, Problem) for x in p.problems)
    for obs in (Observation(Seen.CANCEL), Observation(Seen.LEASE_EXPIRED)):
        decide(p, obs, NOW)  # never raises either


def test_spec_shape_problems_name_the_field() -> None:
    def problems(spec: Any) -> list[str]:
        return [x.message for x in Placement.from_object({"metadata": {"name": "p"}, "spec": spec}).problems]

    assert problems({**SPEC}) == []
    assert problems("spec") == ["spec must be an object, got str 'spec'"]
    assert problems({**SPEC, "podSelector": "app=web"}) == [
        "spec.podSelector must be an object with matchLabels or matchExpressions, got str 'app=web'"
    ]
    assert problems({**SPEC, "podSelector": {"matchLabels": ["app", "web"]}}) == [
        "spec.podSelector.matchLabels must be an object of label: value, got list ['app', 'web']"
    ]
    assert problems({**SPEC, "reqID": 12345, "nodeName": None}) == [
        "spec.reqID must be a string, got int 12345",
        "spec.nodeName must be a string, got NoneType None",
    ]
    assert problems({**SPEC, "podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}, 3]}}) == [
        "spec.podSelector.matchExpressions[0] with operator In must have a non-empty values list",
        "spec.podSelector.matchExpressions[1] must be an object with key and operator, got int 3",
    ]
    assert problems({**SPEC, "timeouts": {"evictionSeconds": "5m"}}) == [
        "spec.timeouts.evictionSeconds must be a positive integer, got str '5m'"
    ]
    bad = Placement.from_object({"spec": {**SPEC, "podSelector": {"matchLabels": {"app": 1}}}})
    assert bad.selector == {}  # a selector that cannot be read selects nothing
    assert Placement.from_object({"spec": {**SPEC, "gpuDevices": "gpu-0"}}).target_error == (
        "gpuDevices must list 1 to 16 entries like gpu-0 or gpu-0/50"
    )
