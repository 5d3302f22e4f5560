"""Fault injection for crash-safety tests: kill the agent at a named step of a move.

Inactive unless HAMI_PLACE_FAILPOINTS names a point (comma-separated). Each named point fires
once per process: it SIGKILLs the agent, exactly as a node failure or an OOM kill would.
"""

from __future__ import annotations

import os
import signal

_ARMED = {p.strip() for p in os.environ.get("HAMI_PLACE_FAILPOINTS", "").split(",") if p.strip()}

# The points a move passes, in order (documented in docs/agent.md).
POINTS = (
    "move.before-evict",
    "move.after-evict",
    "move.waiting-for-replacement",
    # a surge move (agent/surge.py)
    "surge.before-scale-up",
    "surge.after-scale-up",
    "surge.before-scale-down",
    "surge.after-scale-down",
)


def failpoint(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
