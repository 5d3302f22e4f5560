"""Plain logic behind the REST API: what /api/v1/cluster-info and /api/v1/placements return, and
the server-sent events of one placement's progress (its handler in app.py only subscribes and
sends)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agent.cache import ClusterCache
from hami_place_core import placement as hp
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


KEEP_ALIVE_SECONDS = 15


async def placement_events(first: hp.Placement, changes: asyncio.Queue[dict[str, Any]]) -> AsyncIterator[str]:
    """SSE frames for one placement: its view now, then each change of phase, reason or message
    (`changes` holds its watch events), a keep-alive comment when nothing changes, until it ends
    or is deleted."""
    view = placement_view(first)
    yield f"event: placement\ndata: {json.dumps(view)}\n\n"
    last = (view["phase"], view["reason"], view["message"])
    while view["phase"] not in hp.TERMINAL:
        try:
            item = await asyncio.wait_for(changes.get(), KEEP_ALIVE_SECONDS)
        except TimeoutError:
            yield ": keep-alive\n\n"
            continue
        if item["kind"] == "DELETED":
            yield f"event: deleted\ndata: {json.dumps({'namespace': first.namespace, 'name': first.name})}\n\n"
            return
        view = placement_view(hp.Placement.from_object(item["object"]))
        key = (view["phase"], view["reason"], view["message"])
        if key != last:
            yield f"event: placement\ndata: {json.dumps(view)}\n\n"
            last = key
