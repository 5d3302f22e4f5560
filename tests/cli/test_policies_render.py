"""`kubectl hami-place policies`: its rows, plan summaries, JSON view and detail view, from
hand-written HamiDefragPolicy objects. Pure (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.ops.policies import detail, headers, plan_summary, policy_view, row

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def policy(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiDefragPolicy",
        "metadata": {"name": "gpu-autopilot"},
        "spec": {
            "mode": "Apply",
            "triggers": {"pendingPods": {"after": "5m"}, "freeGPUs": {"below": 2}},
            "selector": {"namespaces": ["ml", "research"], "podSelector": {"matchLabels": {"app": "train"}}},
            "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100"]}]},
            "window": {"schedule": "0 2 * * *", "duration": "2h", "timeZone": "Europe/Berlin"},
            "minInterval": "10m",
            "budgets": {"movesPerRun": 3, "movesPerHour": 6, "movesPerNode": 1, "movesPerWorkload": 1},
        },
        "status": status,
    }


ROOM = {
    "forPod": "ml/train-0",
    "node": "node-a",
    "gpus": ["gpu-0", "gpu-1"],
    "moves": [
        {"pod": "ml/infer-1", "from": "node-a/gpu-0", "to": "node-b/gpu-3"},
        {"pod": "ml/infer-2", "from": "node-a/gpu-1", "to": "node-b/gpu-3"},
        {"pod": "ml/infer-3", "from": "node-a/gpu-1", "to": "node-c/gpu-0"},
    ],
    "computedAt": "2026-12-06T11:59:30Z",
}
BUSY = {
    "state": "Moving",
    "trigger": "pod ml/train-0 pending 6m",
    "message": "moving ml/infer-1 to node-b/gpu-3 (3 move(s) make room for ml/train-0 on node-a/gpu-0,gpu-1)",
    "lastEvaluationTime": "2026-12-06T11:59:48Z",
    "plan": ROOM,
    "inFlight": {
        "placement": "ml/autopilot-gpu-autopilot-1a2b3c4d5e",
        "pod": "ml/infer-1",
        "podUID": "u-1",
        "startedAt": "2026-12-06T11:59:40Z",
        "node": "node-b",
        "gpus": ["gpu-3"],
        "reqID": "1a2b3c4d5e",
    },
    "recentMoves": [
        {"pod": "ml/old-1", "placement": "ml/p-old-1", "startedAt": "2026-12-06T11:20:00Z", "result": "Succeeded"},
        {"pod": "ml/old-2", "placement": "ml/p-old-2", "startedAt": "2026-12-06T11:40:00Z", "result": "Failed"},
        {
            "pod": "ml/infer-1",
            "placement": "ml/autopilot-gpu-autopilot-1a2b3c4d5e",
            "startedAt": "2026-12-06T11:59:40Z",
            "result": "InFlight",
        },
    ],
    "failedPods": [
        {"pod": "ml/old-2", "failedAt": "2026-12-06T11:45:00Z", "reason": "placement ml/p-old-2 Failed: PDB"}
    ],
    "movesSucceeded": 4,
    "movesFailed": 1,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "lastTransitionTime": "2026-12-06T10:00:00Z",
            "reason": "Evaluated",
            "message": "the autopilot evaluates this policy",
        }
    ],
}


@pytest.mark.parametrize(
    ("plan", "text"),
    [
        (ROOM, "3 moves for ml/train-0 -> node-a/gpu-0,gpu-1"),
        ({"moves": [{"pod": "a/b"}, {"pod": "a/c"}], "gpusFreed": 2}, "2 moves free 2 GPUs"),
        ({"moves": [{"pod": "a/b"}], "gpusFreed": 1}, "1 move free 1 GPU"),
        ({"forPod": "ml/x", "node": "n", "gpus": ["gpu-2"], "moves": []}, "0 moves for ml/x -> n/gpu-2"),
        (None, "-"),
    ],
)
def test_plan_summary(plan: Any, text: str) -> None:
    assert plan_summary(plan) == text


def test_row_shows_mode_state_trigger_plan_moves_and_last_evaluation() -> None:
    assert headers(False) == ["NAME", "MODE", "STATE", "TRIGGER", "PLAN", "MOVES", "LAST-EVAL"]
    assert row(policy(**BUSY), False, NOW) == [
        "gpu-autopilot",
        "Apply",
        "Moving",
        "pod ml/train-0 pending 6m",
        "3 moves for ml/train-0 -> node-a/gpu-0,gpu-1",
        "4/1",
        "12s",
    ]
    wide = row(policy(**BUSY), True, NOW)
    assert headers(True)[-1] == "MESSAGE" and wide[-1].startswith("moving ml/infer-1 to node-b/gpu-3")


def test_a_policy_not_evaluated_yet_shows_dashes() -> None:
    fresh = policy()
    del fresh["spec"]["mode"]  # the CRD defaults it; an object read before defaulting says DryRun
    assert row(fresh, False, NOW) == ["gpu-autopilot", "DryRun", "-", "-", "-", "0/0", "-"]
    assert "State:           - (not evaluated yet)" in detail(fresh, NOW)
    assert "Plan: none" in detail(fresh, NOW)


def test_long_cells_are_cut_in_the_table_only() -> None:
    long = policy(state="Blocked", trigger="pod " + "x" * 200 + " pending 6m")
    cell = row(long, False, NOW)[3]
    assert len(cell) == 60 and cell.endswith("…")
    assert row(long, True, NOW)[3] == long["status"]["trigger"]


def test_json_view_is_flat_and_keeps_spec_and_status() -> None:
    v = policy_view(policy(**BUSY))
    assert {k: v[k] for k in ("name", "mode", "suspend", "state", "movesSucceeded", "movesFailed")} == {
        "name": "gpu-autopilot",
        "mode": "Apply",
        "suspend": False,
        "state": "Moving",
        "movesSucceeded": 4,
        "movesFailed": 1,
    }
    assert v["plan"] == "3 moves for ml/train-0 -> node-a/gpu-0,gpu-1"
    assert v["status"]["inFlight"]["pod"] == "ml/infer-1" and v["spec"]["minInterval"] == "10m"


def test_detail_view_shows_spec_plan_flight_history_failures_and_conditions() -> None:
    text = detail(policy(**BUSY), NOW)
    lines = text.splitlines()
    assert "Mode:            Apply  (evicts pods on its own)" in lines
    assert "Moves:           4 succeeded, 1 failed" in lines
    assert "Last evaluation: 12s ago (2026-12-06T11:59:48Z)" in lines
    assert "Triggers:        GPU pods pending for 5m or fewer than 2 whole GPUs free" in lines
    assert "May move:        namespaces ml, research; pods app=train" in lines
    assert "Nodes:           pool In (a100)" in lines
    assert "Window:          0 2 * * * for 2h (Europe/Berlin)" in lines
    assert "Budgets:         3 per run, 6 per hour, 1 per node, 1 per workload; min interval 10m" in lines
    assert "Plan: 3 moves for ml/train-0 -> node-a/gpu-0,gpu-1 (computed 30s ago)" in lines
    moves = [line.split() for line in lines if line.strip()[:1].isdigit() and "node-" in line]
    assert [m[:4] for m in moves[:3]] == [
        ["1", "ml/infer-1", "node-a/gpu-0", "node-b/gpu-3"],
        ["2", "ml/infer-2", "node-a/gpu-1", "node-b/gpu-3"],
        ["3", "ml/infer-3", "node-a/gpu-1", "node-c/gpu-0"],
    ]
    assert (
        "In flight: ml/infer-1 -> node-b/gpu-3 through placement ml/autopilot-gpu-autopilot-1a2b3c4d5e, "
        "started 20s ago (2026-12-06T11:59:40Z)"
    ) in lines
    recent = text.split("Recent moves (newest first):", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[-1] for line in recent.strip().splitlines()[1:]] == ["InFlight", "Failed", "Succeeded"]
    failed = text.split("Failed pods (left out of plans for an hour):", 1)[1].split("\n\n", 1)[0]
    assert "ml/old-2" in failed and "placement ml/p-old-2 Failed: PDB" in failed
    conditions = text.split("Conditions:", 1)[1]
    assert conditions.split()[5:10] == ["Ready", "True", "Evaluated", "2h", "the"]


def test_detail_of_a_suspended_dry_run_policy_without_window() -> None:
    p = policy(state="Suspended", message="spec.suspend is true: nothing is evaluated")
    p["spec"].update(mode="DryRun", suspend=True)
    for key in ("window", "nodeSelector", "budgets", "minInterval"):
        del p["spec"][key]
    p["spec"]["selector"] = {"maxPriority": 100}
    text = detail(p, NOW)
    assert "Mode:            DryRun (suspended)  (plans and records only)" in text
    assert "Window:          any time (no window)" in text
    assert "Nodes:           every HAMi node" in text
    assert "May move:        every served namespace; priority at most 100" in text
    assert "Budgets:         5 per run, 10 per hour, 2 per node, 1 per workload; min interval 5m" in text
    assert "Moves as:        Evict (the pod is evicted; its controller recreates it on the target)" in text
    p["spec"]["moveStrategy"] = "Auto"
    assert "Moves as:        Auto (Surge where it is safe, Evict otherwise)" in detail(p, NOW)
