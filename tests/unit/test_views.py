"""The REST API's placement progress stream (agent/views.py placement_events), without a server:
its first frame, one frame per change of phase/reason/message, the end at a terminal phase or a
deletion. The stream through a real agent is tests/agent (the CLI's `-w` and `move` follow it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.views import placement_events
from hami_place_core import placement as hp


def obj(phase: str, message: str = "") -> dict[str, Any]:
    spec = {"reqID": "abcde", "podSelector": {"matchLabels": {"app": "a"}}, "nodeName": "n0", "gpuDevices": ["gpu-0"]}
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": spec,
        "status": {"phase": phase, "message": message},
    }


def frames(first: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    async def run() -> list[str]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for e in events:
            queue.put_nowait(e)
        return [f async for f in placement_events(hp.Placement.from_object(first), queue)]

    return asyncio.run(run())


def phases(out: list[str]) -> list[str]:
    return [json.loads(f.split("data: ", 1)[1])["phase"] for f in out if f.startswith("event: placement")]


def test_one_frame_per_change_until_the_placement_ends() -> None:
    out = frames(
        obj("Pending"),
        [
            {"kind": "MODIFIED", "object": obj("Pending")},  # nothing changed: no frame
            {"kind": "MODIFIED", "object": obj("Claimed", "claimed")},
            {"kind": "MODIFIED", "object": obj("Completed", "done")},
            {"kind": "MODIFIED", "object": obj("Completed", "never sent")},
        ],
    )
    assert phases(out) == ["Pending", "Claimed", "Completed"]


def test_a_deleted_placement_ends_the_stream() -> None:
    out = frames(obj("Pending"), [{"kind": "DELETED", "object": obj("Pending")}])
    assert out[-1] == 'event: deleted\ndata: {"namespace": "ns", "name": "p"}\n\n'
