"""What a search finds: a plan found on one node, and a node worth trying."""

from __future__ import annotations

from dataclasses import dataclass

from hami_place_core.planning.model import Move


@dataclass(frozen=True)
class Found:
    key: tuple[int, int, str]  # moves, GPU compute moved, node: the order of plans
    node: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    moves: list[Move]


@dataclass
class Candidate:
    node: str
    bound: int  # fewest moves any plan on this node needs (the GPUs' own pods only)
    gpus: list[tuple[float, int, list[tuple[int, ...]]]]  # (cost, gid, eviction sets), cheapest first
