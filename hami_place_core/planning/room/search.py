"""The search for room on one node after another (the algorithm in the package docstring): the
nodes in order of their bound, and on each the room made GPU by GPU, then for the node's CPU and
memory."""

from __future__ import annotations

from collections import Counter

from hami_place_core.fit import EMPTY, gpu_fit_reason
from hami_place_core.node_resources import Resources
from hami_place_core.planning.constraints import node_refusal
from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.evacuation import MAX_DEPTH, relocate
from hami_place_core.planning.ordering import sequence
from hami_place_core.planning.room.detours import Detours
from hami_place_core.planning.room.eviction import EvictionSets, compute_of
from hami_place_core.planning.room.explain import closes
from hami_place_core.planning.room.request import RoomRequest
from hami_place_core.planning.room.result import Candidate, Found

# At most this many nodes are tried (in order of their lower bound) before the search settles for
# the best plan found: it bounds the time on a cluster where many nodes look cheap but their pods
# have nowhere to go.
MAX_NODES_TRIED = 64
TIE_NODES = 8  # nodes tried after a plan as short as their bound, for less compute moved


class Search:
    """One make_room search over an engine (which it leaves as it found it): the nodes tried in
    order of their bound, and on each the GPUs freed and the node's room made. Which of a GPU's
    pods must leave (:class:`EvictionSets`) and the other ways to place a pod (:class:`Detours`) are
    its collaborators; why it found nothing is :func:`~hami_place_core.planning.room.why_not.why_not`."""

    def __init__(self, e: Engine, request: RoomRequest) -> None:
        self.e = e
        self.request = request
        self.req = request.gpu
        self.probe = request.as_allocation()
        self.tried = 0
        self.stuck: dict[str, tuple[int, ...]] = {}  # node -> the first pods that found no place
        self.sets = EvictionSets(e, request)
        self.detours = Detours(e)
        # Seeded: an empty GPU is a target like a GPU in use (the planner keeps pods off them, as its
        # objective is whole free GPUs; here a pod moved to an empty GPU elsewhere is one move).
        for g in range(len(e.g_dev)):
            if e.g_counts[g] and e.g_use[g].used == 0:
                e.seed(g)
        e.allow_reroutes()  # a pod already moving may be given another place at no extra move
        self.refusals: Counter[str] = Counter()
        self.usable: dict[str, list[int]] = {}  # eligible node -> GPUs Fit could ever give the pod
        for name in sorted(e.state.nodes):
            node = e.state.nodes[name]
            why = node_refusal(self.probe, node)
            if why is not None:
                self.refusals[why] += 1
                continue
            self.usable[name] = [
                g
                for g in e.node_gids[name]
                if e.g_counts[g]
                and gpu_fit_reason(self.req, e.g_dev[g], EMPTY, request.selectors, e.g_cordoned[g]) is None
            ]

    # -- the search --
    def run(self) -> Found | None:
        best: Found | None = None
        ties = 0
        for cand in self.candidates():
            if best is not None and cand.bound > best.key[0]:
                break  # sorted by bound: no node left can do better
            if best is not None and cand.bound == best.key[0]:
                ties += 1  # only the compute moved could be less
                if ties > TIE_NODES:
                    break
            if self.tried >= MAX_NODES_TRIED:
                break
            self.tried += 1
            budget = self.e.max_moves if best is None else best.key[0]
            for largest_first in (True, False):
                found = self.realize(cand, budget, largest_first)
                if found is not None and (best is None or found.key < best.key):
                    best = found
                    budget = best.key[0]
                if found is not None and found.key[0] <= cand.bound:
                    break  # as cheap as this node can be
            if best is not None and best.key[:2] == (0, 0):
                break  # fits now: nothing beats it, and nodes come by name within a bound
        return best

    def candidates(self) -> list[Candidate]:
        out = []
        n = self.req.nums
        for name, gids in self.usable.items():
            if len(gids) < n:
                continue
            costs = []
            for g in gids:
                sets = self.sets.of(g)
                if sets:
                    costs.append((self.sets.cost(sets[0]), g, sets))
            if len(costs) < n:
                continue
            costs.sort(key=lambda c: (c[0], self.e.g_use[c[1]].usedcores, c[1]))
            bound = int(sum(c[0] for c in costs[:n]) + 0.999)
            out.append(Candidate(name, bound, costs))
        out.sort(key=lambda c: (c.bound, c.node))
        return out

    def realize(self, cand: Candidate, budget: int, largest_first: bool = True) -> Found | None:
        """Make room on `cand.node` within `budget` moves: the plan, with the engine restored.
        Among GPUs of equal price, those of the largest pods first (`largest_first`: they have
        the fewest places to go), or the smallest."""
        e = self.e
        records: list[Record] = []
        try:
            chosen = self._free_gpus(cand, budget, records, largest_first)
            if chosen is None or not self._make_node_room(cand.node, chosen, budget, records):
                return None
            if e.moves_made > budget or not all(self._fits_now(g) for g in chosen):
                return None
            why = f"make room for {self.request.name} on {cand.node}"
            for p in range(len(e.p_alloc)):
                if e.moved(p):
                    e.give_reason(p, why)
            moves = sequence(e) if e.moves_made else []
            e.drop_reasons()
            if moves is None:
                return None
            compute = sum(compute_of(e, p) for p in range(len(e.p_alloc)) if e.moved(p))
            gpus = tuple(sorted(chosen, key=lambda g: e.g_dev[g].index))
            return Found(
                (e.moves_made, compute, cand.node),
                cand.node,
                tuple(e.g_dev[g].index for g in gpus),
                tuple(e.g_dev[g].uuid for g in gpus),
                moves,
            )
        finally:
            e.rollback(records)

    def _fits_now(self, g: int) -> bool:
        e = self.e
        return gpu_fit_reason(self.req, e.g_dev[g], e.g_use[g], self.request.selectors, e.g_cordoned[g]) is None

    def _free_gpus(self, cand: Candidate, budget: int, records: list[Record], largest_first: bool) -> list[int] | None:
        """Room on `nums` GPUs of the node, one GPU at a time, each time the one that costs the
        fewest moves *now* (after the GPUs chosen before it: pods compete for the same places),
        priced by making the room and undoing it; among equals those of the largest pods first
        (`largest_first`: they have the fewest places to go), or the smallest. The GPUs chosen
        (their room made), or None."""
        e, n = self.e, self.req.nums
        chosen = [g for c, g, _ in cand.gpus if c == 0][:n]
        left = [(c, g) for c, g, _ in cand.gpus if c > 0]
        while len(chosen) < n:
            left.sort(key=lambda cg: (cg[0], -e.g_use[cg[1]].usedcores if largest_first else e.g_use[cg[1]].usedcores))
            best: tuple[int, int] | None = None  # (moves, gid)
            for paper, g in left:
                if best is not None and paper > best[0]:
                    break  # no GPU left can cost less (a pod moves at least once)
                if e.moves_made + paper > budget:
                    break
                price = self._price(g, frozenset(chosen) | {g}, budget)
                if price is not None and (best is None or price < best[0]):
                    best = (price, g)
            if best is None:
                stuck = next((self.sets.of(g) for _, g in left), [])
                if stuck and cand.node not in self.stuck:
                    self.stuck[cand.node] = stuck[0]
                return None
            g = best[1]
            if not self._free_one(g, frozenset(chosen) | {g}, budget, records):
                return None  # priced just before: cannot happen
            chosen.append(g)
            left = [(c, h) for c, h in left if h != g]
        return chosen

    def _price(self, g: int, exclude: frozenset[int], budget: int) -> int | None:
        """The moves that making room on GPU g costs now, or None; nothing is left changed."""
        e = self.e
        if self._fits_now(g):
            return 0
        base = e.moves_made
        records: list[Record] = []
        ok = self._free_one(g, exclude, budget, records)
        moves = e.moves_made - base
        e.rollback(records)
        return moves if ok else None

    def _free_one(self, g: int, exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        """Room for the request on GPU g: the first of its eviction sets whose pods find places."""
        if self._fits_now(g):
            return True
        for pods in self.sets.of(g):
            if budget - self.e.moves_made <= 0:
                return False
            if self._move_out(list(pods), exclude, budget, records):
                return True
        return False

    def _make_node_room(self, node: str, chosen: list[int], budget: int, records: list[Record]) -> bool:
        """Move GPU pods off `node` until its CPU, memory and pod slots cover the request: each time
        the movable pod that closes most of what is missing (fewest moves first)."""
        e, need = self.e, self.request.resources
        exclude = frozenset(e.node_gids[node])
        tried: set[int] = set()
        while True:
            free = e.n_free.get(node)
            if free is None or free.covers(need):
                return True
            short = need - free
            pods = sorted(
                {
                    p
                    for g in e.node_gids[node]
                    for p in e.g_pods[g]
                    if p not in tried and e.can_move(p) and e.p_res[p] != Resources()
                },
                key=lambda p: (-closes(e.p_res[p], short), p),
            )
            if not pods or budget - e.moves_made <= 0:
                return False
            p = pods[0]
            tried.add(p)
            self._move_out([p], exclude, budget, records)

    def _move_out(self, pods: list[int], exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        """Move `pods` to GPUs outside `exclude`, all or nothing, largest first, each by
        :meth:`_place_one`."""
        e = self.e
        mark = len(records)
        for p in sorted(pods, key=e.pod_size, reverse=True):
            if not set(e.p_gids[p]) & exclude:
                continue  # already moved on (a multi-GPU pod on two of the GPUs, or a chain moved it)
            if not self._place_one(p, exclude, budget, records):
                e.rollback(records[mark:])
                del records[mark:]
                return False
        return True

    def _place_one(self, p: int, exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        """Move pod `p` to GPUs outside `exclude`: the engine's relocation (best fit, else ejection
        chains of smaller pods); where that takes more than one move, or fails, the cheapest of it,
        a node-room chain and a bump (each made, counted and undone, then the cheapest made again:
        they are deterministic). Applied when True (its undo records in `records`)."""
        e = self.e
        base = e.moves_made
        got = relocate(e, [p], exclude, MAX_DEPTH, budget - base)
        if got is not None and e.moves_made - base <= 1:
            records.extend(got[1])
            return True
        best: tuple[int, int] | None = None  # (moves, which)
        if got is not None:
            best = (e.moves_made, 0)
            e.rollback(got[1])
        for which in (1, 2):
            cap = budget if best is None else best[0] - 1
            if cap <= base:
                break
            trial: list[Record] = []
            if self.detours.place(which, p, exclude, cap, trial):
                best = (e.moves_made, which)
                e.rollback(trial)
        if best is None:
            return False
        if best[1] == 0:
            again = relocate(e, [p], exclude, MAX_DEPTH, budget - e.moves_made)
            if again is None:
                return False
            records.extend(again[1])
            return True
        return self.detours.place(best[1], p, exclude, best[0], records)
