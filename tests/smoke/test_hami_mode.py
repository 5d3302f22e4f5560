"""The test bed runs the mode the pytest header names: real HAMi with HAMI_SCHEDULER_BIN, the
labelled stand-in without it (docs/testing.md, "Two modes"). A test that believed it was judged by
HAMi while the stand-in allocated would prove nothing about HAMi."""

from __future__ import annotations

import pytest
from kubernetes import client

from hami_place_core import annotations as ann
from testbed.controlplane.waiting import running_pods, wait_for
from testbed.hami.allocation import real_hami
from testbed.hami.scheduler import BIND_PHASE_ALLOCATING, mode_banner, scheduler_binary

pytestmark = [pytest.mark.testbed, pytest.mark.hami]

HAMI_COMPONENTS = {"hami-scheduler", "kube-scheduler-hami", "hami-device-plugin-post-bind"}


def _gpu_pod(name: str) -> dict:
    # No schedulerName: HAMi's webhook (--force-overwrite-default-scheduler, the chart's default)
    # hands a default-scheduler pod that asks for nvidia.com/* to hami-scheduler.
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "5"}
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}],
        },
    }


def test_the_banner_and_the_components_name_the_same_mode(testbed) -> None:
    binary = scheduler_binary()
    assert real_hami() == (binary is not None)
    if binary is None:
        assert mode_banner().startswith("HAMi: the labelled stand-in allocates")
        assert not HAMI_COMPONENTS & set(testbed.components)
    else:
        assert mode_banner() == f"HAMi: the real scheduler {binary} is the hami-scheduler extender"
        assert set(testbed.components) >= HAMI_COMPONENTS
        assert all(testbed.components[name].alive() for name in HAMI_COMPONENTS)


def test_who_allocates_an_unpinned_pod(api, ns) -> None:
    """With real HAMi, its webhook, Filter, Bind and the post-bind step leave HAMi's annotations on a
    pod no test helper touched; with the stand-in (not started here) nobody writes them."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _gpu_pod("who"))
    (pod,) = wait_for("the pod Running", lambda: running_pods(core, ns, "app=who"), 60)
    if not real_hami():
        assert pod.spec.scheduler_name == "default-scheduler"
        assert ann.POD_DEVICES_ALLOCATED not in (pod.metadata.annotations or {})
        return
    assert pod.spec.scheduler_name == "hami-scheduler"

    def finished() -> dict[str, str]:
        a = core.read_namespaced_pod("who", ns).metadata.annotations or {}
        return a if a.get(ann.POD_BIND_PHASE) == "success" else {}

    annotations = wait_for("HAMi's allocation and the post-bind step", finished, 30)
    assert annotations[ann.POD_VGPU_NODE] == pod.spec.node_name
    decoded = ann.decode_pod_devices(annotations[ann.POD_DEVICES_ALLOCATED])
    assert decoded.error is None
    (devices,) = decoded.containers
    assert [(d.usedmem, d.usedcores) for d in devices] == [(1024, 5)]
    assert annotations[ann.POD_DEVICES_TO_ALLOCATE] == ";"  # erased as the device plugin does
    assert annotations[ann.POD_BIND_PHASE] != BIND_PHASE_ALLOCATING
