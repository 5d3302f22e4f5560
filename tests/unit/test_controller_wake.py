"""The controller's run loop: a change that arrives while a pass runs starts the next pass.

No timing is asserted: the periodic interval is an hour, so only the wake can start pass 2; the
test's own bound (30 s) fails it instead of hanging if the wake is lost.
"""

from __future__ import annotations

import asyncio

from agent.cache import ClusterCache
from agent.config import Settings
from agent.controller import PlacementController
from hami_place_core import placement as hp


class _SyncedCache(ClusterCache):
    """No informers to wait for: events are applied by hand."""

    async def wait_ready(self, timeout: float) -> bool:
        return True


class _CountingController(PlacementController):
    """Records passes; during the first, a placement event arrives as the cache delivers it."""

    def __init__(self, cache: ClusterCache) -> None:
        super().__init__(Settings(controller_interval_seconds=3600), cache, None, None)  # type: ignore[arg-type]
        self.passes = 0
        self.second_pass = asyncio.Event()

    async def reconcile_all(self) -> None:
        self.passes += 1
        if self.passes == 1:
            spec = {"reqID": "m", "podSelector": {"matchLabels": {"app": "m"}}, "nodeName": "n", "evictPod": "x"}
            meta = {"name": "m", "namespace": "ns", "resourceVersion": "2"}
            event = {"metadata": meta, "spec": spec, "status": {"phase": hp.EVICTING}}
            self.cache.apply("placements", {"type": "MODIFIED", "object": event})
        else:
            self.second_pass.set()


def test_a_change_during_a_pass_starts_the_next_pass_without_waiting_for_the_interval() -> None:
    async def scenario() -> None:
        cache = _SyncedCache(None)  # type: ignore[arg-type]  # no API calls
        ctl = _CountingController(cache)
        loop = asyncio.create_task(ctl.run())
        try:
            await asyncio.wait_for(ctl.second_pass.wait(), 30)
        finally:
            loop.cancel()
        assert ctl.passes == 2

    asyncio.run(scenario())
