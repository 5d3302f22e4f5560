"""Seed chains: several empty GPUs of roomy nodes taken at once, for one GPU more than they take.

:func:`~hami_place_core.planning.passes.seeded` offers one empty GPU at a time and keeps it where
two GPUs or more empty into it. Some GPUs can only be freed together with others, each needing
an empty GPU of its own, with one more GPU emptied than taken only at the end: on a 16-node
subset of gpuspec25 (departure seed 2, the benchmark's MILP subset 3 of draw 2) an 81% pod of a
CPU-full node must go to an empty GPU before a P100-only 32% pod can take its node's CPU, and
the 47% pod leaving with it shares a second empty GPU with another 47% pod: three GPUs freed for
two taken. :func:`seed_chains` searches for such chains depth first: every empty GPU of a node
with room is offered as a target at once, GPUs of a few pods are emptied one after another
(cheapest first, with one-deep ejection chains, best fit: an empty GPU is used only where nothing
in use fits), never taking more empty GPUs than it has emptied, until it has emptied one more.
"""

from __future__ import annotations

from typing import Any

from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.evacuation import candidates, evacuate, kind_of
from hami_place_core.planning.model import PlanOptions
from hami_place_core.planning.passes import roomy_empties

# At most CHAIN_GPUS GPUs emptied in one chain, of at most CHAIN_PODS pods each, and CHAIN_WORK
# evacuations tried per search (a count, so the plan does not depend on the machine). On the
# 30 full openb states of the evaluation, 300 cost 0.05-0.12 s of CPU per state and freed what
# 2,000 did; the subset above needs 37.
CHAIN_GPUS = 5
CHAIN_PODS = 3
CHAIN_WORK = 300


class _Search:
    def __init__(self, engine: Engine, seeds: list[int], cap: int) -> None:
        self.engine, self.seeds, self.cap = engine, seeds, cap
        self.left = CHAIN_WORK
        self.base = engine.moves_made

    def taken(self) -> int:
        return sum(1 for s in self.seeds if self.engine.g_pods[s])

    def run(self, emptied: int, records: list[Record]) -> list[Record] | None:
        """Empty one more GPU; the records of a chain freeing one GPU net, or None (rolled back)."""
        e = self.engine
        tried: set[tuple[Any, ...]] = set()
        for x in self._items():
            if self.left <= 0:
                return None
            kind = kind_of(e, x)
            if kind in tried:
                continue  # like a GPU that led nowhere from here (up to tie-breaks)
            tried.add(kind)
            self.left -= 1
            done = evacuate(e, x, 1, len(e.g_pods[x]) + 1)
            if done is None:
                continue
            found = self._after(emptied + 1, records + done[1])
            if found is not None:
                return found
            e.take_back(done[1])
        return None

    def _after(self, emptied: int, records: list[Record]) -> list[Record] | None:
        taken = self.taken()
        if taken > emptied or self.engine.moves_made - self.base > self.cap * max(1, emptied - taken):
            return None
        if emptied - taken >= 1:
            return records
        return self.run(emptied, records) if emptied < CHAIN_GPUS else None

    def _items(self) -> list[int]:
        e = self.engine
        # A GPU in use with no pod the state knows of (usage from an annotation whose pod is gone
        # or unreadable) is "emptied" by no move and stays in use: never a link of a chain.
        return [
            x
            for x in candidates(e)
            if 0 < len(e.g_pods[x]) <= CHAIN_PODS and not e.g_seed[x] and not e.g_locked[x] and e.is_open(x)
        ]


def seed_chains(engine: Engine, options: PlanOptions) -> None:
    """Chains of evacuations into empty GPUs of roomy nodes that free one GPU more than they take,
    each within max_moves_per_gpu moves, searched for until none is found."""
    cap = max(1, options.max_moves_per_gpu)
    seeds = roomy_empties(engine)
    if cap < 2 or not seeds:
        return
    for s in seeds:
        engine.seed(s)
    try:
        while engine.moves_made < engine.max_moves:
            search = _Search(engine, seeds, cap)
            if not search.run(0, []):
                break  # none found (or, defensively, one of no moves: it would be found again)
            # The empty GPUs the chain took stay offered (they are in use now); the next chain
            # counts only the ones still empty.
            seeds = [s for s in seeds if not engine.g_pods[s]]
    finally:
        for s in range(len(engine.g_seed)):
            if engine.g_seed[s]:
                engine.unseed(s)
