"""Pods by namespace, node, workload, UID and claim: the watch cache's secondary indexes of pods.

The mover asks, for each waiting move, for the pods of one workload; validation asks for the pods
of one namespace. Scanning every pod for that cost O(moves x pods) per pass. The index holds pod
keys only (the store holds the pods), so a pod costs a few dictionary entries here, and an event
costs O(1): the facets of the new and the replaced object are compared and only what changed moves.

Namespace, node and workload are many pods to one value (ordered sets: dicts of key -> None, so a
look-up lists pods in the order they arrived). UID and claim name one pod; as before this index
existed, the pod seen last wins a claim token two pods carry (a pod created from a pinned manifest).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_place_core import placement as hp
from hami_place_core.placement import workload_key

# (namespace, nodeName, workload, uid, claim) of one pod; None where it has none
_Facets = tuple[str | None, str | None, str | None, str | None, str | None]
_NOTHING: _Facets = (None, None, None, None, None)


def _facets(pod: Mapping[str, Any] | None) -> _Facets:
    if pod is None:
        return _NOTHING
    meta = pod.get("metadata") or {}
    return (
        meta.get("namespace") or None,
        (pod.get("spec") or {}).get("nodeName") or None,
        workload_key(pod),
        meta.get("uid") or None,
        (meta.get("annotations") or {}).get(hp.POD_CLAIM) or None,
    )


def _refile(table: dict[str, dict[str, None]], key: str, old: str | None, new: str | None) -> None:
    if old == new:
        return
    if old is not None:
        bucket = table.get(old)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del table[old]
    if new is not None:
        table.setdefault(new, {})[key] = None


def _refile_unique(table: dict[str, str], key: str, old: str | None, new: str | None) -> None:
    if old is not None and old != new and table.get(old) == key:
        del table[old]
    if new is not None:
        table[new] = key  # also when unchanged: the pod seen last wins


class PodIndex:
    """Pod keys by namespace, node, workload (``workload_key``), UID and claim token."""

    def __init__(self) -> None:
        self.by_namespace: dict[str, dict[str, None]] = {}
        self.by_node: dict[str, dict[str, None]] = {}
        self.by_workload: dict[str, dict[str, None]] = {}
        self.by_uid: dict[str, str] = {}
        self.by_claim: dict[str, str] = {}

    def update(self, key: str, pod: Mapping[str, Any] | None, prev: Mapping[str, Any] | None) -> None:
        """The pod stored under `key` changed from `prev` to `pod` (None: absent, before or after)."""
        new, old = _facets(pod), _facets(prev)
        _refile(self.by_namespace, key, old[0], new[0])
        _refile(self.by_node, key, old[1], new[1])
        _refile(self.by_workload, key, old[2], new[2])
        _refile_unique(self.by_uid, key, old[3], new[3])
        _refile_unique(self.by_claim, key, old[4], new[4])

    def snapshot(self) -> dict[str, Any]:
        """Every table as plain sorted data: tests compare an index kept by events with a rebuild."""
        return {
            "namespace": {k: sorted(v) for k, v in self.by_namespace.items()},
            "node": {k: sorted(v) for k, v in self.by_node.items()},
            "workload": {k: sorted(v) for k, v in self.by_workload.items()},
            "uid": dict(self.by_uid),
            "claim": dict(self.by_claim),
        }
