"""Applies lifecycle transitions: the only place that writes a placement's status.

``hami_place_core.lifecycle`` decides (pure); this module does what a decision needs: the PUT to
the status subresource carrying the resourceVersion the decision was based on, the Kubernetes
Events, the metrics. A 409 means someone else (another replica, another pod's admission) changed
the placement first: it is re-read and, if the observation still applies to it, decided again.
State therefore lives only in the placement's status.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from agent import metrics
from agent.cache import ClusterCache
from agent.events import EventRecorder
from agent.kube import AsyncKube
from agent.logs import fields
from agent.status import parse_rfc3339
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.lifecycle import Note, Observation, Seen, Transition, decide
from hami_place_core.placement import Placement

log = logging.getLogger("hami_place.agent.transitions")

ATTEMPTS = 5  # decisions per observation: one per 409 lost

# Move steps counted by hami_place_moves_total, by what was observed.
_MOVE_STEPS = {
    Seen.EVICTION_ACCEPTED: "evicted",
    Seen.EVICTION_NOT_FOUND: "evicted",
    Seen.EVICTED_POD_GONE: "evicted",
    Seen.MOVE_REFUSED: "failed",
    Seen.EVICTION_FORBIDDEN: "failed",
    Seen.EVICTION_DEADLINE: "failed",
    Seen.REPLACEMENT_UNPINNED: "failed",
    Seen.REPLACEMENT_DEADLINE: "failed",
}


def same_basis(old: Placement, fresh: Placement) -> bool:
    """Whether an observation made against `old` still applies to `fresh`: same phase, same claim
    and same spec. Otherwise the next pass observes again."""
    return (
        fresh.phase == old.phase
        and fresh.claim == old.claim
        and (fresh.raw.get("spec") or {}) == (old.raw.get("spec") or {})
    )


class Transitions:
    def __init__(self, kube: AsyncKube, cache: ClusterCache, events: EventRecorder) -> None:
        self.kube = kube
        self.cache = cache
        self.events = events
        # placement key -> (phase, when this replica wrote it): the time spent in each phase.
        self._entered: dict[str, tuple[str, float]] = {}

    async def apply(
        self, p: Placement, obs: Observation, still: Callable[[Placement, Placement], bool] = same_basis
    ) -> Placement | None:
        """Decide what `obs` does to `p` and write it; the placement as written, or None when
        nothing was written (no transition, or the placement moved on in a way `still` refuses)."""
        for _ in range(ATTEMPTS):
            t = decide(p, obs, dt.datetime.now(dt.UTC))
            if t is None:
                return None
            try:
                updated = await self._write(p, t)
            except kube_errors.Conflict:
                if obs.seen == Seen.POD_CLAIMED:
                    metrics.CLAIM_CONFLICTS.inc()
                fresh = await self.reread(p)
                if fresh is None or not still(p, fresh):
                    log.info(
                        "placement %s moved on before %s was written: phase %s, reason %s",
                        p.key,
                        obs.seen,
                        fresh.phase if fresh else "deleted",
                        fresh.status.reason if fresh else "",
                    )
                    return None
                p = fresh
                continue
            self._count(p, t)
            self._record(updated, t)
            if t.target != t.source:
                log.info(
                    "placement %s: %s -> %s (%s)",
                    p.key,
                    t.source,
                    t.target,
                    t.status.reason or obs.seen,
                    extra=fields(updated, phase=str(t.target)),
                )
            return updated
        return None

    async def _write(self, p: Placement, t: Transition) -> Placement:
        """PUT the new status with p's resourceVersion; raises kube_errors.Conflict if it moved on."""
        body = {
            "apiVersion": hp.API_VERSION,
            "kind": hp.KIND,
            "metadata": {"name": p.name, "namespace": p.namespace, "resourceVersion": p.resource_version},
            "spec": p.raw.get("spec") or {},
            "status": {**t.status.to_dict(), "observedGeneration": p.generation},
        }
        updated = await self.kube.request("PUT", hp.placement_path(p.namespace, p.name, status=True), body=body)
        # Reflect our own write at once, so the next admission does not act on the old version.
        self.cache.apply("placements", {"type": "MODIFIED", "object": updated})
        return Placement.from_object(updated)

    async def reread(self, p: Placement) -> Placement | None:
        """The live placement (after a 409), also refreshing the cache; None if it is gone."""
        try:
            obj = await self.kube.request("GET", hp.placement_path(p.namespace, p.name))
        except kube_errors.NotFound:
            return None
        self.cache.apply("placements", {"type": "MODIFIED", "object": obj})
        return Placement.from_object(obj)

    def _count(self, p: Placement, t: Transition) -> None:
        if t.target != t.source:
            metrics.TRANSITIONS.labels(phase=str(t.target)).inc()
            self._time_phases(p, t)
        step = _MOVE_STEPS.get(t.seen)
        if t.seen == Seen.ALLOCATED_ON_TARGET and p.evict_pod:
            step = "completed"
        if step:
            metrics.MOVES.labels(step=step).inc()
        if t.seen == Seen.POD_CLAIMED:
            metrics.CLAIMS.inc()
        elif t.seen == Seen.LEASE_EXPIRED:
            metrics.LEASE_EXPIRIES.inc()

    def forget(self, key: str) -> None:
        """The placement `key` was deleted: drop when it entered its phase (a placement deleted
        before it ended would otherwise stay in the table for the life of the process)."""
        self._entered.pop(key, None)

    def _time_phases(self, p: Placement, t: Transition) -> None:
        """hami_place_phase_seconds for the phase left (when this replica saw it begin) and, at
        the end of a move, hami_place_move_seconds from its recorded start (any replica's)."""
        now = time.monotonic()
        entered = self._entered.pop(p.key, None)
        if entered is not None and entered[0] == str(t.source):
            metrics.PHASE_SECONDS.labels(phase=str(t.source)).observe(now - entered[1])
        if t.target in hp.TERMINAL:
            started = parse_rfc3339(t.status.move_started_at)
            if started is not None:
                elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
                metrics.MOVE_SECONDS.labels(result=str(t.target)).observe(max(0.0, elapsed))
        else:
            self._entered[p.key] = (str(t.target), now)

    def _record(self, p: Placement, t: Transition) -> None:
        for note in t.notes:
            self._event(p, note)

    def _event(self, p: Placement, note: Note) -> None:
        kind = "Warning" if note.warning else "Normal"
        if note.pod is None:
            self.events.fire(self.events.on_placement(p, note.reason, note.message, kind))
            return
        uid: Any = note.pod_uid
        if uid is None:  # the pod as it is now, if it still exists
            pod = self.cache.pod(p.namespace, note.pod)
            if pod is None:
                return
            uid = pod["metadata"].get("uid", "")
        self.events.fire(self.events.on_pod(p.namespace, note.pod, str(uid or ""), note.reason, note.message, kind))
