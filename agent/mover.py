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
from agent.status import condition, merge_conditions, now_rfc3339, parse_rfc3339, write_status
from agent.validate import check_evict_pod, check_target
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.placement import Placement, workload_key

log = logging.getLogger("hami_place.agent.mover")

IN_FLIGHT = (hp.EVICTING, hp.WAITING, hp.CLAIMED, hp.BOUND)
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
    t = (p.raw.get("spec") or {}).get("timeouts") or {}
    return (
        int(t.get("evictionSeconds") or settings.eviction_timeout_seconds),
        int(t.get("replacementSeconds") or settings.replacement_timeout_seconds),
    )


def is_move(p: Placement) -> bool:
    return bool(p.evict_pod)


def workload_of(pod: dict[str, Any] | None) -> str | None:
    return workload_key(pod)


def _ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


class Mover:
    def __init__(self, settings: Settings, cache: ClusterCache, kube: AsyncKube, events: EventRecorder) -> None:
        self.settings = settings
        self.cache = cache
        self.kube = kube
        self.events = events
        self.bucket = TokenBucket(settings.eviction_qps, settings.eviction_burst)

    # ---- limits --------------------------------------------------------------------------------
    def _in_flight(self) -> list[Placement]:
        return [
            p
            for b in self.cache.by_namespace.values()
            for p in b.values()
            if is_move(p) and p.phase in IN_FLIGHT and p.status.get("moveStartedAt")
        ]

    def _limit_reason(self, p: Placement, pod: dict[str, Any]) -> str | None:
        s = self.settings
        flying = self._in_flight()
        if len(flying) >= s.max_moves_in_flight:
            return f"{len(flying)} moves in flight cluster-wide (limit {s.max_moves_in_flight})"
        on_node = [f for f in flying if f.node == p.node]
        if len(on_node) >= s.max_moves_per_node:
            return f"{len(on_node)} moves in flight to node {p.node} (limit {s.max_moves_per_node})"
        workload = workload_of(pod)
        if workload:
            moving = [f for f in flying if f.status.get("workload") == workload]
            siblings = [q for q in self.cache.pods.store.values() if workload_of(q) == workload]
            unavailable = sum(1 for q in siblings if not _ready(q)) + len(moving)
            if unavailable >= s.max_unavailable_per_workload:
                return (
                    f"workload {workload.split('/', 1)[1]} has {unavailable} pod(s) unavailable or moving "
                    f"(limit {s.max_unavailable_per_workload})"
                )
        return None

    # ---- phases --------------------------------------------------------------------------------
    async def reconcile(self, p: Placement) -> None:
        if p.phase == hp.PENDING:
            await self._start(p)
        elif p.phase == hp.EVICTING:
            await self._evict(p)
        elif p.phase in (hp.WAITING, hp.CLAIMED, hp.BOUND):
            failpoint("move.waiting-for-replacement")
            if p.phase == hp.WAITING:
                missed = self._unpinned_replacement(p)
                if missed:
                    await self._fail(
                        p,
                        "ReplacementNotPinned",
                        f"the replacement pod {missed} was admitted without the pin (no agent answered "
                        f"its admission, e.g. during an agent restart); it runs wherever the scheduler "
                        f"put it. Create a new placement to move it",
                    )
                    return
            elif not p.status.get("evictedAt") and self._eviction_done(p):
                # The replacement was claimed before the eviction's own status write landed.
                p = await self._record_eviction(p)
            await self._check_replacement_deadline(p)

    def _sibling_uids(self, pod: dict[str, Any]) -> list[str]:
        workload = workload_of(pod)
        return sorted(
            str(q["metadata"].get("uid")) for q in self.cache.pods.store.values() if workload_of(q) == workload
        )

    def _unpinned_replacement(self, p: Placement) -> str | None:
        """A pod of the same controller that did not exist when the move started and carries no claim."""
        known = set(p.status.get("siblingUIDs") or ())
        started = p.status.get("moveStartedAt") or ""
        for pod in self.cache.pods.store.values():
            meta = pod["metadata"]
            if (
                meta.get("namespace") == p.namespace
                and workload_of(pod) == p.status.get("workload")
                and meta.get("uid") != p.status.get("evictedPodUID")
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
        pod = self.cache.pods.store.get(f"{p.namespace}/{p.evict_pod}")
        return (
            pod is None
            or pod["metadata"].get("uid") != p.status.get("evictedPodUID")
            or bool(pod["metadata"].get("deletionTimestamp"))
        )

    async def _record_eviction(self, p: Placement) -> Placement:
        attempts = max(1, int(p.status.get("evictionAttempts") or 0))
        updated = await write_status(
            self.kube, self.cache, p, {**p.status, "evictedAt": now_rfc3339(), "evictionAttempts": attempts}
        )
        metrics.MOVES.labels(step="evicted").inc()
        self.events.fire(self.events.on_placement(updated, "Evicted", f"{p.evict_pod} evicted"))
        return updated

    async def _start(self, p: Placement) -> None:
        pod = self.cache.pods.store.get(f"{p.namespace}/{p.evict_pod}")
        errors = check_evict_pod(self.cache, p)
        node = self.cache.state.nodes.get(p.node)
        if node is not None and not node.ready:
            errors.append(f"node {p.node} is not Ready")
        errors += check_target(self.cache, p, [])
        if errors:
            reason = "NotRecreatable" if any("evictPod" in e for e in errors) else "InvalidTarget"
            await self._fail(p, reason, "refused before any eviction: " + "; ".join(errors))
            return
        assert pod is not None
        if pod["metadata"].get("deletionTimestamp"):
            return  # being deleted by someone else: decide once it is gone
        why = self._limit_reason(p, pod)
        if why:
            if p.status.get("reason") != "WaitingForMoveSlot" or p.status.get("message") != f"waiting: {why}":
                await write_status(
                    self.kube,
                    self.cache,
                    p,
                    {**p.status, "phase": hp.PENDING, "reason": "WaitingForMoveSlot", "message": f"waiting: {why}"},
                )
            return
        if not self.bucket.take():
            return  # eviction rate limit: the next pass tries again (nothing written yet)
        status = {
            **p.status,
            "phase": hp.EVICTING,
            "reason": "Evicting",
            "message": f"evicting {p.evict_pod} so that its controller recreates it on {p.node}",
            "moveStartedAt": now_rfc3339(),
            "evictedPod": p.evict_pod,
            "evictedPodUID": pod["metadata"].get("uid", ""),
            "evictionAttempts": 1,  # the first attempt is counted with the intent, in the same write
            "workload": workload_of(pod) or "",
            "siblingUIDs": self._sibling_uids(pod)[:512],
        }
        updated = await write_status(self.kube, self.cache, p, status)  # the intent, before the side effect
        self.events.fire(self.events.on_placement(updated, "MoveStarted", status["message"]))
        await self._evict(updated, first=True)

    async def _evict(self, p: Placement, first: bool = False) -> None:
        evict_timeout, _ = _timeouts(p, self.settings)
        started = parse_rfc3339(p.status.get("moveStartedAt")) or dt.datetime.now(dt.UTC)
        uid = p.status.get("evictedPodUID", "")
        pod = self.cache.pods.store.get(f"{p.namespace}/{p.evict_pod}")
        if pod is None or pod["metadata"].get("uid") != uid or pod["metadata"].get("deletionTimestamp"):
            # The pod we meant is gone or going: the eviction happened (perhaps before a crash).
            await self._evicted(p, attempts=int(p.status.get("evictionAttempts") or 0))
            return
        now = dt.datetime.now(dt.UTC)
        if now >= started + dt.timedelta(seconds=evict_timeout):
            blocked = p.status.get("reason") == "WaitingForPDB"
            await self._fail(
                p,
                "BlockedByPDB" if blocked else "EvictionTimeout",
                f"gave up evicting {p.evict_pod} after {evict_timeout}s"
                + (f": {p.status.get('message', '')}" if blocked else "")
                + "; the pod was not touched",
            )
            return
        retry_at = parse_rfc3339(p.status.get("nextAttemptAt"))
        if retry_at and now < retry_at:
            return
        if not first and not self.bucket.take():
            return  # rate limit: the next pass tries again
        attempts = int(p.status.get("evictionAttempts") or 0) + (0 if first else 1)
        # Count the attempt before making it: the record survives a crash, and a claim racing the
        # eviction (it writes on top of what it read) can no longer lose it.
        if p.status.get("evictionAttempts") != attempts:
            p = await write_status(self.kube, self.cache, p, {**p.status, "evictionAttempts": attempts})
        failpoint("move.before-evict")
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": p.evict_pod, "namespace": p.namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            await self.kube.request("POST", f"/api/v1/namespaces/{p.namespace}/pods/{p.evict_pod}/eviction", body=body)
        except kube_errors.TooManyRequests as e:
            metrics.EVICTIONS.labels(result="blocked").inc()
            await self._blocked(p, e, attempts)
            return
        except (kube_errors.NotFound, kube_errors.Conflict):
            # gone, or the name now belongs to a new pod (UID precondition): nothing left to evict
            await self._evicted(p, attempts)
            return
        except kube_errors.Forbidden as e:
            await self._fail(p, "EvictionForbidden", f"the agent may not evict {p.evict_pod}: {e}")
            return
        metrics.EVICTIONS.labels(result="accepted").inc()
        failpoint("move.after-evict")
        await self._evicted(p, attempts)

    async def _blocked(self, p: Placement, e: kube_errors.KubeError, attempts: int) -> None:
        names = [m.group(1) for c in e.causes if (m := _PDB_RE.search(c.get("message", "")))]
        delay = min(self.settings.eviction_backoff_max_seconds, 2 ** min(attempts, 10))
        pdb = f"PDB {names[0]}" if names else "a PodDisruptionBudget"
        detail = next((c.get("message") for c in e.causes if c.get("message")), e.message)
        message = f"waiting: {pdb} allows 0 disruptions ({detail}), retry in {delay}s"
        status = {
            **p.status,
            "reason": "WaitingForPDB",
            "message": message,
            "evictionAttempts": attempts,
            "nextAttemptAt": now_rfc3339(delay),
            "conditions": merge_conditions(
                p.status.get("conditions") or [],
                [condition("DisruptionAllowed", False, "BlockedByPDB", message, p.generation)],
            ),
        }
        updated = await write_status(self.kube, self.cache, p, status)
        if attempts == 1 or attempts % 5 == 0:
            self.events.fire(self.events.on_placement(updated, "EvictionBlocked", message, "Warning"))

    async def _evicted(self, p: Placement, attempts: int) -> None:
        message = (
            f"{p.evict_pod} evicted; waiting for its controller to recreate it and for the replacement to be pinned"
        )
        status = {
            **p.status,
            "phase": hp.WAITING,
            "reason": "Evicted",
            "message": message,
            "evictionAttempts": attempts,
            "evictedAt": p.status.get("evictedAt") or now_rfc3339(),
            "conditions": merge_conditions(
                p.status.get("conditions") or [],
                [condition("DisruptionAllowed", True, "Evicted", f"{p.evict_pod} evicted", p.generation)],
            ),
        }
        status.pop("nextAttemptAt", None)
        updated = await write_status(self.kube, self.cache, p, status)
        metrics.MOVES.labels(step="evicted").inc()
        self.events.fire(self.events.on_placement(updated, "Evicted", message))
        self.events.fire(
            self.events.on_pod(
                p.namespace,
                p.evict_pod or "",
                p.status.get("evictedPodUID", ""),
                "Evicted",
                f"evicted by HamiPodPlacement {p.name} (reqID {p.req_id}) to move it to {p.node}",
            )
        )

    async def _check_replacement_deadline(self, p: Placement) -> None:
        _, replacement_timeout = _timeouts(p, self.settings)
        evicted = parse_rfc3339(p.status.get("evictedAt"))
        if evicted is None:
            return
        if dt.datetime.now(dt.UTC) >= evicted + dt.timedelta(seconds=replacement_timeout):
            step = {
                hp.WAITING: "waiting for the controller to recreate the pod",
                hp.CLAIMED: "waiting for the pinned replacement to appear",
                hp.BOUND: "waiting for the replacement to run on the target GPUs",
            }[p.phase]
            await self._fail(p, "ReplacementTimeout", f"timed out after {replacement_timeout}s {step}")

    async def _fail(self, p: Placement, reason: str, message: str) -> None:
        status = {
            **p.status,
            "phase": hp.FAILED,
            "reason": reason,
            "message": message,
            "conditions": merge_conditions(
                p.status.get("conditions") or [], [condition("Ready", False, reason, message, p.generation)]
            ),
        }
        status.pop("nextAttemptAt", None)
        updated = await write_status(self.kube, self.cache, p, status)
        metrics.MOVES.labels(step="failed").inc()
        self.events.fire(self.events.on_placement(updated, reason, message, "Warning"))
