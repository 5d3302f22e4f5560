"""Surge moves (spec.strategy Surge, or Auto where safe): add a replica first, remove the old pod last.

Steps, each a status write before (intent) or after (result) its side effect, so a restarted
agent resumes where the last one stopped and the replica count is always restored:

1. Pending: the checks (``hami_place_core.surge``: a Deployment's or ReplicaSet's pod, no
   autoscaler or other owner of the count, not paused or mid-rollout; the target has room while
   the old pod still runs). The finalizer goes on first, so a deleted placement still restores
   the count; then the intent (ScalingUp, with the count before and the pod to remove).
2. ScalingUp: the scale subresource goes from N to N+1 by a JSON patch that tests N, so a count
   someone else changed is never overwritten. The new pod is claimed and pinned as a move's
   replacement is (Claimed, Bound); the controller waits until it is Ready on the target GPUs.
3. ScalingDown (on success, failure, timeout or withdrawal): the pod to remove (the old one, or
   the new one when the move failed) gets the lowest pod-deletion-cost, and once the cache shows
   it, the count goes back from N+1 to N (again tested). Then the placement is terminal and the
   finalizer comes off.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from agent.cache import ClusterCache
from agent.failpoints import failpoint
from agent.kube import AsyncKube
from agent.status import parse_rfc3339
from agent.transitions import Transitions
from hami_place_core import placement as hp
from hami_place_core import surge
from hami_place_core.kube import errors as kube_errors
from hami_place_core.lifecycle import Observation, Seen
from hami_place_core.placement import Placement

log = logging.getLogger("hami_place.agent.surge")

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


async def _get(kube: AsyncKube, path: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = await kube.request("GET", path)
        return obj
    except kube_errors.NotFound:
        return None


class Surger:
    def __init__(self, cache: ClusterCache, kube: AsyncKube, transitions: Transitions) -> None:
        self.cache = cache
        self.kube = kube
        self.transitions = transitions

    # ---- step 1: may this pod surge? ------------------------------------------------------------
    async def plan(self, p: Placement, pod: dict[str, Any]) -> surge.ScaleTarget:
        """The object to scale for `pod`, or SurgeRefused with why not (nothing is changed)."""
        try:
            return await self._plan(p, pod)
        except kube_errors.Forbidden as e:
            raise surge.SurgeRefused(f"the agent may not read what a surge checks ({e})") from e

    async def _plan(self, p: Placement, pod: dict[str, Any]) -> surge.ScaleTarget:
        surge.refuse_owner(pod)
        _, rs_name = surge.owner_kind(pod) or ("", "")
        ns = p.namespace
        rs = await _get(self.kube, f"/apis/apps/v1/namespaces/{ns}/replicasets/{rs_name}")
        if rs is None:
            raise surge.SurgeRefused(f"ReplicaSet {rs_name} of pod {p.evict_pod} no longer exists")
        owner = surge.controller_of(rs)
        deployment = None
        if owner is not None and owner.get("kind") == "Deployment":
            deployment = await _get(self.kube, f"/apis/apps/v1/namespaces/{ns}/deployments/{owner.get('name')}")
            if deployment is None:
                raise surge.SurgeRefused(f"Deployment {owner.get('name')} of pod {p.evict_pod} no longer exists")
        hpas = await self.kube.request("GET", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers")
        return surge.scale_target(rs, deployment, hpas.get("items") or ())

    async def start(
        self, p: Placement, pod: dict[str, Any], target: surge.ScaleTarget, siblings: tuple[str, ...]
    ) -> None:
        """The finalizer, then the intent; the scale-up follows on the same pass."""
        try:
            p = await self.add_finalizer(p)
        except kube_errors.Forbidden as e:
            why = f"the agent may not add its finalizer to placement {p.name} ({e})"
            await self.transitions.apply(p, Observation(Seen.SURGE_ABORTED, detail=why))
            return
        intent = Observation(
            Seen.SURGE_STARTED,
            pod_uid=pod["metadata"].get("uid") or "",
            workload=hp.workload_key(pod) or "",
            siblings=siblings,
            scaled=target.ref,
            replicas=target.replicas,
        )
        updated = await self.transitions.apply(p, intent)
        if updated is not None:
            await self.scale_up(updated)

    # ---- step 2: one replica more ----------------------------------------------------------------
    def _scale_path(self, p: Placement) -> str:
        kind, _, name = (p.status.surge_target or "").partition("/")
        return surge.ScaleTarget(kind, name, 0).scale_path(p.namespace)

    async def _set_replicas(self, p: Placement, expected: int, new: int) -> str:
        """'' when the count is `new` now (set here, or by an earlier attempt that crashed before
        its status write); otherwise why it was left alone."""
        path = self._scale_path(p)
        try:
            await self.kube.request("PATCH", path, body=surge.replica_patch(expected, new), content_type=JSON_PATCH)
            return ""
        except kube_errors.NotFound:
            return f"{p.status.surge_target} no longer exists"
        except kube_errors.Invalid:
            pass  # the test failed: the count is not `expected`
        scale = await _get(self.kube, path)
        now = ((scale or {}).get("spec") or {}).get("replicas")
        if now == new:
            return ""
        return (
            f"{p.status.surge_target} has {now} replicas, not {expected}: someone else changed the count; left as it is"
        )

    async def scale_up(self, p: Placement) -> None:
        if p.status.scaled_up_at:
            return
        n = p.status.surge_replicas or 0
        failpoint("surge.before-scale-up")
        try:
            why = await self._set_replicas(p, n, n + 1)
        except kube_errors.Forbidden as e:
            why = f"the agent may not scale it: {e}"
        if why:
            await self.transitions.apply(p, Observation(Seen.SURGE_ABORTED, detail=why))
            return
        failpoint("surge.after-scale-up")
        await self.transitions.apply(p, Observation(Seen.SCALED_UP))

    # ---- step 3: back to the count it had ------------------------------------------------------
    async def scale_down(self, p: Placement) -> None:
        unmarked = ""
        try:
            if await self._mark_pod_to_remove(p):
                return  # the next pass scales down, once the cache (like the ReplicaSet controller's) has the mark
        except kube_errors.Forbidden as e:
            # Restoring the count comes first; say that the controller chose the pod it removed.
            unmarked = (
                f"; the agent may not mark pod {p.status.remove_pod} for removal ({e}), "
                "so the ReplicaSet controller chose the pod it removed"
            )
        n = p.status.surge_replicas or 0
        failpoint("surge.before-scale-down")
        why = await self._set_replicas(p, n + 1, n)
        if unmarked:
            why = (why or f"{p.status.surge_target} is back to {n} replicas") + unmarked
        failpoint("surge.after-scale-down")
        updated = await self.transitions.apply(p, Observation(Seen.SCALED_DOWN, detail=why))
        if updated is not None:
            await self.remove_finalizer(updated)

    async def _mark_pod_to_remove(self, p: Placement) -> bool:
        """Whether the pod to remove was marked just now (or is not marked in the cache yet)."""
        if not p.status.remove_pod:
            return False
        pod = self.cache.pod(p.namespace, p.status.remove_pod)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return False
        if p.status.remove_pod_uid and pod["metadata"].get("uid") != p.status.remove_pod_uid:
            return False  # the name is another pod's now
        if (pod["metadata"].get("annotations") or {}).get(surge.DELETION_COST) == surge.REMOVE_FIRST:
            return False
        body = {"metadata": {"annotations": {surge.DELETION_COST: surge.REMOVE_FIRST}}}
        try:
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{p.namespace}/pods/{p.status.remove_pod}",
                body=body,
                content_type=MERGE_PATCH,
            )
        except kube_errors.NotFound:
            return False
        return True

    # ---- the finalizer ---------------------------------------------------------------------------
    async def add_finalizer(self, p: Placement) -> Placement:
        finalizers = list((p.raw.get("metadata") or {}).get("finalizers") or ())
        if hp.SURGE_FINALIZER in finalizers:
            return p
        return await self._put_finalizers(p, [*finalizers, hp.SURGE_FINALIZER])

    async def remove_finalizer(self, p: Placement) -> None:
        finalizers = list((p.raw.get("metadata") or {}).get("finalizers") or ())
        if hp.SURGE_FINALIZER in finalizers:
            await self._put_finalizers(p, [f for f in finalizers if f != hp.SURGE_FINALIZER])

    async def _put_finalizers(self, p: Placement, finalizers: list[str]) -> Placement:
        # A merge patch with the resourceVersion: a 409 means the placement moved on meanwhile.
        body = {"metadata": {"resourceVersion": p.resource_version, "finalizers": finalizers}}
        updated = await self.kube.request(
            "PATCH", hp.placement_path(p.namespace, p.name), body=body, content_type=MERGE_PATCH
        )
        self.cache.apply("placements", {"type": "MODIFIED", "object": updated})
        return Placement.from_object(updated)


def deleted(p: Placement) -> bool:
    return bool((p.raw.get("metadata") or {}).get("deletionTimestamp"))


def holds_finalizer(p: Placement) -> bool:
    return hp.SURGE_FINALIZER in ((p.raw.get("metadata") or {}).get("finalizers") or ())


def surge_started(p: Placement) -> dt.datetime | None:
    """When the replica was added (the replacement deadline counts from there)."""
    return parse_rfc3339(p.status.scaled_up_at or p.status.move_started_at)
