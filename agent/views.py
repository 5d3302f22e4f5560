"""Plain logic behind the REST API: what /api/v1/cluster-info and /api/v1/placements return."""

from __future__ import annotations

from typing import Any

from agent.cache import ClusterCache
from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.placement import Placement
from hami_place_core.snapshot import summary


def cluster_info(cache: ClusterCache) -> dict[str, Any]:
    """The same computed view `inspect -o json` puts in a snapshot's summary."""
    state = cache.state
    return summary(state, cluster_metrics(state, mix_from_state(state)))


def placement_view(p: Placement) -> dict[str, Any]:
    return {
        "namespace": p.namespace,
        "name": p.name,
        "reqID": p.req_id,
        "nodeName": p.node,
        "gpuDevices": list(p.gpu_devices),
        "evictPod": p.evict_pod,
        "phase": p.phase,
        "reason": p.status.get("reason"),
        "message": p.status.get("message"),
        "boundPod": p.status.get("boundPod"),
        "targetUUIDs": p.status.get("targetUUIDs") or [],
        "allocatedDevices": p.status.get("allocatedDevices") or [],
        "claimedAt": p.status.get("claimedAt"),
        "consumedAt": p.status.get("consumedAt"),
        "resourceVersion": p.resource_version,
    }


def placements(cache: ClusterCache, namespace: str | None) -> dict[str, Any]:
    buckets = [cache.by_namespace.get(namespace, {})] if namespace else list(cache.by_namespace.values())
    items = sorted((placement_view(p) for b in buckets for p in b.values()), key=lambda v: (v["namespace"], v["name"]))
    return {"items": items, "count": len(items)}
