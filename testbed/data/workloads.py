"""Workload manifests for the test bed: GPU Deployments HAMi (or its stand-in profile) schedules."""

from __future__ import annotations

from typing import Any


def deployment(
    name: str,
    replicas: int = 1,
    labels: dict[str, str] | None = None,
    scheduler: str = "hami-scheduler",
    gpu: int = 1,
    affinity: dict[str, Any] | None = None,
    extra_limits: dict[str, str] | None = None,
    pod_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment of pause containers asking for `gpu` GPUs (none with gpu=0), gone at once when deleted."""
    labels = labels or {"app": name}
    limits = {"nvidia.com/gpu": str(gpu), **(extra_limits or {})} if gpu else dict(extra_limits or {})
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}],
    }
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels, "annotations": pod_annotations or {}}, "spec": spec},
        },
    }


def node_affinity(node: str) -> dict[str, Any]:
    """A required node affinity to one node by name (matchFields), as a placement's pin writes it."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        }
    }
