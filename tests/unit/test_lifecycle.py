"""The placement lifecycle (hami_place_core.lifecycle): every phase x every observation, for a pin
and for a move, against a table written out here (not derived from the module's own), plus the
messages users read and the Mermaid rendering."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from hami_place_core.lifecycle import EDGES, TABLE, Observation, Seen, decide, mermaid
from hami_place_core.placement import Placement
from hami_place_core.placement_status import Phase
from hami_place_core.problems import Code, Problem

TERMINAL = (Phase.COMPLETED, Phase.FAILED, Phase.CANCELLED)

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
STAMP = "2026-01-02T03:04:05Z"
P = Phase
S = Seen

# (phase, observation) -> next phase, for a move (evictPod set). Everything else is ignored.
MOVE = {
    (P.PENDING, S.POD_CLAIMED): P.CLAIMED,
    (P.EVICTING, S.POD_CLAIMED): P.CLAIMED,
    (P.WAITING, S.POD_CLAIMED): P.CLAIMED,
    (P.CLAIMED, S.POD_APPEARED): P.BOUND,
    (P.CLAIMED, S.LEASE_EXPIRED): P.WAITING,  # the move's pod was evicted (evictedAt in the status)
    (P.BOUND, S.POD_UNSCHEDULED): P.BOUND,
    (P.BOUND, S.ALLOCATED_ON_TARGET): P.COMPLETED,
    (P.BOUND, S.ALLOCATED_OFF_TARGET): P.FAILED,
    (P.BOUND, S.POD_LOST): P.FAILED,
    (P.BOUND, S.POD_ON_OTHER_NODE): P.FAILED,
    (P.PENDING, S.MOVE_REFUSED): P.FAILED,
    (P.PENDING, S.MOVE_SLOT_BUSY): P.PENDING,
    (P.PENDING, S.MOVE_STARTED): P.EVICTING,
    (P.EVICTING, S.EVICTION_ATTEMPTED): P.EVICTING,
    (P.EVICTING, S.EVICTION_BLOCKED): P.EVICTING,
    (P.EVICTING, S.EVICTION_ACCEPTED): P.WAITING,
    (P.EVICTING, S.EVICTION_NOT_FOUND): P.WAITING,
    (P.EVICTING, S.EVICTED_POD_GONE): P.WAITING,
    (P.CLAIMED, S.EVICTED_POD_GONE): P.CLAIMED,  # only without evictedAt: see the fixtures below
    (P.BOUND, S.EVICTED_POD_GONE): P.BOUND,
    (P.EVICTING, S.EVICTION_FORBIDDEN): P.FAILED,
    (P.EVICTING, S.EVICTION_DEADLINE): P.FAILED,
    (P.WAITING, S.REPLACEMENT_UNPINNED): P.FAILED,
    (P.WAITING, S.REPLACEMENT_DEADLINE): P.FAILED,
    (P.CLAIMED, S.REPLACEMENT_DEADLINE): P.FAILED,
    (P.BOUND, S.REPLACEMENT_DEADLINE): P.FAILED,
    **{(phase, S.CANCEL): P.CANCELLED for phase in (P.PENDING, P.CLAIMED, P.BOUND, P.EVICTING, P.WAITING)},
    (P.PENDING, S.SURGE_STARTED): P.SCALING_UP,  # the agent sends it only for strategy Surge/Auto
    (P.PENDING, S.SURGE_ABORTED): P.FAILED,
}
# A surge move (status.strategy Surge) once it has added a replica: what would end it goes to
# ScalingDown, which restores the count before the terminal phase.
SURGE = {
    (P.SCALING_UP, S.POD_CLAIMED): P.CLAIMED,
    (P.SCALING_UP, S.SCALED_UP): P.SCALING_UP,
    (P.SCALING_UP, S.SURGE_ABORTED): P.FAILED,
    (P.SCALING_UP, S.REPLACEMENT_UNPINNED): P.SCALING_DOWN,
    (P.SCALING_UP, S.REPLACEMENT_DEADLINE): P.SCALING_DOWN,
    (P.SCALING_UP, S.CANCEL): P.SCALING_DOWN,
    (P.CLAIMED, S.POD_APPEARED): P.BOUND,
    (P.CLAIMED, S.LEASE_EXPIRED): P.SCALING_UP,
    (P.CLAIMED, S.SCALED_UP): P.CLAIMED,
    (P.CLAIMED, S.REPLACEMENT_DEADLINE): P.SCALING_DOWN,
    (P.CLAIMED, S.CANCEL): P.SCALING_DOWN,
    (P.BOUND, S.POD_UNSCHEDULED): P.BOUND,
    (P.BOUND, S.SCALED_UP): P.BOUND,
    **{
        (P.BOUND, seen): P.SCALING_DOWN
        for seen in (
            S.ALLOCATED_ON_TARGET,
            S.ALLOCATED_OFF_TARGET,
            S.POD_LOST,
            S.POD_ON_OTHER_NODE,
            S.REPLACEMENT_DEADLINE,
            S.CANCEL,
        )
    },
    (P.SCALING_DOWN, S.SCALED_DOWN): P.COMPLETED,  # surgeOutcome Completed in the fixture
}
SURGE_STATUS = {
    "strategy": "Surge",
    "surgeTarget": "Deployment/web",
    "surgeReplicas": 1,
    "removePod": "old",
    "removePodUID": "uid-old",
    "moveStartedAt": "2026-01-02T03:00:00Z",
    "workload": "ns/ReplicaSet/rs",
    "siblingUIDs": ["uid-old"],
}
SURGE_PHASES = {
    P.SCALING_UP: {"phase": "ScalingUp", "reason": "ScalingUp"},
    P.SCALING_DOWN: {
        "phase": "ScalingDown",
        "reason": "Allocated",
        "surgeOutcome": "Completed",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Allocated", "message": "HAMi allocated"}],
    },
}
# A pin (no evictPod): only the claim, the bound pod and cancel concern it.
PIN = {
    (P.PENDING, S.POD_CLAIMED): P.CLAIMED,
    (P.CLAIMED, S.POD_APPEARED): P.BOUND,
    (P.CLAIMED, S.LEASE_EXPIRED): P.PENDING,
    (P.BOUND, S.POD_UNSCHEDULED): P.BOUND,
    (P.BOUND, S.ALLOCATED_ON_TARGET): P.COMPLETED,
    (P.BOUND, S.ALLOCATED_OFF_TARGET): P.FAILED,
    (P.BOUND, S.POD_LOST): P.FAILED,
    (P.BOUND, S.POD_ON_OTHER_NODE): P.FAILED,
    # a pin is never Evicting or WaitingForPod; if one were, a claim would still be legal there
    (P.EVICTING, S.POD_CLAIMED): P.CLAIMED,
    (P.WAITING, S.POD_CLAIMED): P.CLAIMED,
    **{(phase, S.CANCEL): P.CANCELLED for phase in (P.PENDING, P.CLAIMED, P.BOUND, P.EVICTING, P.WAITING)},
}

# The status each phase has when the agent reaches it (for a move; a pin has no move fields).
STATUS: dict[Phase, dict[str, Any]] = {
    P.PENDING: {},
    P.EVICTING: {
        "phase": "Evicting",
        "reason": "Evicting",
        "message": "evicting old so that its controller recreates it on n1",
        "moveStartedAt": "2026-01-02T03:00:00Z",
        "evictedPod": "old",
        "evictedPodUID": "uid-old",
        "evictionAttempts": 1,
        "workload": "ns/ReplicaSet/rs",
        "siblingUIDs": ["uid-old"],
    },
    P.WAITING: {"phase": "WaitingForPod", "reason": "Evicted", "evictedAt": "2026-01-02T03:01:00Z"},
    P.CLAIMED: {
        "phase": "Claimed",
        "reason": "Claimed",
        "claim": "tok",
        "claimedBy": "agent-0",
        "claimedAt": "2026-01-02T03:02:00Z",
        "claimLeaseExpiresAt": "2026-01-02T03:03:00Z",
        "targetUUIDs": ["GPU-a", "GPU-b"],
    },
    P.BOUND: {
        "phase": "Bound",
        "reason": "PodBound",
        "claim": "tok",
        "targetUUIDs": ["GPU-a", "GPU-b"],
        "boundPod": "new",
        "boundPodUID": "uid-new",
    },
    P.COMPLETED: {"phase": "Completed", "reason": "Allocated", "consumedAt": "2026-01-02T03:03:30Z"},
    P.FAILED: {"phase": "Failed", "reason": "PodGone"},
    P.CANCELLED: {"phase": "Cancelled", "reason": "Cancelled"},
}
# Each observation with the data its guards need.
SEEN = {
    S.POD_CLAIMED: Observation(S.POD_CLAIMED, pod="new", claim="tok2", agent="agent-1", lease_seconds=60, uuids=("u",)),
    S.POD_APPEARED: Observation(S.POD_APPEARED, pod="new", pod_uid="uid-new", claim="tok"),
    S.LEASE_EXPIRED: Observation(S.LEASE_EXPIRED),
    S.POD_UNSCHEDULED: Observation(S.POD_UNSCHEDULED, reason="FilteringFailed", detail="no GPU fits"),
    S.ALLOCATED_ON_TARGET: Observation(S.ALLOCATED_ON_TARGET, uuids=("GPU-b", "GPU-a")),
    S.ALLOCATED_OFF_TARGET: Observation(S.ALLOCATED_OFF_TARGET, uuids=("GPU-c",)),
    S.POD_LOST: Observation(S.POD_LOST),
    S.POD_ON_OTHER_NODE: Observation(S.POD_ON_OTHER_NODE, node="n2"),
    S.MOVE_REFUSED: Observation(S.MOVE_REFUSED, problems=(Problem(Code.NODE_NOT_FOUND, "node n1 not found"),)),
    S.MOVE_SLOT_BUSY: Observation(S.MOVE_SLOT_BUSY, detail="3 moves in flight cluster-wide (limit 3)"),
    S.MOVE_STARTED: Observation(S.MOVE_STARTED, pod_uid="uid-old", workload="ns/ReplicaSet/rs", siblings=("a",)),
    S.EVICTION_ATTEMPTED: Observation(S.EVICTION_ATTEMPTED, attempts=2),
    S.EVICTION_ACCEPTED: Observation(S.EVICTION_ACCEPTED, attempts=1),
    S.EVICTION_BLOCKED: Observation(S.EVICTION_BLOCKED, attempts=1, retry_seconds=2, detail="PDB x allows 0"),
    S.EVICTION_NOT_FOUND: Observation(S.EVICTION_NOT_FOUND, attempts=1),
    S.EVICTION_FORBIDDEN: Observation(S.EVICTION_FORBIDDEN, detail="403 forbidden"),
    S.EVICTED_POD_GONE: Observation(S.EVICTED_POD_GONE, attempts=1),
    S.EVICTION_DEADLINE: Observation(S.EVICTION_DEADLINE, seconds=300),
    S.REPLACEMENT_UNPINNED: Observation(S.REPLACEMENT_UNPINNED, pod="stray"),
    S.REPLACEMENT_DEADLINE: Observation(S.REPLACEMENT_DEADLINE, seconds=600),
    S.CANCEL: Observation(S.CANCEL),
    S.SURGE_STARTED: Observation(
        S.SURGE_STARTED, pod_uid="uid-old", workload="ns/ReplicaSet/rs", scaled="Deployment/web", replicas=1
    ),
    S.SCALED_UP: Observation(S.SCALED_UP),
    S.SURGE_ABORTED: Observation(S.SURGE_ABORTED, detail="HorizontalPodAutoscaler web owns the replica count"),
    S.SCALED_DOWN: Observation(S.SCALED_DOWN),
}

# A few cells need more status than the phase's usual one to reach their edge.
OVERRIDES = {(P.CLAIMED, S.LEASE_EXPIRED, True): {"evictedAt": "2026-01-02T03:01:00Z"}}


def placement(at: Phase, move: bool = True, **status: Any) -> Placement:
    spec: dict[str, Any] = {
        "reqID": "req-1",
        "podSelector": {"matchLabels": {"app": "web"}},
        "nodeName": "n1",
        "gpuDevices": ["gpu-0", "gpu-1"],
    }
    if move:
        spec["evictPod"] = "old"
    base = dict(STATUS[at])
    if not move:
        base = {k: v for k, v in base.items() if k not in ("evictedAt", "moveStartedAt", "evictedPod")}
    return Placement.from_object(
        {
            "metadata": {"name": "pl", "namespace": "ns", "resourceVersion": "7", "generation": 1},
            "spec": spec,
            "status": {**base, **status},
        }
    )


def test_the_declared_table_is_the_one_written_here() -> None:
    declared = {(e.source, e.seen, e.target) for e in EDGES}
    expected = {(*k, v) for table in (MOVE, SURGE) for k, v in table.items()}
    expected |= {(P.CLAIMED, S.LEASE_EXPIRED, P.PENDING)}  # a pin, or a move before its eviction
    expected |= {(P.SCALING_DOWN, S.SCALED_DOWN, outcome) for outcome in (P.FAILED, P.CANCELLED)}
    assert declared == expected
    assert set(TABLE[(P.CLAIMED, S.LEASE_EXPIRED)]) == {P.PENDING, P.WAITING, P.SCALING_UP}
    assert set(TABLE) == set(MOVE) | set(SURGE)


def surge_placement(at: Phase) -> Placement:
    base = placement(at if at not in SURGE_PHASES else P.PENDING)
    status = {**base.raw["status"], **SURGE_STATUS, **SURGE_PHASES.get(at, {})}
    return Placement.from_object({**base.raw, "status": status})


@pytest.mark.parametrize("phase", [P.SCALING_UP, P.CLAIMED, P.BOUND, P.SCALING_DOWN, *TERMINAL])
@pytest.mark.parametrize("seen", list(Seen))
def test_every_surge_phase_and_observation(phase: Phase, seen: Seen) -> None:
    p = surge_placement(phase)
    t = decide(p, SEEN[seen], NOW)
    expected = SURGE.get((phase, seen))
    if expected is None:
        assert t is None, f"{seen} must be ignored by a surge in {phase}"
        return
    assert t is not None and (t.source, t.target) == (phase, expected)
    assert (t.reason, t.message) == (t.status.reason or "", t.status.message or "")


def test_a_surge_that_ends_restores_the_count_first() -> None:
    done = decide(surge_placement(P.BOUND), SEEN[S.ALLOCATED_ON_TARGET], NOW)
    assert done is not None and done.target == P.SCALING_DOWN
    st = done.status
    assert (st.surge_outcome, st.remove_pod, st.remove_pod_uid, st.reason) == (
        "Completed",
        "old",
        "uid-old",
        "Allocated",
    )
    assert st.message.endswith("; removing pod old, then restoring Deployment/web to 1 replicas")
    failed = decide(surge_placement(P.BOUND), SEEN[S.ALLOCATED_OFF_TARGET], NOW)
    assert failed is not None and failed.status.surge_outcome == "Failed"
    assert (failed.status.remove_pod, failed.status.remove_pod_uid) == ("new", "uid-new")  # the new pod goes
    stray = decide(surge_placement(P.SCALING_UP), SEEN[S.REPLACEMENT_UNPINNED], NOW)
    assert stray is not None and (stray.status.remove_pod, stray.status.remove_pod_uid) == ("stray", None)
    # then the count is restored and the placement ends as decided, with the decision's reason
    restoring = Placement.from_object({**surge_placement(P.BOUND).raw, "status": done.status.to_dict()})
    end = decide(restoring, Observation(S.SCALED_DOWN), NOW)
    assert end is not None and (end.target, end.reason) == (P.COMPLETED, "Allocated")
    assert end.message.endswith("; Deployment/web is back to 1 replicas")
    changed = decide(restoring, Observation(S.SCALED_DOWN, detail="Deployment/web has 5 replicas, not 2"), NOW)
    assert changed is not None and changed.message.endswith("; Deployment/web has 5 replicas, not 2")
    assert changed.notes[-1].warning


def test_a_surge_records_no_eviction_and_a_move_no_scale_up() -> None:
    assert decide(surge_placement(P.CLAIMED), SEEN[S.EVICTED_POD_GONE], NOW) is None
    assert decide(placement(P.CLAIMED), SEEN[S.SCALED_UP], NOW) is None
    # a surge phase without strategy Surge is a status no agent writes: left alone, never a crash
    crafted = placement(P.PENDING, phase="ScalingUp")
    for obs in SEEN.values():
        t = decide(crafted, obs, NOW)
        assert t is None or t.target != P.SCALING_DOWN


@pytest.mark.parametrize("move", [True, False], ids=["move", "pin"])
@pytest.mark.parametrize("phase", [p for p in Phase if p not in SURGE_PHASES])
@pytest.mark.parametrize("seen", list(Seen))
def test_every_phase_and_observation(phase: Phase, seen: Seen, move: bool) -> None:
    p = placement(phase, move, **OVERRIDES.get((phase, seen, move), {}))
    t = decide(p, SEEN[seen], NOW)
    expected = (MOVE if move else PIN).get((phase, seen))
    if expected is None:
        assert t is None, f"{seen} must be ignored in {phase}"
        return
    assert t is not None, f"{seen} must move {phase} to {expected}"
    assert (t.source, t.target, t.status.current_phase) == (phase, expected, expected)
    assert t.seen == seen and t.old == p.status
    assert (t.reason, t.message) == (t.status.reason or "", t.status.message or "")
    assert t.changes, "a transition always changes something"


def test_terminal_phases_never_move() -> None:
    for phase in (P.COMPLETED, P.FAILED, P.CANCELLED):
        for move in (True, False):
            assert all(decide(placement(phase, move), obs, NOW) is None for obs in SEEN.values())


def test_an_unknown_phase_is_left_alone() -> None:
    p = placement(P.PENDING, phase="Paused")
    assert p.phase == "Paused" and p.status.problems
    assert all(decide(p, obs, NOW) is None for obs in SEEN.values())


def test_guards() -> None:
    claimed = placement(P.CLAIMED)
    # a pod carrying another claim's token does not bind this one
    assert decide(claimed, Observation(S.POD_APPEARED, pod="x", claim="other"), NOW) is None
    assert decide(claimed, Observation(S.POD_CLAIMED), NOW) is None  # a claim without a token
    # an eviction already recorded is not recorded twice
    assert decide(placement(P.CLAIMED, evictedAt=STAMP), SEEN[S.EVICTED_POD_GONE], NOW) is None
    # allocation on/off target is checked against the status, not trusted from the observation
    bound = placement(P.BOUND)
    assert decide(bound, Observation(S.ALLOCATED_ON_TARGET, uuids=("GPU-c",)), NOW) is None
    assert decide(bound, Observation(S.ALLOCATED_OFF_TARGET, uuids=("GPU-a", "GPU-b")), NOW) is None
    assert decide(placement(P.PENDING), Observation(S.MOVE_REFUSED), NOW) is None  # refused for nothing
    # nothing changes, nothing is written: the same slot message twice, the same scheduler verdict
    waiting = placement(P.PENDING, phase="Pending", reason="WaitingForMoveSlot", message="waiting: busy")
    assert decide(waiting, Observation(S.MOVE_SLOT_BUSY, detail="busy"), NOW) is None
    t = decide(bound, SEEN[S.POD_UNSCHEDULED], NOW)
    assert t is not None and decide(placement(P.BOUND, **t.changes), SEEN[S.POD_UNSCHEDULED], NOW) is None


def test_claim_and_bind_write_what_the_agent_always_wrote() -> None:
    p = placement(P.PENDING, move=False)
    t = decide(p, SEEN[S.POD_CLAIMED], NOW)
    assert t is not None
    assert t.status.to_dict() == {
        "phase": "Claimed",
        "reason": "Claimed",
        "message": "claimed at admission by pod new; waiting for it to appear",
        "claim": "tok2",
        "claimedBy": "agent-1",
        "claimedAt": STAMP,
        "claimLeaseExpiresAt": "2026-01-02T03:05:05Z",
        "targetUUIDs": ["u"],
    }
    assert [(n.reason, n.message, n.pod) for n in t.notes] == [
        ("Claimed", "claimed by new pod new: pinned to n1 GPUs u", None)
    ]
    claimed = placement(P.CLAIMED, move=False)
    t = decide(claimed, SEEN[S.POD_APPEARED], NOW)
    assert t is not None
    assert t.changes == {
        "phase": "Bound",
        "reason": "PodBound",
        "message": "pod new carries the pin to n1; waiting for HAMi to allocate the GPUs",
        "boundPod": "new",
        "boundPodUID": "uid-new",
        "conditions": [
            {
                "type": "Claimed",
                "status": "True",
                "reason": "PodBound",
                "message": "pod new was pinned at admission",
                "lastTransitionTime": STAMP,
                "observedGeneration": 1,
            }
        ],
        "claimLeaseExpiresAt": None,
    }
    assert [(n.reason, n.pod, n.pod_uid) for n in t.notes] == [("Bound", None, None), ("Pinned", "new", "uid-new")]
    assert t.notes[1].message == "pinned by HamiPodPlacement pl (reqID req-1) to n1 GPUs gpu-0, gpu-1"


def test_a_lapsed_claim_drops_the_claim_and_keeps_the_moves_record() -> None:
    t = decide(placement(P.CLAIMED, evictedAt=STAMP, evictedPodUID="uid-old"), SEEN[S.LEASE_EXPIRED], NOW)
    assert t is not None and t.target == P.WAITING
    assert t.status.to_dict() == {
        "phase": "WaitingForPod",
        "reason": "ClaimLeaseExpired",
        "message": "the pod claimed at 2026-01-02T03:02:00Z never appeared (its admission was rejected or lost); "
        "waiting for the next matching pod",
        "evictedAt": STAMP,
        "evictedPodUID": "uid-old",
    }
    assert t.notes[0].warning
    # claimed during Evicting, before the eviction was recorded: back to Pending
    t = decide(placement(P.CLAIMED), SEEN[S.LEASE_EXPIRED], NOW)
    assert t is not None and t.target == P.PENDING


def test_completed_and_failed_say_why_on_the_placement_and_the_pod() -> None:
    t = decide(placement(P.BOUND), SEEN[S.ALLOCATED_ON_TARGET], NOW)
    assert t is not None
    assert t.message == "HAMi allocated the target GPUs GPU-a, GPU-b on n1"
    assert t.changes["allocatedDevices"] == ["GPU-a", "GPU-b"] and t.changes["consumedAt"] == STAMP
    assert [(n.reason, n.warning, n.pod) for n in t.notes] == [("Allocated", False, None), ("Allocated", False, "new")]
    assert t.notes[1].message == "HamiPodPlacement pl: HAMi allocated the target GPUs GPU-a, GPU-b on n1"
    cases = {
        S.ALLOCATED_OFF_TARGET: ("AllocationMismatch", "HAMi allocated GPU-c but the target was GPU-a, GPU-b"),
        S.POD_LOST: ("PodGone", "pod new disappeared before HAMi allocated its GPUs"),
        S.POD_ON_OTHER_NODE: ("WrongNode", "pod new was bound to n2, not n1"),
    }
    for seen, (reason, message) in cases.items():
        t = decide(placement(P.BOUND), SEEN[seen], NOW)
        assert t is not None and (t.reason, t.message) == (reason, message)
        ready = t.status.to_dict()["conditions"][-1]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", reason)
        assert "consumedAt" not in t.status.to_dict()


def test_move_messages() -> None:
    t = decide(placement(P.PENDING), SEEN[S.MOVE_STARTED], NOW)
    assert t is not None and t.message == "evicting old so that its controller recreates it on n1"
    assert t.changes == {
        "phase": "Evicting",
        "reason": "Evicting",
        "message": t.message,
        "moveStartedAt": STAMP,
        "evictedPod": "old",
        "evictedPodUID": "uid-old",
        "evictionAttempts": 1,
        "workload": "ns/ReplicaSet/rs",
        "siblingUIDs": ["a"],
    }
    refused = Observation(
        S.MOVE_REFUSED,
        problems=(
            Problem(Code.EVICT_POD_NO_CONTROLLER, "evictPod old has no controller owner"),
            Problem(Code.NODE_NOT_FOUND, "node n1 not found"),
        ),
    )
    t = decide(placement(P.PENDING), refused, NOW)
    assert t is not None and t.reason == "NotRecreatable"
    assert t.message == "refused before any eviction: evictPod old has no controller owner; node n1 not found"
    t = decide(placement(P.PENDING), SEEN[S.MOVE_REFUSED], NOW)
    assert t is not None and t.reason == "InvalidTarget"  # decided by the problems' codes, not their words
    t = decide(placement(P.EVICTING), SEEN[S.EVICTION_BLOCKED], NOW)
    assert t is not None and t.message == "waiting: PDB x allows 0, retry in 2s"
    assert t.changes["nextAttemptAt"] == "2026-01-02T03:04:07Z" and [n.reason for n in t.notes] == ["EvictionBlocked"]
    blocked = placement(P.EVICTING, reason="WaitingForPDB", message=t.message, evictionAttempts=2)
    quiet = decide(blocked, Observation(S.EVICTION_BLOCKED, attempts=3, retry_seconds=4, detail="PDB x"), NOW)
    assert quiet is not None and quiet.notes == ()  # an event on the 1st, 5th, 10th... block only
    t = decide(blocked, SEEN[S.EVICTION_DEADLINE], NOW)
    assert t is not None and t.reason == "BlockedByPDB"
    assert t.message == "gave up evicting old after 300s: waiting: PDB x allows 0, retry in 2s; the pod was not touched"
    t = decide(placement(P.EVICTING), SEEN[S.EVICTION_DEADLINE], NOW)
    assert t is not None and (t.reason, t.message) == (
        "EvictionTimeout",
        "gave up evicting old after 300s; the pod was not touched",
    )
    t = decide(placement(P.EVICTING, nextAttemptAt=STAMP), SEEN[S.EVICTION_ACCEPTED], NOW)
    assert t is not None and "nextAttemptAt" not in t.status.to_dict()
    assert t.message == "old evicted; waiting for its controller to recreate it and for the replacement to be pinned"
    assert [(n.reason, n.pod, n.pod_uid) for n in t.notes] == [("Evicted", None, None), ("Evicted", "old", "uid-old")]
    t = decide(placement(P.BOUND), SEEN[S.EVICTED_POD_GONE], NOW)
    assert t is not None and t.changes == {"evictedAt": STAMP, "evictionAttempts": 1}
    steps = {
        P.WAITING: "waiting for the controller to recreate the pod",
        P.CLAIMED: "waiting for the pinned replacement to appear",
        P.BOUND: "waiting for the replacement to run on the target GPUs",
    }
    for phase, step in steps.items():
        t = decide(placement(phase), SEEN[S.REPLACEMENT_DEADLINE], NOW)
        assert t is not None and (t.reason, t.message) == ("ReplacementTimeout", f"timed out after 600s {step}")
    t = decide(placement(P.EVICTING), SEEN[S.EVICTION_FORBIDDEN], NOW)
    assert t is not None and t.message == "the agent may not evict old: 403 forbidden"
    t = decide(placement(P.WAITING), SEEN[S.REPLACEMENT_UNPINNED], NOW)
    assert t is not None and t.message.startswith("the replacement pod stray was admitted without the pin")


def test_conditions_keep_their_transition_time_while_their_status_holds() -> None:
    t1 = decide(placement(P.EVICTING), SEEN[S.EVICTION_BLOCKED], NOW)
    assert t1 is not None
    later = NOW + dt.timedelta(minutes=1)
    again = placement(P.EVICTING, **t1.changes)
    t2 = decide(again, Observation(S.EVICTION_BLOCKED, attempts=2, retry_seconds=4, detail="PDB y"), later)
    assert t2 is not None
    cond = t2.status.to_dict()["conditions"]
    assert len(cond) == 1 and cond[0]["lastTransitionTime"] == STAMP and cond[0]["message"].startswith("waiting: PDB y")
    t3 = decide(placement(P.EVICTING, **t2.changes), SEEN[S.EVICTION_ACCEPTED], later)
    assert t3 is not None
    cond = t3.status.to_dict()["conditions"]
    assert cond[0]["status"] == "True" and cond[0]["lastTransitionTime"] == "2026-01-02T03:05:05Z"


def test_mermaid_draws_every_edge() -> None:
    text = mermaid()
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2" and lines[1] == "    [*] --> Pending"
    for e in EDGES:
        arrow = next(line for line in lines if line.startswith(f"    {e.source} --> {e.target}: "))
        assert str(e.seen) in arrow
    assert {"    Completed --> [*]", "    Failed --> [*]", "    Cancelled --> [*]"} <= set(lines)
    assert "    WaitingForPod --> Claimed: PodClaimed" in lines
    assert text == mermaid()  # stable: the docs hold this exact text
