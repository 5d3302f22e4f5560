"""Plain logic behind the REST API: what /api/v1/cluster-info and /api/v1/placements return."""

from __future__ import annotations

from typing import Any

from agent.cache import ClusterCache
from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.placement import placement_view
from hami_place_core.snapshot import summary


def cluster_info(cache: ClusterCache) -> dict[str, Any]:
    """The same computed view `inspect -o json` puts in a snapshot's summary."""
    state = cache.state
    return summary(state, cluster_metrics(state, mix_from_state(state)))


def placements(cache: ClusterCache, namespace: str | None) -> dict[str, Any]:
    found = cache.placements_in(namespace) if namespace else cache.all_placements()
    items = sorted((placement_view(p) for p in found), key=lambda v: (v["namespace"], v["name"]))
    return {"items": items, "count": len(items)}
