"""Pods carrying the annotations HAMi's scheduler writes, for fixtures and test-bed scenarios.

HAMi's ``Filter`` (``pkg/scheduler/scheduler.go``) patches ``hami.io/vgpu-node``,
``hami.io/vgpu-time`` and the same encoded device string into both
``hami.io/vgpu-devices-to-allocate`` and ``hami.io/vgpu-devices-allocated``; ``Bind`` sets
``hami.io/bind-phase``. These builders write the same annotations at creation time, with the
encoder from the domain model, for pods no scheduler places: fixtures whose ``spec.nodeName`` is
set (HAMi's webhook refuses such pods, and no Filter runs for them), read by the cache, ``inspect``
and the planner as a finished allocation. A test that needs HAMi to place a pod makes it with
``pinned_pod`` instead (HAMi's own ``nvidia.com/use-gpuuuid``), so the same test holds whoever
allocates (testbed/hami/allocation.py).
"""

from __future__ import annotations

from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.annotations import NVIDIA_DEVICE_TYPE, ContainerDevice

# HAMi's chart excludes pods with this label from its webhook vgpu.hami.io (objectSelector in
# charts/hami/templates/scheduler/webhook.yaml). A fixture pod is one HAMi already placed: with
# real HAMi its webhook would deny it for its spec.nodeName ("pod has node assigned",
# pkg/scheduler/webhook.go), as it would any pod created that way.
WEBHOOK_IGNORE = {"hami.io/webhook": "ignore"}

# One container's shares: [(uuid, usedmem MiB, usedcores), ...]
Shares = list[tuple[str, int, int]]


def allocation_annotations(node: str, containers: list[Shares]) -> dict[str, str]:
    encoded = ann.encode_pod_devices(
        [[ContainerDevice(u, NVIDIA_DEVICE_TYPE, m, c) for u, m, c in shares] for shares in containers]
    )
    return {
        ann.POD_VGPU_NODE: node,
        ann.POD_VGPU_TIME: "1764633600",
        ann.POD_DEVICES_TO_ALLOCATE: encoded,
        ann.POD_DEVICES_ALLOCATED: encoded,
        ann.POD_BIND_PHASE: "success",
    }


def hami_pod(
    name: str,
    namespace: str,
    node: str,
    shares: Shares,
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    phase: str | None = "Running",
    owner: tuple[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A one-container pod that HAMi placed on `node` with `shares` (a fixture: labelled so that
    HAMi's webhook lets it through, see WEBHOOK_IGNORE).

    `limits` default to what produces those shares: nvidia.com/gpu = len(shares), plus memory and
    cores of the first share.
    """
    if limits is None:
        limits = {"nvidia.com/gpu": str(len(shares))}
        if shares:
            limits["nvidia.com/gpumem"] = str(shares[0][1])
            limits["nvidia.com/gpucores"] = str(shares[0][2])
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": {**(labels or {"app": name}), **WEBHOOK_IGNORE},
        "annotations": {**allocation_annotations(node, [shares]), **(extra_annotations or {})},
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}", "controller": True}
        ]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}],
        },
    }
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def pinned_pod(
    name: str, node: str, uuids: list[str], limits: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A one-container pod that asks ``hami-scheduler`` for exactly `uuids` on `node`.

    HAMi's own means (reference: HAMi v2.10.0 ``NvidiaGPUDevices.Fit``, pkg/device/nvidia/device.go,
    ``CheckUUID`` in pkg/device/devices.go): ``nvidia.com/use-gpuuuid`` lists the GPUs and
    ``nvidia.com/gpu`` asks for that many; the node is a required affinity, which kube-scheduler
    enforces before HAMi's Filter sees the node. Real HAMi or the stand-in (``start_allocator``)
    then writes the allocation; nothing here writes HAMi's annotations.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels or {"app": name},
            "annotations": {ann.USE_GPU_UUID: ",".join(uuids)},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}],
        },
    }
