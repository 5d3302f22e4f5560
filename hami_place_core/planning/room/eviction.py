"""Which of a GPU's pods must leave for the request to fit there (HAMi's Fit on the usage
without them), and what that costs on paper: the lower bound the search orders nodes by."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from hami_place_core.fit import GpuUsage, gpu_fit_reason
from hami_place_core.planning.engine import Engine
from hami_place_core.planning.room.request import RoomRequest
from hami_place_core.planning.targets import direct_target, kind_of_pod

SETS_PER_GPU = 4  # eviction sets tried per GPU, fewest pods first
MAX_SUBSETS = 256  # sets of one size listed per GPU before taking the largest pods instead


def compute_of(e: Engine, p: int) -> int:
    """The GPU compute pod p holds, over all its GPUs."""
    r = e.p_req[p]
    return 0 if r is None else r.coresreq * r.nums


class EvictionSets:
    """The eviction sets of one request's GPUs, as the engine stands."""

    def __init__(self, e: Engine, request: RoomRequest) -> None:
        self.e = e
        self.request = request
        self.req = request.gpu
        self.leaves: dict[tuple[Any, ...], bool] = {}  # _can_leave, per kind of pod, node and state

    def cost(self, pods: tuple[int, ...]) -> float:
        # A pod on several GPUs moves once for all of them: each GPU counts its share.
        return sum(1.0 / len(self.e.p_gids[p]) for p in pods)

    def of(self, g: int) -> list[tuple[int, ...]]:
        """Sets of pods whose leaving GPU g makes the request fit there (HAMi's Fit), fewest first
        (then least compute); [()] if it fits now; [] if no set of movable pods does."""
        e, req, sel = self.e, self.req, self.request.selectors
        d, u = e.g_dev[g], e.g_use[g]
        if gpu_fit_reason(req, d, u, sel, e.g_cordoned[g]) is None:
            return [()]
        pods = e.g_pods[g]
        movable = [p for p in pods if e.can_move(p) and self._can_leave(p)]
        if not self._fits_without(g, movable):
            return []  # not even with every pod that may move gone
        movable.sort(key=lambda p: (-compute_of(e, p), p))
        for k in range(self._fewest(g, movable), len(movable) + 1):
            if math.comb(len(movable), k) > MAX_SUBSETS:
                # too many sets to list: the largest pods first
                j = next((j for j in range(k, len(movable) + 1) if self._fits_without(g, movable[:j])), None)
                return [] if j is None else [tuple(movable[:j])]
            sets = [c for c in itertools.combinations(movable, k) if self._fits_without(g, c)]
            if sets:
                sets.sort(key=lambda c: (sum(compute_of(e, p) for p in c), c))
                return sets[:SETS_PER_GPU]
        return []

    def _can_leave(self, p: int) -> bool:
        """A multi-GPU pod moves only where a node has room for all its GPUs now (no ejection
        chain makes room for one): on a busy cluster most have none, and their GPUs would look
        cheap (a share of one move each) but could never be freed."""
        e = self.e
        req = e.p_req[p]
        if req is None or req.nums == 1:
            return True
        key = (kind_of_pod(e, p), e.g_node[e.p_gids[p][0]], e.state_name)
        ok = self.leaves.get(key)
        if ok is None:
            ok = self.leaves[key] = direct_target(e, p, frozenset()) is not None
        return ok

    def _fewest(self, g: int, movable: list[int]) -> int:
        """A lower bound on how many pods must leave GPU g: for slots, memory and cores each, the
        fewest of the largest pods that give back enough; all of them for an exclusive request."""
        e, req = self.e, self.req
        d, u = e.g_dev[g], e.g_use[g]
        if d.devcore == 100 and req.coresreq == 100:
            return len(e.g_pods[g])  # HAMi: an exclusive request needs a GPU no pod uses
        fewest = max(0, u.used + 1 - d.count)
        for need, size in (
            (u.usedmem + req.memory_on(d.devmem) - d.devmem, lambda r: r.memory_on(d.devmem)),
            (u.usedcores + max(req.coresreq, 1 if u.usedcores >= d.devcore else 0) - d.devcore, lambda r: r.coresreq),
        ):
            if need <= 0:
                continue
            sizes = sorted((size(r) for p in movable if (r := e.p_req[p]) is not None), reverse=True)
            total = k = 0
            while total < need and k < len(sizes):
                total += sizes[k]
                k += 1
            fewest = max(fewest, k)
        return max(fewest, 1)

    def _fits_without(self, g: int, pods: Sequence[int]) -> bool:
        e = self.e
        d, u = e.g_dev[g], e.g_use[g]
        after = GpuUsage(u.used, u.usedmem, u.usedcores)
        for p in pods:
            r = e.p_req[p]
            if r is None:
                return False
            after.used -= 1
            after.usedmem -= r.memory_on(d.devmem)
            after.usedcores -= r.coresreq
        return gpu_fit_reason(self.req, d, after, self.request.selectors, e.g_cordoned[g]) is None
