"""Kubernetes Events for placements and pods, so `kubectl describe` tells the story.

Events are best effort: a failure to record one is logged and counted, never propagated.

Repeats are aggregated as client-go's EventRecorder does (its EventCorrelator): the same reason,
message and type on the same object within ten minutes bumps `count` and `lastTimestamp` of the
Event already written instead of adding another object, so a PDB that blocks a move for an hour
is one Event with count 120, not 120 Events.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any

from agent import metrics
from agent.kube import AsyncKube
from hami_place_core import placement as hp

log = logging.getLogger("hami_place.agent.events")
COMPONENT = "hami-place-agent"
AGGREGATE_SECONDS = 600.0  # client-go's correlator window (10 minutes)
REMEMBERED = 4096  # events remembered for aggregation (least recently used go first)


class EventRecorder:
    def __init__(self, kube: AsyncKube, agent_id: str) -> None:
        self.kube = kube
        self.agent_id = agent_id
        self._pending: set[asyncio.Task[None]] = set()
        # (namespace, object uid or name, reason, message, type) -> (Event name, count, first seen)
        self._seen: OrderedDict[tuple[str, str, str, str, str], tuple[str, int, float]] = OrderedDict()

    def fire(self, coro: Coroutine[Any, Any, None]) -> None:
        """Record in the background: an admission answer never waits for an Event write."""
        task = asyncio.create_task(coro)
        self._pending.add(task)  # keep a reference until done, or the task may be collected
        task.add_done_callback(self._pending.discard)

    async def record(self, involved: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        ns = involved.get("namespace") or "default"
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        key = (ns, str(involved.get("uid") or involved.get("name")), reason, message[:1024], type_)
        if await self._bump(key, ns, now):
            return
        name = f"{involved.get('name', 'x')}.{secrets.token_hex(8)}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": COMPONENT, "host": self.agent_id},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.agent_id,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.kube.request("POST", f"/api/v1/namespaces/{ns}/events", body=body)
        except Exception as e:  # noqa: BLE001 - events never break the flow they describe
            metrics.ERRORS.labels(kind="event").inc()
            log.warning("could not record event %s on %s/%s: %s", reason, ns, involved.get("name"), e)
            return
        self._remember(key, (name, 1, time.monotonic()))

    async def _bump(self, key: tuple[str, str, str, str, str], ns: str, now: str) -> bool:
        """The same Event again within the window: count + 1 and lastTimestamp on the one written
        (a merge patch); False when there is none to bump (or it is gone), so a new one is made."""
        seen = self._seen.get(key)
        if seen is None or time.monotonic() - seen[2] > AGGREGATE_SECONDS:
            return False
        name, count, first = seen
        patch = {"count": count + 1, "lastTimestamp": now}
        try:
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/events/{name}",
                body=patch,
                content_type="application/merge-patch+json",
            )
        except Exception as e:  # noqa: BLE001 - deleted, expired (the API server's event TTL): write anew
            log.debug("event %s/%s not bumped (%s); recording a new one", ns, name, e)
            self._seen.pop(key, None)
            return False
        self._remember(key, (name, count + 1, first))
        return True

    def _remember(self, key: tuple[str, str, str, str, str], value: tuple[str, int, float]) -> None:
        self._seen[key] = value
        self._seen.move_to_end(key)
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)

    async def on_placement(self, p: hp.Placement, reason: str, message: str, type_: str = "Normal") -> None:
        await self.record(
            {"apiVersion": hp.API_VERSION, "kind": hp.KIND, "namespace": p.namespace, "name": p.name, "uid": p.uid},
            reason,
            message,
            type_,
        )

    async def on_pod(
        self, namespace: str, name: str, uid: str, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        await self.record(
            {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
            reason,
            message,
            type_,
        )
