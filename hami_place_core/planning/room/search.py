"""The search for room on one node after another (the algorithm in the package docstring).

The search is one class over one engine: its steps share the engine's arrays and undo stack, the
best plan found so far and the work spent, and splitting it into classes would pass all of that
between them at every step (the stated reason it is over 300 lines)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hami_place_core.fit import EMPTY, GpuUsage, gpu_fit_reason
from hami_place_core.node_resources import Resources, format_cpu, format_memory
from hami_place_core.planning.constraints import immovable_reason, node_refusal
from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.evacuation import MAX_DEPTH, relocate
from hami_place_core.planning.model import PlanOptions
from hami_place_core.planning.ordering import sequence
from hami_place_core.planning.room.explain import closes, describe_request, relaxations, stay_reason
from hami_place_core.planning.room.request import RoomRequest
from hami_place_core.planning.room.result import Candidate, Found
from hami_place_core.planning.targets import direct_target, kind_of_pod
from hami_place_core.requests import GpuRequest
from hami_place_core.state import ClusterState

# At most this many nodes are tried (in order of their lower bound) before the search settles for
# the best plan found: it bounds the time on a cluster where many nodes look cheap but their pods
# have nowhere to go.
MAX_NODES_TRIED = 64
TIE_NODES = 8  # nodes tried after a plan as short as their bound, for less compute moved
# Node-room chains: a pod that fits a GPU whose node lacks its CPU or memory goes there once up to
# ROOM_CHAIN pods of that node have moved off; at most ROOM_NODES such nodes are tried per pod.
ROOM_CHAIN = 2
ROOM_NODES = 8
# Bumping: a pod that fits nowhere takes the place of one pod of any size, which moves on first;
# at most BUMP_SCAN such (GPU, pod) pairs are tried, least compute bumped first.
BUMP_SCAN = 24
BUMP_DEPTH = 2  # a bumped pod may bump another in turn, this many pods deep
# Work: node-room chains and bumps tried in one search, over all nodes (a count, not a clock, so the
# plan is the same on any machine). A request that cannot be met spends it all.
CHAIN_WORK = 400
SETS_PER_GPU = 4  # eviction sets tried per GPU, fewest pods first
MAX_SUBSETS = 256  # sets of one size listed per GPU before taking the largest pods instead


class Search:
    """One make_room search over an engine (which it leaves as it found it)."""

    def __init__(self, e: Engine, request: RoomRequest) -> None:
        self.e = e
        self.request = request
        self.req = request.gpu
        self.probe = request.as_allocation()
        self.tried = 0
        self.work = CHAIN_WORK  # node-room chains and bumps the whole search may try
        self.stuck: dict[str, tuple[int, ...]] = {}  # node -> the first pods that found no place
        self.leaves: dict[tuple[Any, ...], bool] = {}  # _can_leave, per kind of pod, node and state
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
                sets = self.eviction_sets(g)
                if sets:
                    costs.append((self.set_cost(sets[0]), g, sets))
            if len(costs) < n:
                continue
            costs.sort(key=lambda c: (c[0], self.e.g_use[c[1]].usedcores, c[1]))
            bound = int(sum(c[0] for c in costs[:n]) + 0.999)
            out.append(Candidate(name, bound, costs))
        out.sort(key=lambda c: (c.bound, c.node))
        return out

    def set_cost(self, pods: tuple[int, ...]) -> float:
        # A pod on several GPUs moves once for all of them: each GPU counts its share.
        return sum(1.0 / len(self.e.p_gids[p]) for p in pods)

    def eviction_sets(self, g: int) -> list[tuple[int, ...]]:
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
        movable.sort(key=lambda p: (-self._compute(p), p))
        for k in range(self._fewest(g, movable), len(movable) + 1):
            if math.comb(len(movable), k) > MAX_SUBSETS:
                # too many sets to list: the largest pods first
                j = next((j for j in range(k, len(movable) + 1) if self._fits_without(g, movable[:j])), None)
                return [] if j is None else [tuple(movable[:j])]
            sets = [c for c in itertools.combinations(movable, k) if self._fits_without(g, c)]
            if sets:
                sets.sort(key=lambda c: (sum(self._compute(p) for p in c), c))
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

    def _compute(self, p: int) -> int:
        r = self.e.p_req[p]
        return 0 if r is None else r.coresreq * r.nums

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
            compute = sum(self._compute(p) for p in range(len(e.p_alloc)) if e.moved(p))
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
                stuck = next((self.eviction_sets(g) for _, g in left), [])
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
        for pods in self.eviction_sets(g):
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
            if self._alternative(which, p, exclude, cap, trial):
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
        return self._alternative(best[1], p, exclude, best[0], records)

    def _alternative(self, which: int, p: int, exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        if which == 1:
            return self._room_chain(p, exclude, budget, records)
        return self._bump(p, exclude, budget, records)

    def _bump(
        self, p: int, exclude: frozenset[int], budget: int, records: list[Record], depth: int = BUMP_DEPTH
    ) -> bool:
        """Place single-GPU pod `p` on a GPU outside `exclude` where it fits once one of that GPU's
        pods, of any size, has moved on (by the engine's relocation): the ejection chains of the
        planner take only smaller pods off. GPUs by how little room is missing, at most BUMP_SCAN."""
        e = self.e
        req = e.p_req[p]
        if req is None or req.nums != 1 or not e.can_move(p) or e.moves_made + 2 > budget or self.work <= 0:
            return False
        nodes = e.eligible_nodes(p)
        for _, g, q in self._bump_tries(p, req, exclude)[:BUMP_SCAN]:
            self.work -= 1
            if self.work < 0:
                return False
            mark = len(records)
            away = exclude | {g} | frozenset(e.p_gids[p])
            got = relocate(e, [q], away, MAX_DEPTH - 1, budget - e.moves_made - 1)
            if got is not None:
                records.extend(got[1])
            moved_on = got is not None or (depth > 1 and self._bump(q, away, budget - 1, records, depth - 1))
            if moved_on and e.can_move(p) and e.fits(p, g, req, nodes):
                records.append(e.apply(p, (g,)))
                if e.moves_made <= budget:
                    return True
            e.rollback(records[mark:])
            del records[mark:]
        return False

    def _bump_tries(self, p: int, req: GpuRequest, exclude: frozenset[int]) -> list[tuple[int, int, int]]:
        """(compute of q, GPU g, pod q): p fits g once q has left it (GPU and node), least compute first."""
        e = self.e
        here, res, nodes = e.g_node[e.p_gids[p][0]], e.p_res[p], e.eligible_nodes(p)
        sel = e.p_alloc[p].request.selectors
        tries: list[tuple[int, int, int]] = []
        whole = req.coresreq >= 100
        for g in range(len(e.g_dev)):
            pods, sizes = e.g_pods[g], e.g_sizes[g]
            # one pod leaving frees at most the largest one's compute; an exclusive request needs
            # the GPU to itself (checked first: most GPUs fail here)
            if not sizes or e.free_compute(g) + sizes[0] < req.coresreq or (whole and len(pods) != 1):
                continue
            if g in exclude or e.g_entry[g] is None or g in e.p_gids[p]:
                continue
            node = e.g_node[g]
            if nodes is not None and node not in nodes and g not in e.p_origin[p]:
                continue
            if not e.p_plain[p] and not e.allowed(p, e.g_dev[g]):
                continue
            d, u = e.g_dev[g], e.g_use[g]
            for q in pods:
                r = e.p_req[q]
                if r is None or r.nums != 1 or not e.can_move(q) or q == p:
                    continue
                after = GpuUsage(u.used - 1, u.usedmem - r.memory_on(d.devmem), u.usedcores - r.coresreq)
                if gpu_fit_reason(req, d, after, sel, e.g_cordoned[g]) is not None:
                    continue
                room = e.n_free.get(node)
                if room is not None and node != here and not (room + e.p_res[q]).covers(res):
                    continue
                tries.append((r.coresreq, g, q))
        tries.sort()
        return tries

    def _room_chain(self, p: int, exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        """Place single-GPU pod `p` on a GPU outside `exclude` that fits it but whose node lacks
        its CPU, memory or pod slot, once up to ROOM_CHAIN pods of that node have moved off it
        (each by the engine's relocation): nodes by how few pods that takes, at most ROOM_NODES."""
        e = self.e
        req = e.p_req[p]
        if req is None or req.nums != 1 or not e.can_move(p) or self.work <= 0:
            return False
        here, res, nodes = e.g_node[e.p_gids[p][0]], e.p_res[p], e.eligible_nodes(p)
        options: list[tuple[int, str, int, list[int]]] = []
        for name, gids in e.node_gids.items():
            room = e.n_free.get(name)
            if name == here or room is None or room.covers(res) or (nodes is not None and name not in nodes):
                continue
            targets = [g for g in gids if g not in exclude and e.g_entry[g] is not None and self._gpu_fits(p, g)]
            if not targets:
                continue
            short = res - room
            leavers = self._leavers(name, set(targets), short)
            if leavers is not None:
                options.append((len(leavers), name, min(targets, key=lambda g: (e.free_compute(g), g)), leavers))
        options.sort(key=lambda o: (o[0], o[1]))
        for k, name, g, leavers in options[:ROOM_NODES]:
            if e.moves_made + k + (not e.moved(p)) > budget:
                continue
            self.work -= 1
            if self.work < 0:
                return False
            mark = len(records)
            away = exclude | frozenset(e.node_gids[name])
            if self._relocate_each(leavers, away, budget, records) and e.can_move(p) and e.fits(p, g, req, nodes):
                records.append(e.apply(p, (g,)))
                if e.moves_made <= budget:
                    return True
            e.rollback(records[mark:])
            del records[mark:]
        return False

    def _gpu_fits(self, p: int, g: int) -> bool:
        e = self.e
        req = e.p_req[p]
        assert req is not None
        if not e.p_plain[p] and not e.allowed(p, e.g_dev[g]):
            return False
        return gpu_fit_reason(req, e.g_dev[g], e.g_use[g], e.p_alloc[p].request.selectors, e.g_cordoned[g]) is None

    def _leavers(self, node: str, keep: set[int], short: Resources) -> list[int] | None:
        """Up to ROOM_CHAIN movable pods of `node` (not on GPUs `keep`) whose requests cover `short`."""
        e = self.e
        pods = sorted(
            {q for g in e.node_gids[node] if g not in keep for q in e.g_pods[g] if e.can_move(q)},
            key=lambda q: (-closes(e.p_res[q], short), q),
        )
        chosen: list[int] = []
        got = Resources()
        for q in pods[:ROOM_CHAIN]:
            chosen.append(q)
            got = got + e.p_res[q]
            if got.covers(short):
                return chosen
        return None

    def _relocate_each(self, pods: list[int], exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        e = self.e
        for q in pods:
            got = relocate(e, [q], exclude, MAX_DEPTH, budget - e.moves_made)
            if got is None:
                return False
            records.extend(got[1])
        return True

    # -- why not --
    def why_not(self, base: ClusterState, options: PlanOptions) -> str:
        """The binding constraint when no plan was found (the first that explains it)."""
        n = self.req.nums
        if not self.usable:
            return self._refused()
        where, gids = min(self.usable.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        if len(gids) < n:
            return self._too_few_gpus(where, len(gids))
        roomy = self._room_reason()
        if roomy is not None:
            return roomy
        cands = self.candidates()
        if not cands:
            return self._held()
        # Would more moves do it? Then the limits bind.
        for label, relaxed in relaxations(options, self._budgets_bind(options)):
            again = Search(Engine(base, relaxed), self.request)
            found = again.run()
            if found is not None:
                return label(found, options)
        best = cands[0]
        tried = f"{self.tried} node{'s' if self.tried != 1 else ''} tried"
        stuck = self.stuck.get(best.node)
        if stuck:
            e = self.e
            names = ", ".join(
                f"{e.p_alloc[p].key} ({describe_request(e.p_req[p])}, {format_cpu(e.p_res[p].cpu)} CPU)" for p in stuck
            )
            return (
                f"no room can be made: on node {best.node} (the cheapest on paper, {best.bound} "
                f"move{'s' if best.bound != 1 else ''}) pod {names} fits no other GPU whose node has its "
                f"CPU and memory; likewise elsewhere ({tried})"
            )
        return (
            f"no room can be made: on node {best.node} (the cheapest on paper) the pods to move, or the "
            f"node's CPU and memory, find no other place ({tried})"
        )

    def _budgets_bind(self, options: PlanOptions) -> bool:
        """Some workload has more pods that could move than moves left in its budget (else a
        search without the budgets would find nothing more; on the openb states no workload has
        two pods, and that search cost as much as the first)."""
        e = self.e
        movable: Counter[str] = Counter()
        for p, a in enumerate(e.p_alloc):
            wl = e.p_workload[p]
            if wl is not None and immovable_reason(a, options.excluded_namespaces, e.state.problems) is None:
                movable[wl] += 1
        return any(n > options.limit_of(w) - options.workload_moves_used.get(w, 0) for w, n in movable.items())

    def _refused(self) -> str:
        reasons = self.refusals.most_common()
        if not reasons:
            return "the cluster has no GPU nodes"
        sel = self.request.node_selector
        if any(r.startswith("nodeSelector") for r, _ in reasons) and sel:
            text = ",".join(f"{k}={v}" for k, v in sorted(sel.items()))
            return f"no node matches the pod's node selector ({text}) among the schedulable GPU nodes"
        top = "; ".join(f"{r} ({c} node{'s' if c != 1 else ''})" for r, c in reasons[:3])
        return f"no node accepts the pod: {top}"

    def _too_few_gpus(self, node: str, most: int) -> str:
        n, sel = self.req.nums, self.request.selectors
        where = f"any eligible node (node {node})" if most else "any eligible node"
        gpus = f"{most} usable GPU{'s' if most != 1 else ''}"
        if sel.use_types or sel.nouse_types:
            types = ",".join(sel.use_types) or "not " + ",".join(sel.nouse_types)
            here = "" if most else f" (GPU types here: {self._types_here()})"
            return f"GPU type {types} has only {gpus} on {where}; the pod asks for {n}{here}"
        if sel.use_uuids or sel.nouse_uuids:
            return f"the pod's GPU UUID selectors leave at most {gpus} on {where}; it asks for {n}"
        if self.req.memreq or self.req.coresreq:
            return (
                f"no eligible node has {n} GPUs that are healthy, uncordoned and large enough for "
                f"{self.req.describe()} (the most is {most}, on node {node})"
            )
        return f"no eligible node has {n} usable GPUs (the most is {most}, on node {node})"

    def _types_here(self, shown: int = 6) -> str:
        """The GPU types of the cluster, most GPUs first: what a type selector that matches none
        could have asked for (a `type=` matches part of one, in any case: HAMi's CheckType)."""
        count = Counter(d.type for node in self.e.state.nodes.values() for d in node.devices)
        listed = ", ".join(f"{t} ({n})" for t, n in count.most_common(shown))
        more = len(count) - shown
        return listed + (f" and {more} more" if more > 0 else "") if count else "none"

    def _room_reason(self) -> str | None:
        """Node CPU, memory or slots short on every node with enough usable GPUs, even with every
        movable GPU pod gone from it."""
        e, need, n = self.e, self.request.resources, self.req.nums
        best: dict[str, tuple[int, str]] = {}
        for name, gids in self.usable.items():
            if len(gids) < n:
                continue
            free = e.n_free.get(name)
            if free is None:
                return None
            for p in {p for g in e.node_gids[name] for p in e.g_pods[g] if e.can_move(p)}:
                free = free + e.p_res[p]
            if free.covers(need):
                return None
            for what, have in (("cpu", free.cpu), ("memory", free.memory), ("pods", free.pods)):
                if what not in best or have > best[what][0]:
                    best[what] = (have, name)
        if need.cpu > best["cpu"][0]:
            have, name = best["cpu"]
            return (
                f"node CPU: the pod asks {format_cpu(need.cpu)} cores, the most free after moves is "
                f"{format_cpu(max(have, 0))} on node {name}"
            )
        if need.memory > best["memory"][0]:
            have, name = best["memory"]
            return (
                f"node memory: the pod asks {format_memory(need.memory)}, the most free after moves is "
                f"{format_memory(max(have, 0))} on node {name}"
            )
        have, name = best["pods"]
        return f"node pod slots: no eligible node has a free pod slot even after moves (the most is {have}, on {name})"

    def _held(self) -> str:
        """No node has enough GPUs whose pods may move."""
        e, n = self.e, self.req.nums
        most, where = -1, ""
        for name, gids in self.usable.items():
            k = sum(1 for g in gids if self.eviction_sets(g))
            if k > most:
                most, where = k, name
        held: Counter[str] = Counter()
        for g in self.usable.get(where, ()):
            for p in e.g_pods[g]:
                if not e.can_move(p):
                    held[stay_reason(e, p)] += 1
        why = ", ".join(f"{r} ({c})" for r, c in held.most_common(3))
        return (
            f"pods that may not move hold the GPUs: at most {most} GPUs of the {n} asked can be made "
            f"free on any eligible node (node {where}; pods kept: {why or 'none'})"
        )
