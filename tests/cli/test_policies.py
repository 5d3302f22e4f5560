"""`kubectl hami-place policies` against the test bed: HamiDefragPolicies whose status is written by
hand through the status subresource (no agent runs here), listed, shown in detail, followed with
-w, and the one-line error when the CRD is not installed."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import defrag_policy as dp
from kubectl_hami_place.cli import main
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import wait_for

pytestmark = pytest.mark.testbed

ROOT = Path(__file__).resolve().parents[2]


def _stamp(seconds_ago: int = 0) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _policy(name: str, label: str, mode: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": dp.API_VERSION,
        "kind": dp.KIND,
        "metadata": {"name": name, "labels": {"hami-place-cli-test": label}},
        "spec": {
            "mode": mode,
            "triggers": {"pendingPods": {"after": "5m"}},
            "selector": {"namespaces": ["ml"]},
            **spec,
        },
    }


ROOM_STATUS: dict[str, Any] = {
    "state": "Moving",
    "message": "moving ml/infer-1 to node-b/gpu-3",
    "trigger": "pod ml/train-0 pending 6m",
    "plan": {
        "forPod": "ml/train-0",
        "node": "node-a",
        "gpus": ["gpu-0", "gpu-1"],
        "moves": [
            {"pod": "ml/infer-1", "from": "node-a/gpu-0", "to": "node-b/gpu-3"},
            {"pod": "ml/infer-2", "from": "node-a/gpu-1", "to": "node-b/gpu-3"},
            {"pod": "ml/infer-3", "from": "node-a/gpu-1", "to": "node-c/gpu-0"},
        ],
    },
    "inFlight": {
        "placement": "ml/autopilot-room-1a2b3c4d5e",
        "pod": "ml/infer-1",
        "podUID": "0c3e",
        "node": "node-b",
        "gpus": ["gpu-3"],
        "reqID": "1a2b3c4d5e",
    },
    "recentMoves": [
        {"pod": "ml/old-2", "placement": "ml/autopilot-room-0f0f0f0f0f", "result": "Failed"},
        {"pod": "ml/infer-1", "placement": "ml/autopilot-room-1a2b3c4d5e", "result": "InFlight"},
    ],
    "failedPods": [{"pod": "ml/old-2", "reason": "placement ml/autopilot-room-0f0f0f0f0f Failed: blocked by a PDB"}],
    "movesSucceeded": 3,
    "movesFailed": 1,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Evaluated",
            "message": "the autopilot evaluates this policy",
        }
    ],
}
FREE_STATUS: dict[str, Any] = {
    "state": "Planned",
    "message": "2 move(s) free 2 whole GPU(s) (DryRun: nothing is moved)",
    "trigger": "2 whole GPUs free, below 4",
    "plan": {
        "gpusFreed": 2,
        "moves": [
            {"pod": "ml/a", "from": "node-a/gpu-1", "to": "node-a/gpu-0"},
            {"pod": "ml/b", "from": "node-a/gpu-3", "to": "node-a/gpu-2"},
        ],
    },
    "movesSucceeded": 0,
    "movesFailed": 0,
}


def _timestamps(status: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(status))
    out["lastEvaluationTime"] = _stamp(5)
    if "plan" in out:
        out["plan"]["computedAt"] = _stamp(5)
    if "inFlight" in out:
        out["inFlight"]["startedAt"] = _stamp(20)
    for m in out.get("recentMoves") or []:
        m["startedAt"] = _stamp(20 if m["result"] == "InFlight" else 600)
    for f in out.get("failedPods") or []:
        f["failedAt"] = _stamp(300)
    for c in out.get("conditions") or []:
        c["lastTransitionTime"] = _stamp(3600)
    return out


def _custom(api: Any) -> Any:
    return client.CustomObjectsApi(api)


def write_status(api: Any, name: str, status: dict[str, Any]) -> None:
    """PUT the status subresource, as the agent does."""
    obj = _custom(api).get_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name)
    obj["status"] = status
    _custom(api).replace_cluster_custom_object_status(dp.GROUP, dp.VERSION, dp.PLURAL, name, obj)


@pytest.fixture
def policies(api: Any) -> Iterator[dict[str, str]]:
    """Three policies labelled for this test only: one making room (Apply, moving), one freeing GPUs
    (DryRun, planned), one not evaluated yet."""
    install_crd(api)
    label = secrets.token_hex(4)
    names = {k: f"cli-{k}-{label}" for k in ("room", "free", "fresh")}
    custom = _custom(api)
    created = []
    try:
        for key, mode, spec in (
            ("room", "Apply", {"window": {"schedule": "0 2 * * *", "duration": "2h"}}),
            ("free", "DryRun", {"triggers": {"freeGPUs": {"below": 4}}}),
            ("fresh", "DryRun", {}),
        ):
            custom.create_cluster_custom_object(
                dp.GROUP, dp.VERSION, dp.PLURAL, _policy(names[key], label, mode, **spec)
            )
            created.append(names[key])
        write_status(api, names["room"], _timestamps(ROOM_STATUS))
        write_status(api, names["free"], _timestamps(FREE_STATUS))
        yield {**names, "selector": f"hami-place-cli-test={label}"}
    finally:
        for name in created:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name)


def run(capsys: pytest.CaptureFixture[str], *args: str, kubeconfig: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["policies", "--kubeconfig", str(kubeconfig), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_table_lists_each_policy_with_its_plan_and_moves(testbed, policies, capsys) -> None:
    code, out, err = run(capsys, "-l", policies["selector"], kubeconfig=testbed.kubeconfig)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "MODE", "STATE", "TRIGGER", "PLAN", "MOVES", "LAST-EVAL"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == sorted([policies["free"], policies["fresh"], policies["room"]])
    room = rows[policies["room"]]
    assert room.split()[1:3] == ["Apply", "Moving"]
    assert "pod ml/train-0 pending 6m" in room
    assert "3 moves for ml/train-0 -> node-a/gpu-0,gpu-1" in room
    assert room.split()[-2] == "3/1" and room.split()[-1].endswith("s")  # evaluated seconds ago
    free = rows[policies["free"]]
    assert free.split()[1:3] == ["DryRun", "Planned"] and "2 moves free 2 GPUs" in free
    assert rows[policies["fresh"]].split()[1:] == ["DryRun", "-", "-", "-", "0/0", "-"]
    code, wide, _ = run(capsys, "-l", policies["selector"], "-o", "wide", kubeconfig=testbed.kubeconfig)
    assert code == 0 and wide.splitlines()[0].split()[-1] == "MESSAGE"
    assert "2 move(s) free 2 whole GPU(s) (DryRun: nothing is moved)" in wide


def test_json_and_yaml(testbed, policies, capsys) -> None:
    code, out, _ = run(capsys, "-l", policies["selector"], "-o", "json", kubeconfig=testbed.kubeconfig)
    assert code == 0
    doc = json.loads(out)
    assert doc["count"] == 3
    by_name = {v["name"]: v for v in doc["items"]}
    room = by_name[policies["room"]]
    assert (room["mode"], room["state"], room["movesSucceeded"], room["movesFailed"]) == ("Apply", "Moving", 3, 1)
    assert room["plan"] == "3 moves for ml/train-0 -> node-a/gpu-0,gpu-1"
    assert room["status"]["inFlight"]["placement"] == "ml/autopilot-room-1a2b3c4d5e"
    assert room["spec"]["window"] == {"schedule": "0 2 * * *", "duration": "2h", "timeZone": "UTC"}  # CRD default
    assert by_name[policies["fresh"]]["state"] is None
    code, out, _ = run(capsys, policies["free"], "-o", "json", kubeconfig=testbed.kubeconfig)
    assert code == 0 and json.loads(out)["name"] == policies["free"]  # one object with NAME, as kubectl get
    import yaml

    code, out, _ = run(capsys, policies["free"], "-o", "yaml", kubeconfig=testbed.kubeconfig)
    assert code == 0 and yaml.safe_load(out)["plan"] == "2 moves free 2 GPUs"


def test_the_detail_view_of_one_policy(testbed, policies, capsys) -> None:
    code, out, err = run(capsys, policies["room"], kubeconfig=testbed.kubeconfig)
    assert code == 0, err
    assert f"Name:            {policies['room']}" in out
    assert "Mode:            Apply  (evicts pods on its own)" in out
    assert "Window:          0 2 * * * for 2h (UTC)" in out
    assert "Budgets:         5 per run, 10 per hour, 2 per node, 1 per workload; min interval 5m" in out  # defaults
    assert "Plan: 3 moves for ml/train-0 -> node-a/gpu-0,gpu-1" in out
    assert "ml/infer-3" in out and "node-c/gpu-0" in out
    assert "In flight: ml/infer-1 -> node-b/gpu-3 through placement ml/autopilot-room-1a2b3c4d5e" in out
    recent = out.split("Recent moves (newest first):", 1)[1].split("\n\n", 1)[0].strip().splitlines()
    assert [line.split()[-1] for line in recent[1:]] == ["InFlight", "Failed"]
    assert "blocked by a PDB" in out.split("Failed pods (left out of plans for an hour):", 1)[1]
    assert "Ready" in out.split("Conditions:", 1)[1] and "Evaluated" in out
    code, out, _ = run(capsys, policies["fresh"], kubeconfig=testbed.kubeconfig)
    assert code == 0 and "State:           - (not evaluated yet)" in out and "Plan: none" in out


def test_a_missing_policy_and_usage_errors(testbed, policies, capsys) -> None:
    code, out, err = run(capsys, "no-such-policy", kubeconfig=testbed.kubeconfig)
    assert (code, out, err) == (1, "", "error: policy no-such-policy not found\n")
    code, _, err = run(capsys, "-o", "xml", kubeconfig=testbed.kubeconfig)
    assert code == 2 and "xml" in err
    code, out, err = run(capsys, "-l", "hami-place-cli-test=nobody", kubeconfig=testbed.kubeconfig)
    assert (code, out) == (0, "") and "no HamiDefragPolicies" in err


def test_watch_re_renders_the_policy_when_its_status_changes(testbed, api, policies) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")}
    env.update(KUBECONFIG=str(testbed.kubeconfig), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubectl_hami_place", "policies", policies["free"], "-w"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")) if proc.stdout else None)
    reader.start()
    try:

        def read_until(text: str) -> bool:
            return text in "".join(list(seen))

        wait_for("the first view", lambda: read_until("State:           Planned"), 30)
        status = _timestamps(FREE_STATUS)
        status.update(state="Blocked", message="no plan within the budgets frees a GPU", plan=None)
        del status["plan"]
        write_status(api, policies["free"], status)
        wait_for("the view re-rendered", lambda: read_until("State:           Blocked"), 30)
        assert "Message:         no plan within the budgets frees a GPU" in "".join(seen)
        _custom(api).delete_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, policies["free"])
        wait_for("the deletion", lambda: read_until(f"{policies['free']} deleted"), 30)
        assert proc.wait(timeout=30) == 0  # NAME -w ends with the policy
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)


def test_without_the_crd_one_line_says_it_is_not_installed(testbed, api, capsys) -> None:
    """The HamiDefragPolicy CRD is deleted (with every policy) and installed again afterwards."""
    ext = client.ApiextensionsV1Api(api)
    name = f"{dp.PLURAL}.{dp.GROUP}"
    install_crd(api)
    ext.delete_custom_resource_definition(name)
    try:

        def gone() -> bool:
            try:
                _custom(api).list_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL)
            except ApiException as e:
                return e.status == 404
            return False

        wait_for("the HamiDefragPolicy CRD to be gone", gone, 60)
        for args in ((), ("some-policy",), ("-w",), ("-o", "json")):
            code, out, err = run(capsys, *args, kubeconfig=testbed.kubeconfig)
            assert (code, out) == (1, ""), args
            assert err == (
                f"error: the HamiDefragPolicy CRD ({name}) is not installed in this cluster: "
                "install the hami-place chart, or kubectl apply -f crds/\n"
            ), args
    finally:
        wait_for("the CRD deleted", lambda: _crd_absent(ext, name), 60)
        install_crd(api)


def _crd_absent(ext: Any, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name)
    except ApiException as e:
        return e.status == 404
    return False
