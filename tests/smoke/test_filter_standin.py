"""A GPU pod whose request fits no GPU stays Pending exactly as HAMi's Filter leaves it, in both
modes: with real HAMi (HAMI_SCHEDULER_BIN) its extender refuses the node; in CI the labelled
stand-in for HAMi's Filter does (testbed/hami/filter_standin.py), with the model of HAMi's Fit. A pod
that fits is scheduled and allocated; a pod without GPUs is never held back."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from hami_place_core import annotations as ann
from testbed.controlplane.waiting import wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.workloads import node_affinity
from testbed.hami.allocation import start_allocator
from testbed.hami.hami_pods import pinned_pod

pytestmark = [pytest.mark.testbed, pytest.mark.hami]

HALF = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}


def _pod(name: str, node: str, limits: dict[str, str] | None) -> dict[str, Any]:
    resources = {"limits": limits} if limits else {}
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "affinity": node_affinity(node),
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
        },
    }


def _allocated(core: Any, ns: str, name: str) -> list[list[str]] | None:
    """The UUIDs HAMi (or the allocation stand-in) allocated to the pod, once the bind finished."""
    pod = core.read_namespaced_pod(name, ns)
    a = pod.metadata.annotations or {}
    if pod.status.phase != "Running" or a.get(ann.POD_BIND_PHASE) != "success" or ann.POD_DEVICES_ALLOCATED not in a:
        return None
    return [[d.uuid for d in c] for c in ann.decode_pod_devices(a[ann.POD_DEVICES_ALLOCATED]).containers if c]


def _unschedulable(core: Any, ns: str, name: str) -> Any:
    pod = core.read_namespaced_pod(name, ns)
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return pod, c
    return None


def test_a_pod_that_fits_no_gpu_stays_pending_as_hami_leaves_it(api, ns, testbed, request) -> None:
    core = client.CoreV1Api(api)
    node = NodeSpec(f"{ns[:50]}-n", gpus=4)  # its own node: 4 A100s, each half used below
    testbed.add_nodes([node])
    request.addfinalizer(lambda: core.delete_node(node.name))
    request.addfinalizer(start_allocator(api, {ns}, choose_gpus=True).stop)  # real HAMi, or the stand-in

    for i in range(4):
        core.create_namespaced_pod(ns, pinned_pod(f"half-{i}", node.name, [node.gpu_uuid(i)], HALF))
    for i in range(4):
        got = wait_for(f"half-{i} allocated", lambda i=i: _allocated(core, ns, f"half-{i}"), 60)
        assert got == [[node.gpu_uuid(i)]]

    # Two whole GPUs (no percentage: 100% of the memory, and HAMi's webhook makes the cores 100):
    # the node has 4 x 50% free but no whole GPU. kube-scheduler's aggregate check would pass it.
    core.create_namespaced_pod(ns, _pod("whole", node.name, {"nvidia.com/gpu": "2"}))
    pod, cond = wait_for("whole Unschedulable", lambda: _unschedulable(core, ns, "whole"), 60)
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    assert "CardInsufficientMemory" in cond.message, cond.message
    assert ann.POD_DEVICES_ALLOCATED not in (pod.metadata.annotations or {})

    # Two GPUs at 50% fit: scheduled on the node and allocated two of its GPUs.
    half2 = {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}
    core.create_namespaced_pod(ns, _pod("half2", node.name, half2))
    (uuids,) = wait_for("half2 allocated", lambda: _allocated(core, ns, "half2"), 60)
    assert len(set(uuids)) == 2 and set(uuids) <= {node.gpu_uuid(i) for i in range(4)}
    assert core.read_namespaced_pod("half2", ns).spec.node_name == node.name

    # A pod without GPUs is never held back by the filter.
    core.create_namespaced_pod(ns, _pod("cpu", node.name, None))
    wait_for("cpu Running", lambda: core.read_namespaced_pod("cpu", ns).status.phase == "Running", 60)

    # The whole-GPU pod is still Pending, never bound.
    pod = core.read_namespaced_pod("whole", ns)
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
