"""The placement controller: claims become Bound when their pod appears, Completed when HAMi
allocated the target GPUs, and return to Pending when the claim lease lapses.

All state is in the placement status; every write carries the resourceVersion it was decided on,
so two replicas (or a restarted agent) can never act twice on one decision.

Passes are incremental: the cache's listeners record which placements changed (a placement event,
or an event of a pod that names the placement in its annotations), lease expiries wait in a heap,
and moves (few, with timers of their own) are looked at on every pass. Everything is looked at on
start, on becoming leader, when a namespace's labels change, and every FULL_PASS_SECONDS as a
safety net. The event loop also serves the webhooks, so a pass yields every YIELD_EVERY
placements: with 2,000 placements left Claimed, a full pass used to stop it for 6 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from typing import Any

from agent import metrics
from agent.cache import ClusterCache
from agent.config import Settings
from agent.events import EventRecorder
from agent.kube import AsyncKube
from agent.leader import LeaderElector
from agent.mover import Mover, pod_ready
from agent.status import is_past, now_rfc3339
from agent.surge import holds_finalizer
from agent.transitions import Transitions
from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.lifecycle import Observation, Seen
from hami_place_core.placement import Placement
from hami_place_core.placement_status import PlacementStatus

log = logging.getLogger("hami_place.agent.controller")

MIN_PASS_GAP = 0.1
FULL_PASS_SECONDS = 10.0
YIELD_EVERY = 100
# The phases in which a move (spec.evictPod) has work for the mover.
MOVE_PHASES = (hp.PENDING, hp.EVICTING, hp.WAITING, hp.CLAIMED, hp.BOUND, hp.SCALING_UP, hp.SCALING_DOWN)


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class PlacementController:
    def __init__(
        self,
        settings: Settings,
        cache: ClusterCache,
        kube: AsyncKube,
        events: EventRecorder,
        leader: LeaderElector | None = None,
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.kube = kube
        self.events = events
        self.leader = leader
        self.transitions = Transitions(kube, cache, events)
        self.mover = Mover(settings, cache, kube, events, self.transitions)
        self._now = now_rfc3339()
        self.wake = asyncio.Event()
        self._dirty: set[str] = set()  # placements changed since the last pass
        self._moves: set[str] = set()  # moves not finished yet: looked at on every pass
        self._leases: list[tuple[str, str]] = []  # heap of (claimLeaseExpiresAt, placement key)
        self._full = True  # the next pass looks at every placement
        self._last_full = 0.0
        cache.subscribe("pods", self._on_pod)
        cache.subscribe("placements", self._on_placement)
        cache.subscribe("namespaces", self._on_namespace)

    # ---- what changed (called by the cache for every event; cheap) --------------------------------
    def _on_placement(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = _key(obj)
        self._dirty.add(key)
        if kind == "DELETED":
            self.transitions.forget(key)
        status = PlacementStatus.parse(obj.get("status"))
        phase = status.current_phase
        spec = obj.get("spec")
        finalizing = hp.SURGE_FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or ())
        if (
            kind != "DELETED"
            and isinstance(spec, dict)
            and spec.get("evictPod")
            and (phase not in hp.TERMINAL or finalizing)
        ):
            self._moves.add(key)
        else:
            self._moves.discard(key)
        lease = status.claim_lease_expires_at
        # Only the agent's own fixed-width stamps: they order as strings (status.is_past).
        if kind != "DELETED" and phase == hp.CLAIMED and isinstance(lease, str) and len(lease) == 20:
            heapq.heappush(self._leases, (lease, key))
        self.wake.set()

    def _on_pod(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for o in (obj, old):
            name = (((o or {}).get("metadata") or {}).get("annotations") or {}).get(hp.POD_PLACEMENT)
            if name:
                self._dirty.add(f"{obj['metadata'].get('namespace')}/{name}")
        self.wake.set()  # moves watch their pods (and the pods' siblings) on every pass

    def _on_namespace(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if (obj.get("metadata") or {}).get("labels") != ((old or {}).get("metadata") or {}).get("labels"):
            self._full = True  # which namespaces this agent serves may have changed
            self.wake.set()

    # ---- passes --------------------------------------------------------------------------------------
    async def run(self) -> None:
        await self.cache.wait_ready(self.settings.cache_sync_timeout_seconds)
        while True:
            # Cleared BEFORE the pass, never after: a change that arrives while the pass runs (the
            # evicted pod's replacement, HAMi's allocation) sets it again, and the next pass must
            # start right after MIN_PASS_GAP. Clearing after the pass lost that wake, and a move's
            # next step waited for the periodic controller interval instead.
            self.wake.clear()
            try:
                await self.reconcile_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.ERRORS.labels(kind="controller").inc()
                log.exception("reconcile pass failed")
                self._full = True  # whatever that pass had not reached yet
            # A burst of changes (a webhook under load) must not turn into back-to-back passes that
            # starve the webhooks on this event loop: at most one pass per MIN_PASS_GAP seconds.
            await asyncio.sleep(MIN_PASS_GAP)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.settings.controller_interval_seconds)

    def _due(self) -> set[str]:
        """The placements this pass must look at; resets what it takes over."""
        self._now = now_rfc3339()  # once per pass: formatting it per placement showed in profiles
        if self._full or time.monotonic() - self._last_full >= FULL_PASS_SECONDS:
            self._full, self._last_full = False, time.monotonic()
            self._dirty.clear()
            return {p.key for p in self.cache.all_placements()}
        keys, self._dirty = self._dirty, set()
        keys |= self._moves
        while self._leases and self._leases[0][0] <= self._now:
            keys.add(heapq.heappop(self._leases)[1])
        return keys

    async def reconcile_all(self) -> None:
        if self.leader is not None and not self.leader.is_leader:
            self._full = True  # nothing is tracked while another replica acts: look at all once leader
            return  # only the lease holder acts; every replica still serves the webhooks
        moves: list[Placement] = []
        claims: list[Placement] = []
        serves: dict[str, bool] = {}  # per namespace, once per pass
        for n, key in enumerate(self._due()):
            if n % (YIELD_EVERY * 10) == YIELD_EVERY * 10 - 1:
                await asyncio.sleep(0)
            namespace, _, name = key.partition("/")
            p = self.cache.placement(namespace, name)
            if p is None:
                continue
            if namespace not in serves:
                serves[namespace] = self._serves(namespace)
            if not serves[namespace]:
                continue
            if p.evict_pod and (p.phase in MOVE_PHASES or holds_finalizer(p)):
                moves.append(p)
            elif p.phase in (hp.CLAIMED, hp.BOUND):
                claims.append(p)
        # Oldest first: moves waiting for a slot are served in the order they were asked for.
        moves.sort(key=lambda p: ((p.raw.get("metadata") or {}).get("creationTimestamp", ""), p.key))
        work = moves + claims
        for n, p in enumerate(work):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # let the webhooks in
            # Earlier writes of this pass (and the webhooks, while it yielded) may have moved it on.
            p = self.cache.placement(p.namespace, p.name) or p
            try:
                if p.evict_pod:
                    await self.mover.reconcile(p)
                    p = self.cache.placement(p.namespace, p.name) or p
                if p.phase in (hp.CLAIMED, hp.BOUND):
                    await self.reconcile(p)
            except (kube_errors.Conflict, kube_errors.NotFound):
                pass  # someone moved it on; the next pass sees the new version

    def _serves(self, namespace: str) -> bool:
        return self.cache.serves(namespace, self.settings.excluded_namespaces, self.settings.namespace_labels())

    def _claimed_pod(self, p: Placement) -> dict[str, Any] | None:
        return self.cache.pod_by_claim(p.claim)

    async def reconcile(self, p: Placement) -> None:
        if p.phase == hp.CLAIMED:
            pod = self._claimed_pod(p)
            if pod is not None:
                meta = pod["metadata"]
                seen = Observation(
                    Seen.POD_APPEARED, pod=meta["name"], pod_uid=meta.get("uid") or "", claim=p.claim or ""
                )
                await self.transitions.apply(p, seen)
                return
            if is_past(p.status.claim_lease_expires_at, self._now):
                await self.transitions.apply(p, Observation(Seen.LEASE_EXPIRED))
        elif p.phase == hp.BOUND:
            verdict = self._observe_bound(p)
            if verdict is not None:
                await self.transitions.apply(p, verdict)

    def _observe_bound(self, p: Placement) -> Observation | None:
        """What became of the bound pod: gone, elsewhere, allocated (on or off target), or waiting."""
        pod = self.cache.pod(p.namespace, p.status.bound_pod)
        if pod is None or (pod["metadata"].get("uid") and pod["metadata"]["uid"] != p.status.bound_pod_uid):
            return Observation(Seen.POD_LOST)
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node != p.node:
            return Observation(Seen.POD_ON_OTHER_NODE, node=node)
        allocated = ann.decode_pod_devices((pod["metadata"].get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED))
        uuids = tuple(sorted({d.uuid for c in allocated.containers for d in c}))
        if not uuids:
            return self._scheduling_verdict(pod)  # not allocated yet
        if (pod.get("status") or {}).get("phase") != "Running":
            return None  # allocated; wait until it runs
        if p.status.strategy == hp.SURGE and not pod_ready(pod):
            return None  # a surge removes the old pod only once the new one serves
        on_target = uuids == tuple(sorted(p.status.target_uuids or ()))
        return Observation(Seen.ALLOCATED_ON_TARGET if on_target else Seen.ALLOCATED_OFF_TARGET, uuids=uuids)

    def _scheduling_verdict(self, pod: dict[str, Any]) -> Observation | None:
        """While the pinned pod waits, show the scheduler's verdict (e.g. HAMi's FilteringFailed)."""
        cond = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or ()
                if c.get("type") == "PodScheduled" and c.get("status") == "False"
            ),
            None,
        )
        if cond is None:
            return None
        return Observation(
            Seen.POD_UNSCHEDULED, reason=str(cond.get("reason") or ""), detail=str(cond.get("message") or "")
        )
