"""Helpers for the HiGHS models of the bounds and the exact planner.

HiGHS (``highspy``, with numpy) is imported only when a model is built: a development dependency
for the bounds, and the optional ``exact`` extra for the exact planner.
"""

from __future__ import annotations

from typing import Any

from hami_place_core.node_resources import Resources


def new_highs() -> Any:
    """A silent HiGHS instance."""
    import highspy

    h = highspy.Highs()
    h.silent()
    return h


def scaled(q: Resources) -> tuple[float, float, float]:
    """A node's CPU, memory and pod slots as coefficients: cores and GiB, since bytes (1e11) next to
    counts (1) leave HiGHS a badly scaled matrix."""
    return q.cpu / 1e3, q.memory / 2**30, float(q.pods)
