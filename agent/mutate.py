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
from agent.logs import fields
from agent.transitions import Transitions
from hami_place_core import placement as hp
from hami_place_core.lifecycle import Observation, Seen
from hami_place_core.placement import (
    Placement,
    link_annotations,
    pin_patch,
    pod_resource_problems,
    pod_shape_problems,
    workload_key,
)
from hami_place_core.problems import Problem, messages
from hami_place_core.requests import has_hami_resources
from hami_place_core.targets import TargetError, resolve

log = logging.getLogger("hami_place.agent.mutate")

HAMI_SCHEDULER = "hami-scheduler"


def is_candidate(pod: dict[str, Any]) -> bool:
    """Pods HAMi will schedule: named for hami-scheduler, or asking for HAMi resources (then HAMi's
    own webhook sets the scheduler name, possibly after ours: we are reinvoked, IfNeeded)."""
    spec = pod.get("spec") or {}
    return spec.get("schedulerName") == HAMI_SCHEDULER or has_hami_resources(pod)


def _pod_label(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or (str(meta.get("generateName") or "") + "<generated>"))


def _unexamined(problems: list[Problem]) -> Verdict:
    """Never block a pod: one the API server could not have sent is admitted unchanged."""
    return Verdict(warnings=[f"hami-place: pod not examined ({'; '.join(messages(problems))}); admitted unchanged"])


class PodMutator:
    def __init__(self, settings: Settings, cache: ClusterCache, kube: AsyncKube, events: EventRecorder) -> None:
        self.settings = settings
        self.cache = cache
        self.kube = kube
        self.events = events
        self.transitions = Transitions(kube, cache, events)

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
        # Shapes only a crafted review carries are found before anything reads them: cheaply on
        # every review, in full once a placement could claim the pod.
        malformed = pod_resource_problems(pod)
        if malformed:
            return _unexamined(malformed)
        if not is_candidate(pod):
            return Verdict()
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        reapply = type(annotations) is dict and hp.POD_CLAIM in annotations
        candidates = [] if reapply else self.cache.claim_candidates(review.namespace, meta.get("labels") or {})
        if not reapply and not candidates:
            return Verdict()
        malformed = pod_shape_problems(pod)
        if malformed:
            return _unexamined(malformed)
        if reapply:
            return self._reapply(review, annotations)
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
                    extra=fields(p, pod=f"{review.namespace}/{_pod_label(pod)}"),
                )
                continue
            assert claimed.targets is not None and claimed.claim
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
        uuids = list(p.status.target_uuids or ())
        if not uuids:
            return Verdict()
        return Verdict(patch=pin_patch(review.obj, p.node, uuids, p.targets, link_annotations(p, str(p.claim))))

    async def _claim(self, p: Placement, uuids: list[str], pod_label: str, owner: str | None) -> Placement | None:
        """Consume `p` exactly once, via a status write with a resourceVersion precondition."""
        seen = Observation(
            Seen.POD_CLAIMED,
            pod=pod_label,
            claim=secrets.token_hex(8),
            agent=self.settings.agent_id,
            lease_seconds=self.settings.claim_lease_seconds,
            uuids=tuple(uuids),
        )
        # A 409 means someone wrote first (another pod's claim, or the mover recording the eviction
        # this replacement was created for): re-read and retry while the placement stays claimable.
        # The claim is always written on top of the status read: a move's eviction record survives.
        return await self.transitions.apply(p, seen, still=lambda _, fresh: claimable(fresh, owner))
