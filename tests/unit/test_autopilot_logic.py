"""The autopilot's decisions without a cluster (agent/autopilot_plan.py, agent/autopilot.py's
status pieces): which trigger fires, the plan within the policy's budgets and selector, pods whose
move failed left alone, and the status bookkeeping a new leader relies on."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.autopilot import _record_result
from agent.autopilot_plan import decide, surge_leaving, whole_free_gpus
from agent.move_placements import create_retry_open, move_placement_name
from agent.policy_writer import with_state as _with
from hami_place_core.defrag_policy import parse_policy
from hami_place_core.policy_status import InFlight, PolicyStatus
from hami_place_core.state import build_state
from tests.planner_fixtures import node, pod

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)


def policy(**spec: Any) -> Any:
    base = {"triggers": {"freeGPUs": {"below": 3}}, "selector": {"namespaces": ["ns"]}, "minInterval": "0s"}
    return parse_policy({"metadata": {"name": "p", "generation": 1}, "spec": {**base, **spec}})


def scattered() -> tuple[Any, dict[str, Any]]:
    """One 4-GPU node, three 30% pods on GPUs 0-2: one whole GPU free, two more after two moves."""
    pods = [pod(f"s{i}", "n0", (i,), 30) for i in range(3)]
    state = build_state([node("n0", 4, labels={"pool": "a"})], pods)
    return state, {f"ns/s{i}": p for i, p in enumerate(pods)}


def pending(name: str, gpus: int, since: dt.datetime) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-12-06T11:00:00Z"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 CardInsufficientCore",
                    "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ],
        },
    }


def test_free_gpu_trigger_plans_the_moves_that_free_gpus() -> None:
    state, pods = scattered()
    assert whole_free_gpus(state) == 1
    d = decide(policy(), state, pods, {}, ["kube-system"], NOW)
    assert d.trigger == "1 whole GPUs free (below 3)" and not d.blocked
    assert len(d.moves) == 2 and d.gpus_freed == 2
    # The status shows the demand's room (the running mix: 1-GPU pods) before and after.
    assert d.room == {
        "source": "the running mix",
        "freeNodes": {"before": 0, "after": 0},
        "pods": [{"shape": "1", "wanted": 3, "before": 1, "after": 3}],
    }


def test_a_plan_cut_by_moves_per_node_reports_the_room_of_the_moves_that_run() -> None:
    state, pods = scattered()
    d = decide(policy(budgets={"movesPerNode": 1}), state, pods, {}, ["kube-system"], NOW)
    assert (len(d.moves), d.gpus_freed, d.notes) == (1, 1, ("cut at movesPerNode 1 on node n0",))
    assert d.room is not None and d.room["pods"] == [{"shape": "1", "wanted": 3, "before": 1, "after": 2}]


def test_no_trigger_no_plan() -> None:
    state, pods = scattered()
    assert decide(policy(triggers={"freeGPUs": {"below": 1}}), state, pods, {}, [], NOW).trigger == ""


def test_the_old_pod_a_surge_is_removing_is_never_planned_again() -> None:
    """After a surge scaled its Deployment back down, the old pod stays in the cache (not even
    terminating) until the ReplicaSet controller deletes it: a plan made then must leave it alone
    (it moved the same pod twice, and the second move failed as "pod is gone")."""
    from hami_place_core.placement import Placement

    def surge(phase: str, remove: str) -> Placement:
        spec = {"reqID": "abcde", "podSelector": {"matchLabels": {"app": "x"}}, "nodeName": "n0", "evictPod": remove}
        status = {"phase": phase, "strategy": "Surge", "removePod": remove}
        return Placement.from_object(
            {"metadata": {"name": f"mv-{remove}", "namespace": "ns"}, "spec": spec, "status": status}
        )

    leaving = surge_leaving([surge("Completed", "s0"), surge("ScalingDown", "s1"), surge("Failed", "s2")])
    assert leaving == {
        "ns/s0": "being removed by surge placement ns/mv-s0",
        "ns/s1": "being removed by surge placement ns/mv-s1",
    }
    state, pods = scattered()
    d = decide(policy(), state, pods, {}, [], NOW, leaving)
    assert d.moves and all(m.pod not in leaving for m in d.moves), d.moves


def test_pods_outside_the_selector_and_cooling_pods_stay() -> None:
    state, pods = scattered()
    d = decide(policy(selector={"namespaces": ["other"]}), state, pods, {}, [], NOW)
    assert d.trigger and not d.moves and "no moves within the budgets" in d.blocked
    d = decide(policy(), state, pods, {"ns/s0": "PDB", "ns/s1": "PDB"}, [], NOW)
    assert all(m.pod not in ("ns/s0", "ns/s1") for m in d.moves)


def test_per_node_budget_cuts_the_plan_to_a_valid_prefix() -> None:
    state, pods = scattered()
    d = decide(policy(budgets={"movesPerNode": 1}), state, pods, {}, [], NOW)
    assert len(d.moves) == 1 and "movesPerNode 1" in d.notes[0]


def test_node_selector_limits_the_pool() -> None:
    state, pods = scattered()
    d = decide(policy(nodeSelector={"matchLabels": {"pool": "b"}}), state, pods, {}, [], NOW)
    assert d.trigger == "0 whole GPUs free (below 3)" and not d.moves


def test_a_pending_pod_gets_room_before_the_free_gpu_trigger() -> None:
    state, pods = scattered()
    waiting = pending("big", 2, NOW - dt.timedelta(minutes=10))
    spec = {"triggers": {"pendingPods": {"after": "5m"}, "freeGPUs": {"below": 3}}}
    d = decide(policy(**spec), state, {**pods, "ns/big": waiting}, {}, [], NOW)
    assert d.pending is not None and d.pending.key == "ns/big" and d.node == "n0" and len(d.gpus) == 2
    assert d.trigger == "pod ns/big unschedulable since 2026-12-06T11:50:00Z" and len(d.moves) == 1


def test_a_pod_pending_for_less_than_after_does_not_fire() -> None:
    state, pods = scattered()
    waiting = pending("big", 2, NOW - dt.timedelta(minutes=2))
    d = decide(policy(triggers={"pendingPods": {"after": "5m"}}), state, {**pods, "ns/big": waiting}, {}, [], NOW)
    assert d.trigger == ""


def test_an_impossible_pending_pod_blocks_with_the_reason() -> None:
    state, pods = scattered()
    waiting = pending("huge", 8, NOW - dt.timedelta(minutes=10))
    d = decide(policy(triggers={"pendingPods": {"after": "1m"}}), state, {**pods, "ns/huge": waiting}, {}, [], NOW)
    assert d.trigger.startswith("1 GPU pod(s) unschedulable") and d.blocked.startswith("ns/huge: ")


def test_the_same_intent_names_the_same_placement() -> None:
    a = move_placement_name("pack", "uid-1", "2026-12-06T12:00:00Z")
    assert a == move_placement_name("pack", "uid-1", "2026-12-06T12:00:00Z")
    assert a != move_placement_name("pack", "uid-2", "2026-12-06T12:00:00Z")
    assert len(a[1]) >= 5 and a[0].startswith("autopilot-pack-")


def test_a_finished_move_is_recorded_once_and_a_failed_pod_cools_down() -> None:
    flight = {"placement": "ns/autopilot-p-1", "pod": "ns/s0"}
    status = {
        "inFlight": flight,
        "recentMoves": [{"pod": "ns/s0", "placement": "ns/autopilot-p-1", "startedAt": "x", "result": "InFlight"}],
        "movesFailed": 2,
    }
    typed = PolicyStatus.from_dict(status)
    assert typed.in_flight is not None
    out = _record_result(typed, typed.in_flight, "Failed", "PDB blocked", NOW).to_dict()
    assert "inFlight" not in out and out["movesFailed"] == 3
    assert out["recentMoves"][0]["result"] == "Failed"
    assert out["failedPods"] == [{"pod": "ns/s0", "failedAt": "2026-12-06T12:00:00Z", "reason": "PDB blocked"}]
    assert "inFlight" in status  # the input is not changed


def test_ready_condition_keeps_its_transition_time_while_unchanged() -> None:
    obj = {"metadata": {"generation": 4}}
    first = _with({}, NOW, obj, "Idle", "no trigger fired")
    later = _with(first, NOW + dt.timedelta(minutes=5), obj, "Planned", "x")
    assert later["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]
    assert later["observedGeneration"] == 4 and later["state"] == "Planned"
    bad = _with(later, NOW + dt.timedelta(minutes=6), obj, "Blocked", "invalid policy: x", ready=False)
    assert bad["conditions"][0]["status"] == "False" and bad["conditions"][0]["reason"] == "InvalidPolicy"


def test_a_transient_create_failure_is_retried_for_three_minutes_then_fails_the_move() -> None:
    def flight(minutes_ago: float) -> InFlight:
        return InFlight(started_at=(NOW - dt.timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ"))

    assert create_retry_open(flight(0.5), NOW) and create_retry_open(flight(2.9), NOW)
    assert not create_retry_open(flight(3.1), NOW)
    assert create_retry_open(InFlight(), NOW)  # no recorded start: counted from now
