"""Small helpers for test-bed tests: polling and object builders."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Poll fn() until it returns something truthy; fail with `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


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
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        }
    }


def running_pods(core: Any, namespace: str, selector: str) -> list[Any]:
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
