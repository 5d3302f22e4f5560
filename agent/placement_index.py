"""Placements by namespace and name, by selector (open for claims) and the moves not finished yet.

Kept from the placement informer's changes. The claim index (``claims.py``) is the mutating
webhook's look-up; the open moves are the mover's: its limits count the moves in flight on every
pass, which scanning all placements made O(moves x placements).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent.claims import ClaimIndex
from hami_place_core import placement as hp
from hami_place_core.placement import Placement


def _open_move(p: Placement) -> bool:
    return bool(p.evict_pod) and p.phase not in hp.TERMINAL


class PlacementIndex:
    def __init__(self) -> None:
        self.by_namespace: dict[str, dict[str, Placement]] = {}
        self.claims = ClaimIndex()
        self.open_moves: dict[str, Placement] = {}  # placement key -> the move, until it is terminal

    def update(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        p = Placement.from_object(obj)
        if kind == "DELETED":
            bucket = self.by_namespace.get(p.namespace)
            if bucket is not None:
                bucket.pop(p.name, None)
                if not bucket:
                    del self.by_namespace[p.namespace]
            self.claims.remove(p.namespace, p.name)
            self.open_moves.pop(p.key, None)
            return
        self.by_namespace.setdefault(p.namespace, {})[p.name] = p
        self.claims.update(p)
        if _open_move(p):
            self.open_moves[p.key] = p
        else:
            self.open_moves.pop(p.key, None)

    def get(self, namespace: str, name: str) -> Placement | None:
        return self.by_namespace.get(namespace, {}).get(name)

    def all(self) -> Iterator[Placement]:
        for bucket in self.by_namespace.values():
            yield from bucket.values()
