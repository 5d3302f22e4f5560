"""Plain logic behind the REST API: what /api/v1/cluster-info and /api/v1/placements return."""

from __future__ import annotations

from typing import Any

from agent.cache import ClusterCache
from hami_place_core.fragmentation import cluster_metrics, free_share, mix_from_state
from hami_place_core.placement import Placement


def cluster_info(cache: ClusterCache) -> dict[str, Any]:
    state = cache.state
    metrics = cluster_metrics(state, mix_from_state(state))
    nodes = []
    for name in sorted(state.nodes):
        n = state.nodes[name]
        nm = metrics.nodes.get(name)
        nodes.append(
            {
                "name": name,
                "ready": n.ready,
                "unschedulable": n.unschedulable,
                "registerFormat": n.register.format,
                "error": n.error,
                "metrics": nm.as_dict() if nm else None,
                "gpus": [
                    {
                        "index": g.index,
                        "uuid": g.uuid,
                        "type": g.type,
                        "health": g.health,
                        "cordoned": g.uuid in n.cordoned,
                        "memory": {"used": n.usage[g.uuid].usedmem, "total": g.devmem},
                        "cores": {"used": n.usage[g.uuid].usedcores, "total": g.devcore},
                        "slots": {"used": n.usage[g.uuid].used, "total": g.count},
                        "free": round(free_share(g, n.usage[g.uuid]), 4),
                        "pods": sorted(n.pods[g.uuid]),
                    }
                    for g in n.devices
                ],
            }
        )
    return {
        "cluster": {**metrics.total.as_dict(), "fragmentationRate": round(metrics.fragmentation_rate, 4)},
        "nodes": nodes,
        "problems": state.problem_lines(),
    }


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
