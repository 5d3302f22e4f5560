"""Kubernetes Events for placements and pods, so `kubectl describe` tells the story.

Events are best effort: a failure to record one is logged and counted, never propagated.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
from collections.abc import Coroutine
from typing import Any

from agent import metrics
from agent.kube import AsyncKube
from hami_place_core import placement as hp

log = logging.getLogger("hami_place.agent.events")
COMPONENT = "hami-place-agent"


class EventRecorder:
    def __init__(self, kube: AsyncKube, agent_id: str) -> None:
        self.kube = kube
        self.agent_id = agent_id
        self._pending: set[asyncio.Task[None]] = set()

    def fire(self, coro: Coroutine[Any, Any, None]) -> None:
        """Record in the background: an admission answer never waits for an Event write."""
        task = asyncio.create_task(coro)
        self._pending.add(task)  # keep a reference until done, or the task may be collected
        task.add_done_callback(self._pending.discard)

    async def record(self, involved: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        ns = involved.get("namespace") or "default"
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved.get('name', 'x')}.{secrets.token_hex(8)}", "namespace": ns},
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
