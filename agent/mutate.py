"""The mutating webhook's logic: match a new pod to a pending placement, claim it once, pin the pod.

Never blocks a pod: anything unexpected admits the pod unchanged, logged and counted (the
webhook is also registered with failurePolicy Ignore). The no-match path touches only the
in-memory cache (the claim index: O(the pod's labels)); only a match costs an API call (the claim).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from agent import metrics
from agent.admission import Review, Verdict
from agent.cache import ClusterCache
from agent.claims import claimable
from agent.config import Settings
from agent.events import EventRecorder
from agent.kube import AsyncKube
from agent.status import now_rfc3339, reread, write_status
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.placement import Placement, link_annotations, pin_patch, workload_key
from hami_place_core.requests import has_hami_resources
from hami_place_core.targets import TargetError, resolve

log = logging.getLogger("hami_place.agent.mutate")

HAMI_SCHEDULER = "hami-scheduler"
CLAIM_ATTEMPTS = 5


def is_candidate(pod: dict[str, Any]) -> bool:
    """Pods HAMi will schedule: named for hami-scheduler, or asking for HAMi resources (then HAMi's
    own webhook sets the scheduler name, possibly after ours: we are reinvoked, IfNeeded)."""
    spec = pod.get("spec") or {}
    return spec.get("schedulerName") == HAMI_SCHEDULER or has_hami_resources(pod)


def _pod_label(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or (str(meta.get("generateName") or "") + "<generated>"))


class PodMutator:
    def __init__(self, settings: Settings, cache: ClusterCache, kube: AsyncKube, events: EventRecorder) -> None:
        self.settings = settings
        self.cache = cache
        self.kube = kube
        self.events = events

    async def review(self, review: Review) -> Verdict:
        try:
            return await self._review(review)
        except Exception as e:  # never block pod creation
            metrics.ERRORS.labels(kind="mutate").inc()
            log.exception("mutating webhook failed for %s/%s; admitting unchanged", review.namespace, review.name)
            return Verdict(warnings=[f"hami-place: internal error ({type(e).__name__}); pod admitted unchanged"])

    async def _review(self, review: Review) -> Verdict:
        pod = review.obj
        if review.operation != "CREATE" or review.namespace in self.settings.excluded_namespaces:
            return Verdict()
        if not is_candidate(pod):
            return Verdict()
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if hp.POD_CLAIM in annotations:
            return self._reapply(review, annotations)
        candidates = self.cache.claim_candidates(review.namespace, meta.get("labels") or {})
        if not candidates:
            return Verdict()
        owner = workload_key(pod, review.namespace)
        candidates = [p for p in candidates if claimable(p, owner)]
        if not candidates:
            return Verdict()
        if not self.cache.ready:
            return Verdict(warnings=["hami-place: cache not synced yet; placement not applied, pod admitted unchanged"])
        # Oldest first, so placements for the same workload are consumed in the order they were made.
        candidates.sort(key=lambda p: ((p.raw.get("metadata") or {}).get("creationTimestamp", ""), p.name))
        warnings: list[str] = []
        for p in candidates:
            node = self.cache.state.nodes.get(p.node)
            try:
                if node is None:
                    raise TargetError(f"node {p.node} not found")
                assert p.targets is not None
                uuids = [g.uuid for g in resolve(p.targets, node)]
            except TargetError as e:
                warnings.append(f"hami-place: placement {p.name} skipped: {e}")
                continue
            if review.dry_run:
                # Show what would happen, consume nothing (sideEffects: NoneOnDryRun).
                patch = pin_patch(pod, p.node, uuids, p.targets, link_annotations(p, "dry-run"))
                return Verdict(
                    patch=patch, warnings=[*warnings, f"hami-place: dry run, placement {p.name} not consumed"]
                )
            claimed = await self._claim(p, uuids, _pod_label(pod), owner)
            if claimed is None:
                log.info(
                    "pod %s/%s: placement %s was taken or changed concurrently; trying the next one",
                    review.namespace,
                    _pod_label(pod),
                    p.name,
                )
                continue
            assert claimed.targets is not None and claimed.claim
            metrics.CLAIMS.inc()
            self.events.fire(
                self.events.on_placement(
                    claimed,
                    "Claimed",
                    f"claimed by new pod {_pod_label(pod)}: pinned to {p.node} GPUs {','.join(uuids)}",
                )
            )
            return Verdict(
                patch=pin_patch(pod, p.node, uuids, claimed.targets, link_annotations(claimed, claimed.claim)),
                warnings=warnings,
            )
        log.info(
            "pod %s/%s admitted unpinned: no placement among %s could be claimed",
            review.namespace,
            _pod_label(pod),
            [c.name for c in candidates],
        )
        return Verdict(warnings=warnings)

    def _reapply(self, review: Review, annotations: dict[str, str]) -> Verdict:
        """Reinvocation (or a pod created from a pinned manifest): re-apply the same pin, claim nothing."""
        p = self.cache.placement(review.namespace, annotations.get(hp.POD_PLACEMENT, ""))
        if p is None or p.claim != annotations.get(hp.POD_CLAIM) or p.targets is None:
            return Verdict()
        uuids = list(p.status.get("targetUUIDs") or [])
        if not uuids:
            return Verdict()
        return Verdict(patch=pin_patch(review.obj, p.node, uuids, p.targets, link_annotations(p, str(p.claim))))

    async def _claim(self, p: Placement, uuids: list[str], pod_label: str, owner: str | None) -> Placement | None:
        """Consume `p` exactly once, via a status write with a resourceVersion precondition."""
        token = secrets.token_hex(8)
        claim = {
            "phase": hp.CLAIMED,
            "reason": "Claimed",
            "message": f"claimed at admission by pod {pod_label}; waiting for it to appear",
            "claim": token,
            "claimedBy": self.settings.agent_id,
            "claimedAt": now_rfc3339(),
            "claimLeaseExpiresAt": now_rfc3339(self.settings.claim_lease_seconds),
            "targetUUIDs": uuids,
        }
        # A 409 means someone wrote first (another pod's claim, or the mover recording the eviction
        # this replacement was created for): re-read and retry while the placement stays claimable.
        for _ in range(CLAIM_ATTEMPTS):
            try:
                # Always on top of the status we read: a move's eviction record must survive the claim.
                return await write_status(self.kube, self.cache, p, {**p.status, **claim})
            except kube_errors.Conflict:
                metrics.CLAIM_CONFLICTS.inc()
                fresh = await reread(self.kube, self.cache, p)
                if fresh is None or not claimable(fresh, owner):
                    log.info(
                        "placement %s no longer claimable: phase %s, reason %s",
                        p.key,
                        fresh.phase if fresh else "deleted",
                        fresh.status.get("reason") if fresh else "",
                    )
                    return None
                p = fresh
        return None
