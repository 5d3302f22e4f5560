"""Other ways to place a pod that the engine's relocation cannot place in one move: a node-room
chain (pods of a CPU- or memory-full node move off first) and a bump (a pod of any size makes way
and moves on first)."""

from __future__ import annotations

from hami_place_core.fit import GpuUsage, gpu_fit_reason
from hami_place_core.node_resources import Resources
from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.evacuation import MAX_DEPTH, relocate
from hami_place_core.planning.room.explain import closes
from hami_place_core.requests import GpuRequest

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


class Detours:
    """The node-room chains and bumps of one search, and the work it may still spend on them."""

    def __init__(self, e: Engine) -> None:
        self.e = e
        self.work = CHAIN_WORK  # node-room chains and bumps the whole search may try

    def place(self, which: int, p: int, exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
        """Place pod `p` by a node-room chain (`which` 1) or a bump (2); applied when True."""
        if which == 1:
            return self.room_chain(p, exclude, budget, records)
        return self.bump(p, exclude, budget, records)

    def bump(
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
            moved_on = got is not None or (depth > 1 and self.bump(q, away, budget - 1, records, depth - 1))
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

    def room_chain(self, p: int, exclude: frozenset[int], budget: int, records: list[Record]) -> bool:
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
