"""Events are aggregated as client-go's recorder does: the same reason, message and type on the same
object bumps count and lastTimestamp of the Event already written (on the real API server)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client

from agent.events import EventRecorder
from agent.kube import AsyncKube, load_credentials

pytestmark = [pytest.mark.testbed]


def test_repeated_events_are_one_object_with_a_count(testbed: Any, api: Any, ns: str) -> None:
    core = client.CoreV1Api(api)
    pod = {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "blocked", "uid": "uid-blocked"}

    async def scenario() -> None:
        kube = AsyncKube(load_credentials(str(testbed.kubeconfig), None))
        try:
            events = EventRecorder(kube, "test-agent")
            for _ in range(3):
                await events.record(pod, "EvictionBlocked", "waiting: PDB web allows 0 disruptions", "Warning")
            await events.record(pod, "EvictionBlocked", "waiting: PDB db allows 0 disruptions", "Warning")
            items = core.list_namespaced_event(ns).items
            assert sorted((e.message, e.count) for e in items) == [
                ("waiting: PDB db allows 0 disruptions", 1),
                ("waiting: PDB web allows 0 disruptions", 3),
            ]
            (web,) = [e for e in items if "web" in e.message]
            assert web.last_timestamp >= web.first_timestamp
            # gone (deleted, or expired by the API server's event TTL): the next one is written anew
            core.delete_namespaced_event(web.metadata.name, ns)
            await events.record(pod, "EvictionBlocked", "waiting: PDB web allows 0 disruptions", "Warning")
            again = [e for e in core.list_namespaced_event(ns).items if "web" in e.message]
            assert [(e.count, e.metadata.name != web.metadata.name) for e in again] == [(1, True)]
        finally:
            await kube.close()

    asyncio.run(scenario())
