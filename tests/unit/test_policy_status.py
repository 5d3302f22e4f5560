"""The typed HamiDefragPolicy status (hami_place_core/policy_status.py): what the agent wrote reads
back to the same document (so an unchanged evaluation writes nothing), and whatever a status
writer put there reads without an exception, wrong types as absent."""

from __future__ import annotations

from typing import Any

import pytest

from hami_place_core.policy_status import InFlight, PolicyStatus

WRITTEN: dict[str, Any] = {
    "state": "Moving",
    "message": "moving ns/a to n0/gpu-1 (1 move(s) free 1 whole GPU(s))",
    "trigger": "1 whole GPUs free (below 3)",
    "lastEvaluationTime": "2026-12-07T12:00:00Z",
    "observedGeneration": 3,
    "plan": {"moves": [{"pod": "ns/a", "from": "n0/gpu-0", "to": "n0/gpu-1"}], "computedAt": "x", "gpusFreed": 1},
    "inFlight": {
        "placement": "ns/autopilot-p-1",
        "pod": "ns/a",
        "workload": "ns/ReplicaSet/a",
        "podUID": "u",
        "startedAt": "2026-12-07T12:00:00Z",
        "node": "n0",
        "gpus": ["gpu-1"],
        "reqID": "abcdef0123",
        "signature": "f" * 64,
    },
    "recentMoves": [{"pod": "ns/a", "placement": "ns/autopilot-p-1", "startedAt": "x", "result": "InFlight"}],
    "failedPods": [{"pod": "ns/b", "failedAt": "2026-12-07T11:00:00Z", "reason": "PDB"}],
    "movesSucceeded": 4,
    "movesFailed": 1,
    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "x", "reason": "Evaluated"}],
}


def test_what_the_agent_wrote_reads_back_the_same() -> None:
    assert PolicyStatus.from_dict(WRITTEN).to_dict() == WRITTEN
    assert PolicyStatus.from_dict({}).to_dict() == {}
    no_workload = {**WRITTEN["inFlight"]}
    del no_workload["workload"]
    assert InFlight.from_dict(no_workload).to_dict() == no_workload  # type: ignore[union-attr]


def test_the_signature_is_left_out_of_what_it_signs() -> None:
    flight = InFlight.from_dict(WRITTEN["inFlight"])
    assert flight is not None and "signature" not in flight.to_dict(signed=False)


@pytest.mark.parametrize("crafted", [None, [], "Moving", 7])
def test_a_status_that_is_no_object_reads_as_empty(crafted: object) -> None:
    assert PolicyStatus.from_dict(crafted) == PolicyStatus()


def test_fields_of_the_wrong_type_read_as_absent() -> None:
    crafted = {
        "state": 7,
        "movesSucceeded": "many",
        "movesFailed": -1,
        "observedGeneration": True,
        "inFlight": "x",
        "recentMoves": {"a": 1},
        "conditions": "Ready",
        "plan": [],
    }
    assert PolicyStatus.from_dict(crafted) == PolicyStatus()


def test_lists_keep_their_well_formed_entries() -> None:
    status = PolicyStatus.from_dict({"failedPods": [1, "x", {"pod": "ns/a"}], "inFlight": {"gpus": "gpu-0", "pod": 3}})
    assert status.failed_pods == ({"pod": "ns/a"},)
    assert status.in_flight == InFlight()  # every field of the wrong type reads as absent
