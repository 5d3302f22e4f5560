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
from agent.mover import Mover
from agent.status import condition, is_past, merge_conditions, now_rfc3339, write_status
from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.placement import Placement

log = logging.getLogger("hami_place.agent.controller")

MIN_PASS_GAP = 0.1
FULL_PASS_SECONDS = 10.0
YIELD_EVERY = 100
_CLAIM_FIELDS = ("claim", "claimedBy", "claimedAt", "claimLeaseExpiresAt", "targetUUIDs", "boundPod", "boundPodUID")


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
        self.mover = Mover(settings, cache, kube, events)
        self._now = now_rfc3339()
        self.wake = asyncio.Event()
        self._dirty: set[str] = set()  # placements changed since the last pass
        self._moves: set[str] = set()  # moves not finished yet: looked at on every pass
        self._leases: list[tuple[str, str]] = []  # heap of (claimLeaseExpiresAt, placement key)
        self._full = True  # the next pass looks at every placement
        self._last_full = 0.0
        cache.pods.listeners.append(self._on_pod)
        cache.placements.listeners.append(self._on_placement)
        cache.namespaces.listeners.append(self._on_namespace)

    # ---- what changed (called by the cache for every event; cheap) --------------------------------
    def _on_placement(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = _key(obj)
        self._dirty.add(key)
        status = obj.get("status") or {}
        phase = status.get("phase") or hp.PENDING
        if kind != "DELETED" and (obj.get("spec") or {}).get("evictPod") and phase not in hp.TERMINAL:
            self._moves.add(key)
        else:
            self._moves.discard(key)
        lease = status.get("claimLeaseExpiresAt")
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
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.settings.controller_interval_seconds)

    def _due(self) -> set[str]:
        """The placements this pass must look at; resets what it takes over."""
        self._now = now_rfc3339()  # once per pass: formatting it per placement showed in profiles
        if self._full or time.monotonic() - self._last_full >= FULL_PASS_SECONDS:
            self._full, self._last_full = False, time.monotonic()
            self._dirty.clear()
            return {p.key for bucket in self.cache.by_namespace.values() for p in bucket.values()}
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
            if p.evict_pod and p.phase in (hp.PENDING, hp.EVICTING, hp.WAITING, hp.CLAIMED, hp.BOUND):
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
        if namespace in self.settings.excluded_namespaces:
            return False
        wanted = self.settings.namespace_labels()
        if not wanted:
            return True
        labels = self.cache.namespace_labels(namespace)
        return all(labels.get(k) == v for k, v in wanted.items())

    def _claimed_pod(self, p: Placement) -> dict[str, Any] | None:
        key = self.cache.pods_by_claim.get(p.claim or "")
        return self.cache.pods.store.get(key) if key else None

    async def reconcile(self, p: Placement) -> None:
        if p.phase == hp.CLAIMED:
            pod = self._claimed_pod(p)
            if pod is not None:
                await self._bind(p, pod)
                return
            if is_past(p.status.get("claimLeaseExpiresAt"), self._now):
                await self._release(p)
        elif p.phase == hp.BOUND:
            await self._confirm(p)

    async def _bind(self, p: Placement, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        status = {
            **p.status,
            "phase": hp.BOUND,
            "reason": "PodBound",
            "message": f"pod {meta['name']} carries the pin to {p.node}; waiting for HAMi to allocate the GPUs",
            "boundPod": meta["name"],
            "boundPodUID": meta.get("uid", ""),
            "conditions": merge_conditions(
                p.status.get("conditions") or [],
                [
                    condition("Claimed", True, "PodBound", f"pod {meta['name']} was pinned at admission", p.generation),
                ],
            ),
        }
        status.pop("claimLeaseExpiresAt", None)
        updated = await write_status(self.kube, self.cache, p, status)
        self.events.fire(self.events.on_placement(updated, "Bound", f"pod {meta['name']} pinned to {p.node}"))
        self.events.fire(
            self.events.on_pod(
                p.namespace,
                meta["name"],
                meta.get("uid", ""),
                "Pinned",
                f"pinned by HamiPodPlacement {p.name} (reqID {p.req_id}) to {p.node} GPUs {', '.join(p.gpu_devices)}",
            )
        )

    async def _release(self, p: Placement) -> None:
        status = {k: v for k, v in p.status.items() if k not in _CLAIM_FIELDS}
        # A move whose pod was already evicted goes back to waiting for a replacement, never to
        # Pending: that would evict a second pod for the same reqID.
        back_to = hp.WAITING if p.evict_pod and p.status.get("evictedAt") else hp.PENDING
        status.update(
            {
                "phase": back_to,
                "reason": "ClaimLeaseExpired",
                "message": (
                    f"the pod claimed at {p.status.get('claimedAt')} never appeared "
                    "(its admission was rejected or lost); waiting for the next matching pod"
                ),
            }
        )
        updated = await write_status(self.kube, self.cache, p, status)
        metrics.LEASE_EXPIRIES.inc()
        self.events.fire(self.events.on_placement(updated, "ClaimLeaseExpired", status["message"], "Warning"))

    async def _confirm(self, p: Placement) -> None:
        pod = self.cache.pods.store.get(f"{p.namespace}/{p.status.get('boundPod')}")
        if pod is None or (pod["metadata"].get("uid") and pod["metadata"]["uid"] != p.status.get("boundPodUID")):
            await self._finish(
                p, hp.FAILED, "PodGone", f"pod {p.status.get('boundPod')} disappeared before HAMi allocated its GPUs"
            )
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node != p.node:
            await self._finish(
                p, hp.FAILED, "WrongNode", f"pod {p.status.get('boundPod')} was bound to {node}, not {p.node}"
            )
            return
        allocated = ann.decode_pod_devices((pod["metadata"].get("annotations") or {}).get(ann.POD_DEVICES_ALLOCATED))
        uuids = sorted({d.uuid for c in allocated.containers for d in c})
        if not uuids:
            await self._report_scheduling(p, pod)
            return  # not allocated yet
        if (pod.get("status") or {}).get("phase") != "Running":
            return  # allocated; wait until it runs
        target = sorted(p.status.get("targetUUIDs") or [])
        if uuids == target:
            await self._finish(
                p,
                hp.COMPLETED,
                "Allocated",
                f"HAMi allocated the target GPUs {', '.join(target)} on {p.node}",
                allocated=uuids,
            )
        else:
            # HAMi issues #958/#968: the scheduler can allocate other GPUs than use-gpuuuid asked for.
            await self._finish(
                p,
                hp.FAILED,
                "AllocationMismatch",
                f"HAMi allocated {', '.join(uuids)} but the target was {', '.join(target)}",
                allocated=uuids,
            )

    async def _report_scheduling(self, p: Placement, pod: dict[str, Any]) -> None:
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
            return
        reason = str(cond.get("reason") or "Unschedulable")
        message = f"pod {p.status.get('boundPod')} is not scheduled yet: {cond.get('message') or reason}"
        if p.status.get("reason") == reason and p.status.get("message") == message:
            return
        await write_status(self.kube, self.cache, p, {**p.status, "reason": reason, "message": message[:4096]})

    async def _finish(
        self, p: Placement, phase: str, reason: str, message: str, allocated: list[str] | None = None
    ) -> None:
        status = {**p.status, "phase": phase, "reason": reason, "message": message}
        if allocated is not None:
            status["allocatedDevices"] = allocated
        if phase == hp.COMPLETED:
            status["consumedAt"] = now_rfc3339()
            if p.evict_pod:
                metrics.MOVES.labels(step="completed").inc()
        status["conditions"] = merge_conditions(
            p.status.get("conditions") or [],
            [
                condition("Ready", phase == hp.COMPLETED, reason, message, p.generation),
            ],
        )
        updated = await write_status(self.kube, self.cache, p, status)
        kind = "Normal" if phase == hp.COMPLETED else "Warning"
        self.events.fire(self.events.on_placement(updated, reason, message, kind))
        pod = self.cache.pods.store.get(f"{p.namespace}/{p.status.get('boundPod')}")
        if pod is not None:
            meta = pod["metadata"]
            note = f"HamiPodPlacement {p.name}: {message}"
            self.events.fire(self.events.on_pod(p.namespace, meta["name"], meta.get("uid", ""), reason, note, kind))
