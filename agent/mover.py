"""Active eviction (evictPod): move a running pod to the placement's node and GPUs, safely.

Phases: Pending → Evicting → WaitingForPod → Claimed → Bound → Completed (or Failed with the step).

1. At execution time the target and the pod are validated again against the live cache (the
   validating webhook's checks, plus: the node is Ready). A pod no controller recreates, a DaemonSet
   or mirror pod, or a target without room ends the placement in Failed; the pod is not touched.
2. Limits are checked before anything happens: moves in flight cluster-wide and per target node,
   and unavailable pods per workload (its controller). Over a limit, the placement waits in
   Pending with the reason shown.
3. The intent (the pod's UID) is written to the status first, with a resourceVersion
   precondition; then the pod is evicted through ``policy/v1`` Eviction with a UID precondition,
   so a replacement that reuses the name (StatefulSet) is never evicted by mistake. A 429 (a
   PodDisruptionBudget) is retried with backoff until spec.timeouts.evictionSeconds, showing the
   PDB in the status and in events. Pods are never deleted directly.
4. After the eviction the placement waits (WaitingForPod) for the controller to recreate the pod;
   the mutating webhook claims the replacement and pins it; the controller confirms it Running on
   the target with HAMi's allocation equal to the target, within spec.timeouts.replacementSeconds.

Crash safety: every step is a status write before (intent) or after (result) the side effect. A
restarted agent that finds Evicting checks whether the recorded pod UID is gone or terminating
(the eviction happened) before evicting; so one reqID never evicts two pods.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from typing import Any

from agent import metrics
from agent.cache import ClusterCache
from agent.config import Settings
from agent.events import EventRecorder
from agent.failpoints import failpoint
from agent.kube import AsyncKube
from agent.status import parse_rfc3339
from agent.surge import Surger, deleted, holds_finalizer, surge_started
from agent.transitions import Transitions
from agent.validate import check_evict_pod, check_target
from hami_place_core import placement as hp
from hami_place_core import surge
from hami_place_core.kube import errors as kube_errors
from hami_place_core.lifecycle import Observation, Seen
from hami_place_core.placement import Placement, workload_key
from hami_place_core.problems import Code, Problem, has_code

log = logging.getLogger("hami_place.agent.mover")

IN_FLIGHT = (hp.EVICTING, hp.WAITING, hp.CLAIMED, hp.BOUND, hp.SCALING_UP, hp.SCALING_DOWN)
# A surge move that would end from these phases restores the replica count first.
SURGING = (hp.SCALING_UP, hp.CLAIMED, hp.BOUND)
_PDB_RE = re.compile(r"disruption budget ([a-z0-9.-]+)")


class TokenBucket:
    """Evictions per second across the whole agent (burst allowed)."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.capacity = rate, float(burst)
        self.tokens, self.stamp = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _timeouts(p: Placement, settings: Settings) -> tuple[int, int]:
    spec = p.raw.get("spec")
    t = spec.get("timeouts") if isinstance(spec, dict) else None
    t = t if isinstance(t, dict) else {}

    def seconds(key: str, default: int) -> int:
        value = t.get(key)
        # the CRD makes it a positive integer; anything else (a crafted object) takes the default
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    return (
        seconds("evictionSeconds", settings.eviction_timeout_seconds),
        seconds("replacementSeconds", settings.replacement_timeout_seconds),
    )


def is_move(p: Placement) -> bool:
    return bool(p.evict_pod)


def workload_of(pod: dict[str, Any] | None) -> str | None:
    return workload_key(pod)


def pod_ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


class Mover:
    def __init__(
        self,
        settings: Settings,
        cache: ClusterCache,
        kube: AsyncKube,
        events: EventRecorder,
        transitions: Transitions | None = None,
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.kube = kube
        self.events = events
        self.transitions = transitions or Transitions(kube, cache, events)
        self.bucket = TokenBucket(settings.eviction_qps, settings.eviction_burst)
        self.surger = Surger(cache, kube, self.transitions)
        # placement key -> when this replica first acted on its eviction: after a restart or a new
        # leader, the eviction deadline counts from here at the earliest, so a move is not failed
        # for the time nobody was trying (the record of attempts lives in the status).
        self._acting_since: dict[str, dt.datetime] = {}

    # ---- limits --------------------------------------------------------------------------------
    def _in_flight(self) -> list[Placement]:
        return [p for p in self.cache.open_moves() if is_move(p) and p.phase in IN_FLIGHT and p.status.move_started_at]

    def _limit_reason(self, p: Placement, pod: dict[str, Any], surging: bool = False) -> str | None:
        s = self.settings
        flying = self._in_flight()
        if len(flying) >= s.max_moves_in_flight:
            return f"{len(flying)} moves in flight cluster-wide (limit {s.max_moves_in_flight})"
        on_node = [f for f in flying if f.node == p.node]
        if len(on_node) >= s.max_moves_per_node:
            return f"{len(on_node)} moves in flight to node {p.node} (limit {s.max_moves_per_node})"
        workload = workload_of(pod)
        if workload and not surging:  # a surge makes nothing unavailable
            moving = [f for f in flying if f.status.workload == workload]
            siblings = self.cache.pods_of_workload(workload)
            unavailable = sum(1 for q in siblings if not pod_ready(q)) + len(moving)
            if unavailable >= s.max_unavailable_per_workload:
                return (
                    f"workload {workload.split('/', 1)[1]} has {unavailable} pod(s) unavailable or moving "
                    f"(limit {s.max_unavailable_per_workload})"
                )
        return None

    # ---- phases --------------------------------------------------------------------------------
    async def reconcile(self, p: Placement) -> None:
        if deleted(p) or p.phase in hp.TERMINAL:
            await self._withdrawn(p)
        elif p.phase == hp.SCALING_UP and not p.status.scaled_up_at:
            await self.surger.scale_up(p)
        elif p.phase == hp.SCALING_DOWN:
            await self.surger.scale_down(p)
        elif p.phase == hp.SCALING_UP:
            missed = self._unpinned_replacement(p)
            if missed:
                await self.transitions.apply(p, Observation(Seen.REPLACEMENT_UNPINNED, pod=missed))
                return
            await self._check_replacement_deadline(p)
        elif p.phase == hp.PENDING:
            await self._start(p)
        elif p.phase == hp.EVICTING:
            await self._evict(p)
        elif p.phase in (hp.WAITING, hp.CLAIMED, hp.BOUND):
            failpoint("move.waiting-for-replacement")
            if p.phase == hp.WAITING:
                missed = self._unpinned_replacement(p)
                if missed:
                    await self.transitions.apply(p, Observation(Seen.REPLACEMENT_UNPINNED, pod=missed))
                    return
            elif p.status.strategy != hp.SURGE and not p.status.evicted_at and self._eviction_done(p):
                # The replacement was claimed before the eviction's own status write landed.
                p = await self.transitions.apply(p, Observation(Seen.EVICTED_POD_GONE)) or p
            await self._check_replacement_deadline(p)

    async def _withdrawn(self, p: Placement) -> None:
        """A deleted placement: a surge in progress restores the count first (its finalizer keeps
        the object until then); a finished or unstarted one just lets go of it."""
        if p.status.strategy == hp.SURGE and p.phase in SURGING:
            await self.transitions.apply(p, Observation(Seen.CANCEL, detail=f"placement {p.name} was deleted"))
        elif p.phase == hp.SCALING_DOWN:
            await self.surger.scale_down(p)
        elif holds_finalizer(p) and (p.phase in hp.TERMINAL or p.phase == hp.PENDING):
            await self.surger.remove_finalizer(p)

    def _sibling_uids(self, pod: dict[str, Any]) -> list[str]:
        workload = workload_of(pod)
        return sorted(str(q["metadata"].get("uid")) for q in self.cache.pods_of_workload(workload))

    def _unpinned_replacement(self, p: Placement) -> str | None:
        """A pod of the same controller that did not exist when the move started and carries no claim."""
        known = set(p.status.sibling_uids or ())
        started = p.status.move_started_at or ""
        for pod in self.cache.pods_of_workload(p.status.workload):
            meta = pod["metadata"]
            if (
                meta.get("namespace") == p.namespace
                and workload_of(pod) == p.status.workload
                and meta.get("uid") != p.status.evicted_pod_uid
                and not meta.get("deletionTimestamp")
                and (
                    meta.get("uid") not in known
                    if len(known) < 512
                    # a huge workload: fall back to time (one-second resolution, so strictly later)
                    else (meta.get("creationTimestamp") or "") > started
                )
                and hp.POD_CLAIM not in (meta.get("annotations") or {})
            ):
                return str(meta.get("name"))
        return None

    def _eviction_done(self, p: Placement) -> bool:
        pod = self.cache.pod(p.namespace, p.evict_pod)
        return (
            pod is None
            or pod["metadata"].get("uid") != p.status.evicted_pod_uid
            or bool(pod["metadata"].get("deletionTimestamp"))
        )

    def _choose_strategy(
        self, p: Placement, pod: dict[str, Any] | None, problems: list[Problem]
    ) -> tuple[bool, str, list[Problem], str]:
        """Surge or evict: (surging, why Auto does not surge, the target's problems, why a Surge is
        refused outright ("" if it is not))."""
        surging, skipped = p.strategy != hp.EVICT and not problems, ""
        if surging and pod is not None:
            # Who owns the pod comes first: a StatefulSet's pod cannot surge however much room there is.
            try:
                surge.refuse_owner(pod)
            except surge.SurgeRefused as e:
                if p.strategy == hp.SURGE:
                    return False, "", problems, str(e)
                surging, skipped = False, str(e)
        problems = problems + check_target(self.cache, p, [], keep_mover=surging)
        if problems and surging and p.strategy == hp.AUTO:
            surging = False  # no room next to the old pod: Auto evicts if the target has room after it
            problems = check_target(self.cache, p, [])
            skipped = f"the target has no room while {p.evict_pod} still runs"
        if surging and has_code(problems, Code.NO_GPU_ROOM, Code.NO_NODE_ROOM):
            detail = f"the added replica has no room on the target while {p.evict_pod} still runs: "
            return surging, skipped, problems, detail + "; ".join(x.message for x in problems)
        return surging, skipped, problems, ""

    async def _start(self, p: Placement) -> None:
        pod = self.cache.pod(p.namespace, p.evict_pod)
        problems = check_evict_pod(self.cache, p)
        node = self.cache.node_state(p.node)
        if node is not None and not node.ready:
            problems.append(Problem(Code.NODE_NOT_READY, f"node {p.node} is not Ready"))
        surging, skipped, problems, abort = self._choose_strategy(p, pod, problems)
        if abort:
            await self.transitions.apply(p, Observation(Seen.SURGE_ABORTED, detail=abort))
            return
        if problems:
            await self.transitions.apply(p, Observation(Seen.MOVE_REFUSED, problems=tuple(problems)))
            return
        assert pod is not None
        if pod["metadata"].get("deletionTimestamp"):
            return  # being deleted by someone else: decide once it is gone
        why = self._limit_reason(p, pod, surging)
        if why:
            await self.transitions.apply(p, Observation(Seen.MOVE_SLOT_BUSY, detail=why))
            return
        if surging:
            try:
                target = await self.surger.plan(p, pod)
            except surge.SurgeRefused as e:
                if p.strategy == hp.SURGE:
                    await self.transitions.apply(p, Observation(Seen.SURGE_ABORTED, detail=str(e)))
                    return
                surging, skipped = False, str(e)
        if not self.bucket.take():
            return  # eviction rate limit: the next pass tries again (nothing written yet)
        siblings = tuple(self._sibling_uids(pod))
        if surging:
            await self.surger.start(p, pod, target, siblings)
            return
        intent = Observation(
            Seen.MOVE_STARTED,
            pod_uid=pod["metadata"].get("uid") or "",
            workload=workload_of(pod) or "",
            siblings=siblings,
            detail=skipped,
        )
        updated = await self.transitions.apply(p, intent)  # the intent, before the side effect
        if updated is not None:
            await self._evict(updated, first=True)

    async def _evict(self, p: Placement, first: bool = False) -> None:
        if not await self._evict_step(p, first):
            self._acting_since.pop(p.key, None)  # the eviction is over, one way or another

    async def _evict_step(self, p: Placement, first: bool) -> bool:
        """One look at an eviction; True while it is still to be made (waiting, rate-limited or
        blocked by a PDB), False once it is done, refused or past its deadline."""
        evict_timeout, _ = _timeouts(p, self.settings)
        now = dt.datetime.now(dt.UTC)
        recorded = parse_rfc3339(p.status.move_started_at) or now
        started = max(recorded, self._acting_since.setdefault(p.key, now))
        uid = p.status.evicted_pod_uid or ""
        pod = self.cache.pod(p.namespace, p.evict_pod)
        if pod is None or pod["metadata"].get("uid") != uid or pod["metadata"].get("deletionTimestamp"):
            # The pod we meant is gone or going: the eviction happened (perhaps before a crash).
            await self.transitions.apply(p, Observation(Seen.EVICTED_POD_GONE, attempts=p.status.attempts))
            return False
        if now >= started + dt.timedelta(seconds=evict_timeout):
            await self.transitions.apply(p, Observation(Seen.EVICTION_DEADLINE, seconds=evict_timeout))
            return False
        retry_at = parse_rfc3339(p.status.next_attempt_at)
        if retry_at and now < retry_at:
            return True
        if not first and not self.bucket.take():
            return True  # rate limit: the next pass tries again
        attempts = p.status.attempts + (0 if first else 1)
        # Count the attempt before making it: the record survives a crash, and a claim racing the
        # eviction (it writes on top of what it read) can no longer lose it.
        if p.status.eviction_attempts != attempts:
            counted = await self.transitions.apply(p, Observation(Seen.EVICTION_ATTEMPTED, attempts=attempts))
            if counted is None:
                return True  # it moved on meanwhile: the next pass looks again
            p = counted
        failpoint("move.before-evict")
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": p.evict_pod, "namespace": p.namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            await self.kube.request("POST", f"/api/v1/namespaces/{p.namespace}/pods/{p.evict_pod}/eviction", body=body)
        except kube_errors.TooManyRequests as e:  # a PDB: retried until the deadline
            metrics.EVICTIONS.labels(result="blocked").inc()
            await self._blocked(p, e, attempts)
            return True
        except (kube_errors.NotFound, kube_errors.Conflict):
            # gone, or the name now belongs to a new pod (UID precondition): nothing left to evict
            await self.transitions.apply(p, Observation(Seen.EVICTION_NOT_FOUND, attempts=attempts))
            return False
        except kube_errors.Forbidden as e:
            await self.transitions.apply(p, Observation(Seen.EVICTION_FORBIDDEN, detail=str(e)))
            return False
        metrics.EVICTIONS.labels(result="accepted").inc()
        failpoint("move.after-evict")
        await self.transitions.apply(p, Observation(Seen.EVICTION_ACCEPTED, attempts=attempts))
        return False

    async def _blocked(self, p: Placement, e: kube_errors.KubeError, attempts: int) -> None:
        names = [m.group(1) for c in e.causes if (m := _PDB_RE.search(c.get("message", "")))]
        delay = min(self.settings.eviction_backoff_max_seconds, 2 ** min(attempts, 10))
        pdb = f"PDB {names[0]}" if names else "a PodDisruptionBudget"
        detail = next((c.get("message") for c in e.causes if c.get("message")), e.message)
        seen = Observation(
            Seen.EVICTION_BLOCKED,
            attempts=attempts,
            retry_seconds=delay,
            detail=f"{pdb} allows 0 disruptions ({detail})",
        )
        await self.transitions.apply(p, seen)

    async def _check_replacement_deadline(self, p: Placement) -> None:
        _, replacement_timeout = _timeouts(p, self.settings)
        evicted = surge_started(p) if p.status.strategy == hp.SURGE else parse_rfc3339(p.status.evicted_at)
        if evicted is None:
            return
        if dt.datetime.now(dt.UTC) >= evicted + dt.timedelta(seconds=replacement_timeout):
            await self.transitions.apply(p, Observation(Seen.REPLACEMENT_DEADLINE, seconds=replacement_timeout))
