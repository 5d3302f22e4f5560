"""Autopilot intents (issue 39, defect 1): a status.inFlight the agent did not sign, or one that
names a move its policy could not make, is never turned into a placement. Pure logic; the forged
status on a real control plane is tests/agent/test_autopilot.py::test_a_forged_in_flight_evicts_nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.autopilot import intent_refusal
from agent.intents import SIGNATURE, IntentKeyError, IntentSigner
from agent.move_placements import move_placement_name
from hami_place_core.defrag_policy import parse_policy
from hami_place_core.policy_status import InFlight

STARTED = "2026-12-07T12:00:00Z"


def policy(mode: str = "Apply", namespaces: tuple[str, ...] = ("ns",)) -> Any:
    spec = {"mode": mode, "triggers": {"freeGPUs": {"below": 3}}, "selector": {"namespaces": list(namespaces)}}
    return parse_policy({"metadata": {"name": "p", "generation": 1}, "spec": spec})


def pod(ns: str = "ns", name: str = "a", uid: str = "uid-a") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "uid": uid, "labels": {"app": "a"}}, "spec": {}}


def flight(ns: str = "ns", name: str = "a", uid: str = "uid-a", started: str = STARTED) -> dict[str, Any]:
    placement, req_id = move_placement_name("p", uid, started)
    return {
        "placement": f"{ns}/{placement}",
        "pod": f"{ns}/{name}",
        "podUID": uid,
        "startedAt": started,
        "node": "n0",
        "gpus": ["gpu-1"],
        "reqID": req_id,
    }


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path / "key"
    path.write_text("k" * 40 + "\n")
    return str(path)


def test_a_signed_intent_verifies_and_any_change_breaks_it(key_file: str) -> None:
    signer = IntentSigner(key_file)
    f = flight()
    signed = {**f, SIGNATURE: signer.sign("policy-uid", f)}
    assert signer.verify("policy-uid", signed)
    assert not signer.verify("another-policy-uid", signed)  # not replayed onto a recreated policy
    for field, value in (("node", "n9"), ("gpus", ["gpu-0"]), ("pod", "other/a"), ("placement", "other/x")):
        assert not signer.verify("policy-uid", {**signed, field: value}), field
    assert not signer.verify("policy-uid", f)  # unsigned
    assert not signer.verify("policy-uid", {**f, SIGNATURE: "0" * 64})  # forged


def test_replicas_with_the_same_key_agree_and_other_keys_do_not(key_file: str, tmp_path: Path) -> None:
    f = flight()
    signed = {**f, SIGNATURE: IntentSigner(key_file).sign("u", f)}
    assert IntentSigner(key_file).verify("u", signed)  # a new leader with the chart's shared Secret
    other = tmp_path / "other"
    other.write_text("o" * 40)
    assert not IntentSigner(str(other)).verify("u", signed)
    assert not IntentSigner("").verify("u", signed)  # a process with its own key


def test_a_short_or_missing_key_file_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("too short")
    with pytest.raises(IntentKeyError, match="at least 32 bytes"):
        IntentSigner(str(short))
    with pytest.raises(IntentKeyError, match="No such file"):
        IntentSigner(str(tmp_path / "absent"))


def refusal(policy: Any, flight: dict[str, Any], pod: dict[str, Any] | None) -> str:
    typed = InFlight.from_dict(flight)
    assert typed is not None
    return intent_refusal(policy, typed, pod)


def test_what_an_intent_says_must_be_a_move_its_policy_could_make() -> None:
    assert refusal(policy(), flight(), pod()) == ""
    # the case: a DryRun policy that selects another namespace, an intent naming a pod in X
    forged = flight(ns="x")
    assert "DryRun mode" in refusal(policy("DryRun"), forged, pod(ns="x"))
    assert "does not select" in refusal(policy(), forged, pod(ns="x"))
    assert "gone" in refusal(policy(), flight(), None)
    assert "not the placement" in refusal(policy(), flight(), pod(uid="another-uid"))
    assert "not the placement" in refusal(policy(), {**flight(), "placement": "ns/chosen"}, pod())
    assert "reqID" in refusal(policy(), {**flight(), "reqID": "chosen"}, pod())
    bad_time = flight(started="not a time")
    assert refusal(policy(), bad_time, pod())


def test_the_intent_key_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.config import Settings

    monkeypatch.setenv("HAMI_PLACE_INTENT_KEY_FILE", "/etc/hami-place/intent/key")
    assert Settings.from_env().intent_key_file == "/etc/hami-place/intent/key"
