"""The placement lifecycle as a state machine: (phase, what was observed) -> the next status.

Pure: no clock, no I/O. The agent observes (a pod's admission claimed the placement, the claimed
pod appeared, the Eviction API answered, HAMi allocated GPUs, a deadline passed), asks ``decide``
what follows, and ``agent/transitions.py`` writes it. Which phase an observation may lead to is
data (``EDGES``), so the table is tested as a whole and drawn in the docs (``mermaid``). An
observation with no edge from the current phase is ignored (``decide`` returns None): a terminal
placement never moves, an eviction answer means nothing to a pin, and so on.

The messages are the ones users read in ``kubectl get -o wide``, events and the CLI's progress.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum

from hami_place_core.placement import Placement
from hami_place_core.placement_status import MESSAGE_LIMIT, Condition, Phase, PlacementStatus, merge_conditions
from hami_place_core.problems import EVICT_POD_CODES, Problem, has_code, messages


class Seen(StrEnum):
    """What the agent observed about a placement (the input of the state machine)."""

    POD_CLAIMED = "PodClaimed"  # a new pod's admission claimed it (the mutating webhook)
    POD_APPEARED = "PodAppeared"  # the pod that carries the claim exists
    LEASE_EXPIRED = "LeaseExpired"  # the claimed pod never appeared within the claim lease
    POD_UNSCHEDULED = "PodUnscheduled"  # the bound pod waits; the scheduler said why
    ALLOCATED_ON_TARGET = "AllocatedOnTarget"  # HAMi allocated the target GPUs and the pod runs
    ALLOCATED_OFF_TARGET = "AllocatedOffTarget"  # HAMi allocated other GPUs
    POD_LOST = "PodLost"  # the bound pod is gone (or its name is another pod's now)
    POD_ON_OTHER_NODE = "PodOnOtherNode"  # the bound pod was scheduled elsewhere
    MOVE_REFUSED = "MoveRefused"  # a move's checks failed before any eviction
    MOVE_SLOT_BUSY = "MoveSlotBusy"  # a move waits for a limit (moves in flight, unavailable pods)
    MOVE_STARTED = "MoveStarted"  # the intent to evict, written before the eviction
    EVICTION_ATTEMPTED = "EvictionAttempted"  # one more eviction request is about to be made
    EVICTION_ACCEPTED = "EvictionAccepted"  # the Eviction API answered 201
    EVICTION_BLOCKED = "EvictionBlocked"  # 429: a PodDisruptionBudget allows no disruption
    EVICTION_NOT_FOUND = "EvictionNotFound"  # 404 / 409 (UID precondition): nothing left to evict
    EVICTION_FORBIDDEN = "EvictionForbidden"  # 403: the agent may not evict the pod
    EVICTED_POD_GONE = "EvictedPodGone"  # the pod to evict is gone or terminating
    EVICTION_DEADLINE = "EvictionDeadline"  # spec.timeouts.evictionSeconds passed
    REPLACEMENT_UNPINNED = "ReplacementUnpinned"  # the replacement was admitted without the pin
    REPLACEMENT_DEADLINE = "ReplacementDeadline"  # spec.timeouts.replacementSeconds passed
    CANCEL = "Cancel"  # the placement was withdrawn
    SURGE_STARTED = "SurgeStarted"  # the intent to add a replica, written before the scale-up
    SCALED_UP = "ScaledUp"  # the controller's replica count is one above what it was
    SURGE_ABORTED = "SurgeAborted"  # the scale-up could not be made; nothing was changed
    SCALED_DOWN = "ScaledDown"  # the replica count is restored (or someone else changed it)


# Observations that concern only moves (spec.evictPod): a pin ignores them.
MOVE_ONLY = frozenset(
    {
        Seen.MOVE_REFUSED,
        Seen.MOVE_SLOT_BUSY,
        Seen.MOVE_STARTED,
        Seen.EVICTION_ATTEMPTED,
        Seen.EVICTION_ACCEPTED,
        Seen.EVICTION_BLOCKED,
        Seen.EVICTION_NOT_FOUND,
        Seen.EVICTION_FORBIDDEN,
        Seen.EVICTED_POD_GONE,
        Seen.EVICTION_DEADLINE,
        Seen.REPLACEMENT_UNPINNED,
        Seen.REPLACEMENT_DEADLINE,
        Seen.SURGE_STARTED,
        Seen.SCALED_UP,
        Seen.SURGE_ABORTED,
        Seen.SCALED_DOWN,
    }
)


@dataclass(frozen=True)
class Edge:
    source: Phase
    seen: Seen
    target: Phase
    when: str = ""  # the condition that picks this edge when one observation has two


P = Phase
_LIVE = (P.PENDING, P.CLAIMED, P.BOUND, P.EVICTING, P.WAITING)
# A surge move holds one replica more than its controller had from ScalingUp until ScalingDown:
# what would end it there goes through ScalingDown first, which restores the count.
_SURGING = (P.SCALING_UP, P.CLAIMED, P.BOUND)
EDGES: tuple[Edge, ...] = (
    Edge(P.PENDING, Seen.POD_CLAIMED, P.CLAIMED),
    Edge(P.EVICTING, Seen.POD_CLAIMED, P.CLAIMED, "by a pod of the same controller"),
    Edge(P.WAITING, Seen.POD_CLAIMED, P.CLAIMED),
    Edge(P.CLAIMED, Seen.POD_APPEARED, P.BOUND),
    Edge(P.CLAIMED, Seen.LEASE_EXPIRED, P.PENDING, "nothing evicted yet"),
    Edge(P.CLAIMED, Seen.LEASE_EXPIRED, P.WAITING, "a move whose pod was evicted"),
    Edge(P.BOUND, Seen.POD_UNSCHEDULED, P.BOUND),
    Edge(P.BOUND, Seen.ALLOCATED_ON_TARGET, P.COMPLETED),
    Edge(P.BOUND, Seen.ALLOCATED_OFF_TARGET, P.FAILED),
    Edge(P.BOUND, Seen.POD_LOST, P.FAILED),
    Edge(P.BOUND, Seen.POD_ON_OTHER_NODE, P.FAILED),
    Edge(P.PENDING, Seen.MOVE_REFUSED, P.FAILED),
    Edge(P.PENDING, Seen.MOVE_SLOT_BUSY, P.PENDING),
    Edge(P.PENDING, Seen.MOVE_STARTED, P.EVICTING),
    Edge(P.EVICTING, Seen.EVICTION_ATTEMPTED, P.EVICTING),
    Edge(P.EVICTING, Seen.EVICTION_BLOCKED, P.EVICTING),
    Edge(P.EVICTING, Seen.EVICTION_ACCEPTED, P.WAITING),
    Edge(P.EVICTING, Seen.EVICTION_NOT_FOUND, P.WAITING),
    Edge(P.EVICTING, Seen.EVICTED_POD_GONE, P.WAITING),
    Edge(P.CLAIMED, Seen.EVICTED_POD_GONE, P.CLAIMED, "the replacement was claimed first"),
    Edge(P.BOUND, Seen.EVICTED_POD_GONE, P.BOUND, "the replacement was claimed first"),
    Edge(P.EVICTING, Seen.EVICTION_FORBIDDEN, P.FAILED),
    Edge(P.EVICTING, Seen.EVICTION_DEADLINE, P.FAILED),
    Edge(P.WAITING, Seen.REPLACEMENT_UNPINNED, P.FAILED),
    *(Edge(phase, Seen.REPLACEMENT_DEADLINE, P.FAILED) for phase in (P.WAITING, P.CLAIMED, P.BOUND)),
    *(Edge(phase, Seen.CANCEL, P.CANCELLED) for phase in _LIVE),
    # Surge moves (spec.strategy Surge, or Auto where surge is safe).
    Edge(P.PENDING, Seen.SURGE_STARTED, P.SCALING_UP),
    Edge(P.PENDING, Seen.SURGE_ABORTED, P.FAILED, "refused before any change"),
    Edge(P.SCALING_UP, Seen.SURGE_ABORTED, P.FAILED, "nothing was scaled"),
    *(Edge(phase, Seen.SCALED_UP, phase, "records the scale-up") for phase in _SURGING),
    Edge(P.SCALING_UP, Seen.POD_CLAIMED, P.CLAIMED, "by a pod of the same controller"),
    Edge(P.CLAIMED, Seen.LEASE_EXPIRED, P.SCALING_UP, "a surge move"),
    Edge(P.BOUND, Seen.ALLOCATED_ON_TARGET, P.SCALING_DOWN, "a surge move: the new pod is Ready"),
    *(
        Edge(phase, seen, P.SCALING_DOWN, "a surge move")
        for phase, seen in (
            (P.BOUND, Seen.ALLOCATED_OFF_TARGET),
            (P.BOUND, Seen.POD_LOST),
            (P.BOUND, Seen.POD_ON_OTHER_NODE),
            (P.SCALING_UP, Seen.REPLACEMENT_UNPINNED),
            *((ph, Seen.REPLACEMENT_DEADLINE) for ph in _SURGING),
            *((ph, Seen.CANCEL) for ph in _SURGING),
        )
    ),
    *(Edge(P.SCALING_DOWN, Seen.SCALED_DOWN, outcome) for outcome in (P.COMPLETED, P.FAILED, P.CANCELLED)),
)
_KNOWN = frozenset(Phase)  # a Phase hashes and compares as its string
TABLE: dict[tuple[Phase, Seen], tuple[Phase, ...]] = {}
for _e in EDGES:
    TABLE.setdefault((_e.source, _e.seen), ())
    TABLE[(_e.source, _e.seen)] += (_e.target,)


@dataclass(frozen=True)
class Observation:
    """What was seen, with what the next status needs; each kind reads only its own fields."""

    seen: Seen
    pod: str = ""  # the pod concerned (POD_CLAIMED: its name or generateName<generated>)
    pod_uid: str = ""
    claim: str = ""  # POD_CLAIMED: the new token; POD_APPEARED: the token the pod carries
    agent: str = ""  # POD_CLAIMED: the agent replica that claims
    lease_seconds: float = 0  # POD_CLAIMED
    uuids: tuple[str, ...] = ()  # POD_CLAIMED: the target; ALLOCATED_*: what HAMi allocated
    node: str = ""  # POD_ON_OTHER_NODE
    attempts: int = 0  # EVICTION_*: eviction requests made, this one included
    retry_seconds: int = 0  # EVICTION_BLOCKED
    seconds: int = 0  # *_DEADLINE: the timeout that passed
    reason: str = ""  # POD_UNSCHEDULED: the scheduler's reason
    detail: str = ""  # free text for the message (the scheduler's, the PDB's, the refusal's)
    workload: str = ""  # MOVE_STARTED
    siblings: tuple[str, ...] = ()  # MOVE_STARTED: UIDs of the workload's pods
    problems: tuple[Problem, ...] = ()  # MOVE_REFUSED: what the checks found
    scaled: str = ""  # SURGE_STARTED: the controller whose replicas are raised, as Kind/name
    replicas: int = 0  # SURGE_STARTED: its replica count before


@dataclass(frozen=True)
class Note:
    """A Kubernetes Event to record with the transition: on the placement, or on a pod (pod set).
    A pod note without uid goes to the pod of that name if it still exists."""

    reason: str
    message: str
    warning: bool = False
    pod: str | None = None
    pod_uid: str | None = None


@dataclass(frozen=True)
class Transition:
    seen: Seen
    source: Phase
    target: Phase
    reason: str
    message: str
    old: PlacementStatus
    status: PlacementStatus
    notes: tuple[Note, ...] = field(default=())

    @property
    def changes(self) -> dict[str, object]:
        """The status keys this transition writes or removes (None), as they appear in the CR."""
        before, after = self.old.to_dict(), self.status.to_dict()
        out: dict[str, object] = {k: v for k, v in after.items() if before.get(k) != v}
        out.update({k: None for k in before.keys() - after.keys()})
        return out


def stamp(now: dt.datetime, offset_seconds: float = 0) -> str:
    """The agent's own fixed-width RFC 3339 stamps (they order as strings)."""
    return (now + dt.timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide(p: Placement, obs: Observation, now: dt.datetime) -> Transition | None:
    """The transition `obs` causes from `p`'s status, or None: no edge (illegal or irrelevant in
    this phase), a guard that does not hold, or nothing that would change."""
    if p.phase not in _KNOWN:
        return None  # a phase this version does not know: leave it to whoever wrote it
    source = Phase(p.phase)
    targets = TABLE.get((source, obs.seen))
    if not targets or (obs.seen in MOVE_ONLY and not p.evict_pod):
        return None
    built = _BUILDERS[obs.seen](p, obs, now)
    if built is None:
        return None
    status, reason, message, notes = built
    if status.current_phase.terminal and _surging(p) and obs.seen != Seen.SURGE_ABORTED:
        status, message, notes = _restore_first(p, obs, status, notes)
    target = status.current_phase
    if target not in targets:
        return None  # a status no agent writes (a surge phase without strategy Surge): left alone
    if status == p.status:
        return None  # nothing would change: no write
    return Transition(obs.seen, source, target, reason, message, p.status, status, notes)


_Built = tuple[PlacementStatus, str, str, tuple[Note, ...]] | None


def _surging(p: Placement) -> bool:
    return p.status.strategy == "Surge" and p.phase in _SURGING


def _restore_first(
    p: Placement, obs: Observation, final: PlacementStatus, notes: tuple[Note, ...]
) -> tuple[PlacementStatus, str, tuple[Note, ...]]:
    """A surge move that ends (done, failed or withdrawn) holds one replica too many: it goes to
    ScalingDown, which removes the right pod and restores the count, and only then to `final`'s
    phase. `final`'s reason and message stay in its Ready condition until then."""
    outcome = final.current_phase
    if outcome == P.COMPLETED:
        remove, remove_uid = p.status.remove_pod, p.status.remove_pod_uid  # the old pod
    elif obs.seen == Seen.REPLACEMENT_UNPINNED:
        remove, remove_uid = obs.pod, None
    else:  # the new pod, if there is one; else the controller removes the one it could not create
        remove, remove_uid = p.status.bound_pod, p.status.bound_pod_uid
    removing = f"removing pod {remove}, then " if remove else ""
    message = f"{final.message}; {removing}restoring {p.status.surge_target} to {p.status.surge_replicas} replicas"
    status = final.with_changes(
        phase=P.SCALING_DOWN,
        message=message[:MESSAGE_LIMIT],
        surge_outcome=str(outcome),
        remove_pod=remove,
        remove_pod_uid=remove_uid,
    )
    return status, message, notes


def _moved(p: Placement, phase: Phase, reason: str, message: str, **changes: object) -> PlacementStatus:
    return p.status.with_changes(phase=phase, reason=reason, message=message, **changes)


def _conditions(
    p: Placement, now: dt.datetime, type_: str, ok: bool, reason: str, message: str
) -> tuple[Condition, ...]:
    new = Condition.make(type_, ok, reason, message, p.generation, stamp(now))
    return merge_conditions(p.status.conditions or (), [new])


def _claimed(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    if not obs.claim:
        return None
    message = f"claimed at admission by pod {obs.pod}; waiting for it to appear"
    status = _moved(
        p,
        P.CLAIMED,
        "Claimed",
        message,
        claim=obs.claim,
        claimed_by=obs.agent,
        claimed_at=stamp(now),
        claim_lease_expires_at=stamp(now, obs.lease_seconds),
        target_uuids=obs.uuids,
    )
    note = Note("Claimed", f"claimed by new pod {obs.pod}: pinned to {p.node} GPUs {','.join(obs.uuids)}")
    return status, "Claimed", message, (note,)


def _appeared(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    if not obs.claim or obs.claim != p.status.claim:
        return None  # a pod of another claim
    message = f"pod {obs.pod} carries the pin to {p.node}; waiting for HAMi to allocate the GPUs"
    status = _moved(
        p,
        P.BOUND,
        "PodBound",
        message,
        bound_pod=obs.pod,
        bound_pod_uid=obs.pod_uid,
        conditions=_conditions(p, now, "Claimed", True, "PodBound", f"pod {obs.pod} was pinned at admission"),
        claim_lease_expires_at=None,
    )
    notes = (
        Note("Bound", f"pod {obs.pod} pinned to {p.node}"),
        Note(
            "Pinned",
            f"pinned by HamiPodPlacement {p.name} (reqID {p.req_id}) to {p.node} GPUs {', '.join(p.gpu_devices)}",
            pod=obs.pod,
            pod_uid=obs.pod_uid,
        ),
    )
    return status, "PodBound", message, notes


def _lease_expired(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    # A move whose pod was already evicted goes back to waiting for a replacement, never to
    # Pending: that would evict a second pod for the same reqID.
    back_to = P.WAITING if p.evict_pod and p.status.evicted_at else P.PENDING
    if p.evict_pod and p.status.strategy == "Surge":
        back_to = P.SCALING_UP  # the added replica is still there: wait for its pod again
    message = (
        f"the pod claimed at {p.status.claimed_at} never appeared "
        "(its admission was rejected or lost); waiting for the next matching pod"
    )
    status = p.status.without_claim().with_changes(phase=back_to, reason="ClaimLeaseExpired", message=message)
    return status, "ClaimLeaseExpired", message, (Note("ClaimLeaseExpired", message, warning=True),)


def _unscheduled(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    reason = obs.reason or "Unschedulable"
    message = f"pod {p.status.bound_pod} is not scheduled yet: {obs.detail or reason}"[:MESSAGE_LIMIT]
    return p.status.with_changes(reason=reason, message=message), reason, message, ()


def _finished(p: Placement, now: dt.datetime, phase: Phase, reason: str, message: str, **changes: object) -> _Built:
    """Completed or Failed: the Ready condition says which; both are terminal."""
    done = phase == P.COMPLETED
    status = _moved(
        p,
        phase,
        reason,
        message,
        conditions=_conditions(p, now, "Ready", done, reason, message),
        next_attempt_at=None,
        **({"consumed_at": stamp(now)} if done else {}),
        **changes,
    )
    return status, reason, message, (Note(reason, message, warning=not done),)


def _on_bound_pod(built: _Built, p: Placement) -> _Built:
    """The same story on the bound pod, if it still exists."""
    if built is None:
        return None
    status, reason, message, notes = built
    pod_note = Note(reason, f"HamiPodPlacement {p.name}: {message}", notes[0].warning, pod=p.status.bound_pod or "")
    return status, reason, message, (*notes, pod_note)


def _allocated(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    target = sorted(p.status.target_uuids or ())
    uuids = sorted(obs.uuids)
    if uuids == target:
        message = f"HAMi allocated the target GPUs {', '.join(target)} on {p.node}"
        built = _finished(p, now, P.COMPLETED, "Allocated", message, allocated_devices=tuple(uuids))
    else:
        # HAMi issues #958/#968: the scheduler can allocate other GPUs than use-gpuuuid asked for.
        message = f"HAMi allocated {', '.join(uuids)} but the target was {', '.join(target)}"
        built = _finished(p, now, P.FAILED, "AllocationMismatch", message, allocated_devices=tuple(uuids))
    return _on_bound_pod(built, p)


def _allocated_on(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    return _allocated(p, obs, now) if sorted(obs.uuids) == sorted(p.status.target_uuids or ()) else None


def _allocated_off(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    return _allocated(p, obs, now) if sorted(obs.uuids) != sorted(p.status.target_uuids or ()) else None


def _pod_lost(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = f"pod {p.status.bound_pod} disappeared before HAMi allocated its GPUs"
    return _on_bound_pod(_finished(p, now, P.FAILED, "PodGone", message), p)


def _other_node(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = f"pod {p.status.bound_pod} was bound to {obs.node}, not {p.node}"
    return _on_bound_pod(_finished(p, now, P.FAILED, "WrongNode", message), p)


def _refused(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    if not obs.problems:
        return None
    reason = "NotRecreatable" if has_code(obs.problems, *EVICT_POD_CODES) else "InvalidTarget"
    return _failed(p, now, reason, "refused before any eviction: " + "; ".join(messages(obs.problems)))


def _failed(p: Placement, now: dt.datetime, reason: str, message: str) -> _Built:
    return _finished(p, now, P.FAILED, reason, message)


def _slot_busy(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = f"waiting: {obs.detail}"
    return _moved(p, P.PENDING, "WaitingForMoveSlot", message), "WaitingForMoveSlot", message, ()


def _move_started(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = f"evicting {p.evict_pod} so that its controller recreates it on {p.node}"
    if obs.detail:  # strategy Auto, where a surge was not safe
        message += f" (no surge: {obs.detail})"
    status = _moved(
        p,
        P.EVICTING,
        "Evicting",
        message,
        move_started_at=stamp(now),
        evicted_pod=p.evict_pod,
        evicted_pod_uid=obs.pod_uid,
        eviction_attempts=1,  # the first attempt is counted with the intent, in the same write
        workload=obs.workload,
        sibling_uids=obs.siblings[:512],
        **({"strategy": "Evict"} if p.strategy != "Evict" else {}),
    )
    return status, "Evicting", message, (Note("MoveStarted", message),)


def _attempted(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    status = p.status.with_changes(eviction_attempts=obs.attempts)
    return status, p.status.reason or "", p.status.message or "", ()


def _blocked(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = f"waiting: {obs.detail}, retry in {obs.retry_seconds}s"
    status = p.status.with_changes(
        reason="WaitingForPDB",
        message=message,
        eviction_attempts=obs.attempts,
        next_attempt_at=stamp(now, obs.retry_seconds),
        conditions=_conditions(p, now, "DisruptionAllowed", False, "BlockedByPDB", message),
    )
    # An event on the first block and every fifth retry, not on each.
    notes = (Note("EvictionBlocked", message, warning=True),) if obs.attempts == 1 or obs.attempts % 5 == 0 else ()
    return status, "WaitingForPDB", message, notes


def _evicted(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    if p.phase != P.EVICTING:
        return _eviction_recorded(p, obs, now)
    message = f"{p.evict_pod} evicted; waiting for its controller to recreate it and for the replacement to be pinned"
    status = _moved(
        p,
        P.WAITING,
        "Evicted",
        message,
        eviction_attempts=obs.attempts,
        evicted_at=p.status.evicted_at or stamp(now),
        conditions=_conditions(p, now, "DisruptionAllowed", True, "Evicted", f"{p.evict_pod} evicted"),
        next_attempt_at=None,
    )
    notes = (
        Note("Evicted", message),
        Note(
            "Evicted",
            f"evicted by HamiPodPlacement {p.name} (reqID {p.req_id}) to move it to {p.node}",
            pod=p.evict_pod or "",
            pod_uid=p.status.evicted_pod_uid or "",
        ),
    )
    return status, "Evicted", message, notes


def _eviction_recorded(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    """The replacement was claimed before the eviction's own status write landed: record it."""
    if p.status.evicted_at or p.status.strategy == "Surge":  # a surge evicts nothing
        return None
    status = p.status.with_changes(evicted_at=stamp(now), eviction_attempts=max(1, p.status.attempts))
    return status, p.status.reason or "", p.status.message or "", (Note("Evicted", f"{p.evict_pod} evicted"),)


def _forbidden(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    return _failed(p, now, "EvictionForbidden", f"the agent may not evict {p.evict_pod}: {obs.detail}")


def _eviction_deadline(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    blocked = p.status.reason == "WaitingForPDB"
    message = (
        f"gave up evicting {p.evict_pod} after {obs.seconds}s"
        + (f": {p.status.message or ''}" if blocked else "")
        + "; the pod was not touched"
    )
    return _failed(p, now, "BlockedByPDB" if blocked else "EvictionTimeout", message)


def _unpinned(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = (
        f"the replacement pod {obs.pod} was admitted without the pin (no agent answered "
        f"its admission, e.g. during an agent restart); it runs wherever the scheduler "
        f"put it. Create a new placement to move it"
    )
    return _failed(p, now, "ReplacementNotPinned", message)


_REPLACEMENT_STEP = {
    P.WAITING: "waiting for the controller to recreate the pod",
    P.SCALING_UP: "waiting for the added replica's pod to be created and pinned",
    P.CLAIMED: "waiting for the pinned replacement to appear",
    P.BOUND: "waiting for the replacement to run on the target GPUs",
}


def _replacement_deadline(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    step = _REPLACEMENT_STEP[Phase(p.phase)]
    return _failed(p, now, "ReplacementTimeout", f"timed out after {obs.seconds}s {step}")


def _cancel(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = obs.detail or "the placement was withdrawn"
    status = _moved(
        p,
        P.CANCELLED,
        "Cancelled",
        message,
        conditions=_conditions(p, now, "Ready", False, "Cancelled", message),
        next_attempt_at=None,
    )
    return status, "Cancelled", message, (Note("Cancelled", message, warning=True),)


def _surge_started(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    message = (
        f"adding one replica to {obs.scaled} ({obs.replicas} → {obs.replicas + 1}), pinned to {p.node}; "
        f"{p.evict_pod} keeps running until the new pod is Ready"
    )
    status = _moved(
        p,
        P.SCALING_UP,
        "ScalingUp",
        message,
        strategy="Surge",
        move_started_at=stamp(now),
        workload=obs.workload,
        sibling_uids=obs.siblings[:512],
        surge_target=obs.scaled,
        surge_replicas=obs.replicas,
        remove_pod=p.evict_pod,
        remove_pod_uid=obs.pod_uid,
    )
    return status, "ScalingUp", message, (Note("SurgeStarted", message),)


def _scaled_up(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    if p.status.scaled_up_at or p.status.strategy != "Surge":
        return None
    n = p.status.surge_replicas or 0
    added = f"added one replica to {p.status.surge_target} ({n} → {n + 1})"
    if p.phase != P.SCALING_UP:  # the new pod was claimed before this write landed: record only
        return p.status.with_changes(scaled_up_at=stamp(now)), p.status.reason or "", p.status.message or "", ()
    message = f"{added}; waiting for the new pod, pinned to {p.node}"
    status = p.status.with_changes(reason="ScaledUp", message=message, scaled_up_at=stamp(now))
    return status, "ScaledUp", message, (Note("ScaledUp", added),)


def _surge_aborted(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    what = f"could not add a replica to {p.status.surge_target}" if p.status.surge_target else "surge refused"
    return _failed(p, now, "SurgeRefused", f"{what}: {obs.detail}; nothing was changed")


def _scaled_down(p: Placement, obs: Observation, now: dt.datetime) -> _Built:
    ready = next((c for c in p.status.conditions or () if c.type == "Ready"), None)
    outcome = p.status.surge_outcome if p.status.surge_outcome in (P.COMPLETED, P.CANCELLED) else P.FAILED
    reason = (ready.reason if ready else None) or ("Allocated" if outcome == P.COMPLETED else "SurgeFailed")
    message = (ready.message if ready else None) or p.status.message or ""
    restored = obs.detail or f"{p.status.surge_target} is back to {p.status.surge_replicas} replicas"
    message = f"{message}; {restored}"[:MESSAGE_LIMIT]
    status = _moved(p, P(outcome), reason, message)
    return status, reason, message, (Note("ScaledDown", restored, warning=bool(obs.detail)),)


_BUILDERS = {
    Seen.POD_CLAIMED: _claimed,
    Seen.POD_APPEARED: _appeared,
    Seen.LEASE_EXPIRED: _lease_expired,
    Seen.POD_UNSCHEDULED: _unscheduled,
    Seen.ALLOCATED_ON_TARGET: _allocated_on,
    Seen.ALLOCATED_OFF_TARGET: _allocated_off,
    Seen.POD_LOST: _pod_lost,
    Seen.POD_ON_OTHER_NODE: _other_node,
    Seen.MOVE_REFUSED: _refused,
    Seen.MOVE_SLOT_BUSY: _slot_busy,
    Seen.MOVE_STARTED: _move_started,
    Seen.EVICTION_ATTEMPTED: _attempted,
    Seen.EVICTION_ACCEPTED: _evicted,
    Seen.EVICTION_BLOCKED: _blocked,
    Seen.EVICTION_NOT_FOUND: _evicted,
    Seen.EVICTION_FORBIDDEN: _forbidden,
    Seen.EVICTED_POD_GONE: _evicted,
    Seen.EVICTION_DEADLINE: _eviction_deadline,
    Seen.REPLACEMENT_UNPINNED: _unpinned,
    Seen.REPLACEMENT_DEADLINE: _replacement_deadline,
    Seen.CANCEL: _cancel,
    Seen.SURGE_STARTED: _surge_started,
    Seen.SCALED_UP: _scaled_up,
    Seen.SURGE_ABORTED: _surge_aborted,
    Seen.SCALED_DOWN: _scaled_down,
}


def mermaid() -> str:
    """The transition table as a Mermaid state diagram (docs/architecture.md holds this text)."""
    labels: dict[tuple[Phase, Phase], list[str]] = {}
    for e in EDGES:
        labels.setdefault((e.source, e.target), []).append(f"{e.seen} ({e.when})" if e.when else str(e.seen))
    lines = ["stateDiagram-v2", f"    [*] --> {P.PENDING}"]
    lines += [f"    {a} --> {b}: {', '.join(names)}" for (a, b), names in labels.items()]
    lines += [f"    {phase} --> [*]" for phase in Phase if phase.terminal]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m hami_place_core.lifecycle: the diagram for docs/architecture.md
    print(mermaid(), end="")
