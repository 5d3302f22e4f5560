"""The snapshot format: ``inspect -o json`` writes it, ``--snapshot FILE`` reads it back.

A snapshot holds the Nodes and Pods exactly as Kubernetes JSON, trimmed to the fields the model
reads, plus a computed ``summary`` for people and scripts. Reading a snapshot uses only the raw
objects and goes through the same :func:`hami_place_core.state.build_state` as a live cluster, so
a snapshot can never disagree with what the live code would compute. The format is documented in
docs/snapshot.md; ``apiVersion`` changes on any incompatible change.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.devices import default_kind
from hami_place_core.examples import open_snapshot_text
from hami_place_core.fragmentation import ClusterMetrics, free_share
from hami_place_core.state import TERMINAL_PHASES, ClusterState, build_state

API_VERSION = "hami-place.io/v1alpha1"
KIND = "ClusterSnapshot"

_NODE_ANNOTATIONS = (default_kind().node_register, ann.NODE_DEVICE_CORDON)


class SnapshotError(ValueError):
    """The file is not a readable snapshot; the message says why."""


def _pick(d: Mapping[str, Any] | None, keys: Iterable[str]) -> dict[str, Any]:
    d = d or {}
    return {k: d[k] for k in keys if k in d and d[k] not in (None, {}, [])}


def _containers(cs: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    # restartPolicy marks a sidecar init container, whose requests kube-scheduler adds to the pod's
    return [
        {"name": c.get("name"), "resources": c.get("resources") or {}, **_pick(c, ("restartPolicy",))} for c in cs or ()
    ]


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": meta.get("labels") or {},
            "annotations": _pick(meta.get("annotations"), _NODE_ANNOTATIONS),
        },
        "spec": _pick(node.get("spec"), ("unschedulable", "taints")),
        "status": {
            "conditions": [
                _pick(c, ("type", "status")) for c in status.get("conditions") or () if c.get("type") == "Ready"
            ],
            "allocatable": status.get("allocatable") or {},
        },
    }


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    out_spec = _pick(
        spec,
        ("nodeName", "schedulerName", "nodeSelector", "affinity", "tolerations", "priority", "overhead", "resources"),
    )
    out_spec["containers"] = _containers(spec.get("containers"))
    if spec.get("initContainers"):
        out_spec["initContainers"] = _containers(spec.get("initContainers"))
    return {
        "metadata": {
            **_pick(meta, ("name", "namespace", "uid", "labels", "ownerReferences", "creationTimestamp")),
            "annotations": _pick(meta.get("annotations"), ann.MODEL_POD_ANNOTATIONS),
        },
        "spec": out_spec,
        "status": _pick(pod.get("status"), ("phase",)),
    }


def summary(state: ClusterState, metrics: ClusterMetrics) -> dict[str, Any]:
    nodes = []
    for name in sorted(state.nodes):
        n = state.nodes[name]
        nm = metrics.nodes.get(name)
        nodes.append(
            {
                "name": name,
                "ready": n.ready,
                "unschedulable": n.unschedulable,
                "registerFormat": n.register.format,
                "error": n.error,
                "metrics": nm.as_dict() if nm else None,
                "gpus": [
                    {
                        "index": g.index,
                        "uuid": g.uuid,
                        "type": g.type,
                        "health": g.health,
                        "cordoned": g.uuid in n.cordoned,
                        "mode": g.mode,
                        "numa": g.numa,
                        "memory": {"used": n.usage[g.uuid].usedmem, "total": g.devmem},
                        "cores": {"used": n.usage[g.uuid].usedcores, "total": g.devcore},
                        "slots": {"used": n.usage[g.uuid].used, "total": g.count},
                        "free": round(free_share(g, n.usage[g.uuid]), 4),
                        "pods": sorted(n.pods[g.uuid]),
                    }
                    for g in n.devices
                ],
            }
        )
    return {
        "cluster": {**metrics.total.as_dict(), "fragmentationRate": round(metrics.fragmentation_rate, 4)},
        "workloadMix": [{"task": t.describe(), "probability": round(p, 4)} for t, p in metrics.mix.tasks],
        "nodes": nodes,
        "problems": state.problem_lines(),
    }


def make_snapshot(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    state: ClusterState,
    metrics: ClusterMetrics,
    source: str,
) -> dict[str, Any]:
    names = {(n.get("metadata") or {}).get("name") or "" for n in nodes}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"generatedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "source": source},
        "summary": summary(state, metrics),
        "nodes": [trim_node(n) for n in nodes],
        "pods": [trim_pod(p) for p in pods if _counted(p, names)],
    }


def _counted(pod: Mapping[str, Any], nodes: set[str]) -> bool:
    """HAMi placed it, or it takes CPU and memory on one of the snapshot's nodes."""
    if ((pod.get("metadata") or {}).get("annotations") or {}).get(ann.POD_VGPU_NODE):
        return True
    node = (pod.get("spec") or {}).get("nodeName")
    return node in nodes and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def load_snapshot(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(nodes, pods, metadata) from a snapshot file; raises SnapshotError with a precise reason."""
    try:
        text = open_snapshot_text(path)
    except OSError as e:
        raise SnapshotError(f"cannot read snapshot {path}: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise SnapshotError(f"snapshot {path} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise SnapshotError(f"{path} is not a hami-place snapshot (kind must be {KIND})")
    if doc.get("apiVersion") != API_VERSION:
        raise SnapshotError(f"{path} has apiVersion {doc.get('apiVersion')!r}; this version reads {API_VERSION}")
    nodes, pods = doc.get("nodes"), doc.get("pods")
    if not isinstance(nodes, list) or not isinstance(pods, list):
        raise SnapshotError(f"snapshot {path} must have 'nodes' and 'pods' lists")
    if not all(isinstance(x, dict) for x in (*nodes, *pods)):
        raise SnapshotError(f"snapshot {path}: every node and pod must be a JSON object")
    return nodes, pods, dict(doc.get("metadata") or {})


def state_from_snapshot(path: str | Path) -> ClusterState:
    nodes, pods, _ = load_snapshot(path)
    return build_state(nodes, pods)
