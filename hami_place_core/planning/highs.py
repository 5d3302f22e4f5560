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


class WorkLimit:
    """A budget of solver work shared by several HiGHS solves, counted by HiGHS rather than by a
    clock, so that where a solve stops does not depend on the machine's speed or load.

    The unit is HiGHS's own limit checks: the MIP solver checks its limits (nodes, time, a user
    interrupt) at fixed points of its search, at every branch-and-bound node and in every round of
    the root node's cuts and heuristics, and calls a ``kCallbackMipInterrupt`` callback there. The
    callback counts the checks and interrupts the solve when the budget is spent. Only the count
    is used: it is the same on any machine, given one thread and a fixed seed. Not LP iterations:
    highspy 1.15.1 leaves ``simplex_iteration_count`` at -1 in the callback's data (only
    ``mip_node_count`` is filled in), and the MIP solver ignores ``simplex_iteration_limit``; so
    LP iterations and nodes are only summed after each solve, for the report.
    """

    def __init__(self, checks: int) -> None:
        self.limit = checks
        self.checks = 0  # limit checks the solves have made
        self.nodes = 0  # branch-and-bound nodes
        self.lp_iterations = 0
        self.runs: list[tuple[int, int, int]] = []  # per solve: checks, nodes, LP iterations
        self.hit = False  # some solve was stopped by this limit

    @property
    def left(self) -> int:
        return max(0, self.limit - self.checks)

    def extend(self, checks: int) -> None:
        """`checks` more steps for the solves still to come (from what was spent: a solve may
        overrun the limit by a few checks before its interrupt is seen)."""
        self.limit = max(self.limit, self.checks) + checks
        self.hit = False

    def run(self, h: Any, cap: int | None = None) -> None:
        """``h.run()``, interrupted at the check that spends the budget (or `cap` checks of this
        run); adds what the run used."""
        import highspy

        stop = self.limit if cap is None else min(self.limit, self.checks + cap)
        before = self.checks

        def check(event: Any) -> None:
            self.checks += 1
            if self.checks >= stop:
                event.interrupt()

        h.cbMipInterrupt.subscribe(check)
        try:
            h.run()
        finally:
            h.cbMipInterrupt.unsubscribe(check)
        info = h.getInfo()
        nodes, iterations = max(0, int(info.mip_node_count)), max(0, int(info.simplex_iteration_count))
        self.nodes += nodes
        self.lp_iterations += iterations
        self.runs.append((self.checks - before, nodes, iterations))
        interrupted = h.getModelStatus() == highspy.HighsModelStatus.kInterrupt
        self.hit = self.hit or (interrupted and self.checks >= self.limit)

    def __str__(self) -> str:
        return (
            f"{self.checks:,} solver steps of {self.limit:,}: {_count(len(self.runs), 'solve')}, "
            f"{_count(self.nodes, 'branch-and-bound node')}, {_count(self.lp_iterations, 'LP iteration')}"
        )


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"
