"""The agent's stall detector (agent/loop_lag.py): a loop held by work is seen as late, and the
worst lag is kept."""

from __future__ import annotations

import asyncio
import time

from agent import metrics
from agent.loop_lag import measure_once


def test_a_blocked_loop_is_measured_as_late() -> None:
    async def blocked() -> float:
        task = asyncio.create_task(measure_once(0.01))
        await asyncio.sleep(0)  # the detector is asleep now
        time.sleep(0.3)  # work on the loop: nothing else runs meanwhile
        return await task

    assert asyncio.run(blocked()) >= 0.25


def test_the_worst_lag_is_kept() -> None:
    before = metrics.worst_loop_lag()
    metrics.record_loop_lag(before + 1.0)
    metrics.record_loop_lag(0.0)
    assert metrics.worst_loop_lag() == before + 1.0
