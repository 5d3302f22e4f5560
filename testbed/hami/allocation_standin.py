"""STAND-IN for HAMi's Filter annotation write, for the CI mode of the test bed (no HAMi binary).

The test bed runs the real HAMi scheduler when ``HAMI_SCHEDULER_BIN`` names one (testbed/hami/scheduler.py,
``make test-hami``); CI has no HAMi binary, so there this labelled stand-in writes what HAMi's
Filter would. Tests never start it themselves: ``testbed/hami/allocation.py`` ``start_allocator``
starts it only in the stand-in mode, so the same test holds whoever allocates.

HAMi's extender, at Filter, picks GPUs and patches ``hami.io/vgpu-node`` and
``hami.io/vgpu-devices-allocated`` (``pkg/scheduler/scheduler.go``). This thread does the same for
pods the test bed's stand-in ``hami-scheduler`` profile has bound and that carry
``nvidia.com/use-gpuuuid`` (the pinned ones): it allocates exactly those UUIDs, with the memory and
cores HAMi's Fit would charge. Without ``choose_gpus`` it never chooses GPUs itself, so a test
judged by it proves the agent's side (pin, confirm, complete) but not HAMi's honouring of the pin.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.annotations import NVIDIA_DEVICE_TYPE, ContainerDevice
from hami_place_core.requests import pod_request
from hami_place_core.state import build_state, upsert_pod
from testbed.hami.simulate import POLICIES, Policy, fit_on_node


def gpu_policy(pod: dict[str, Any]) -> Policy | None:
    """The pod's GPU policy as HAMi resolves it, or None if the simulator does not model it.

    HAMi v2.10.0 ``util.GetGPUSchedulerPolicyByPod`` (pkg/util/util.go): the annotation's value
    if present, else ``--gpu-scheduler-policy`` (the chart's default, spread). Comma lists and
    ``topology-aware``/``mutex``/``numa`` (``gpuSortKeyChain``, pkg/scheduler/policy/gpu_policy.go)
    are not simulated (testbed/hami/simulate.py).
    """
    value = ((pod["metadata"].get("annotations") or {}).get(ann.POD_GPU_SCHEDULER_POLICY) or "spread").strip()
    for policy in POLICIES:
        if value == policy:
            return policy
    return None


class AllocationStandIn:
    """With ``choose_gpus``, it also allocates unpinned pods: on the node kube-scheduler bound them
    to, it picks GPUs the way HAMi's Fit does, using the shared model's simulator
    (testbed/hami/simulate.py), with the pod's own ``hami.io/gpu-scheduler-policy`` as HAMi
    reads it (``util.GetGPUSchedulerPolicyByPod``, pkg/util/util.go), else HAMi's chart default
    (spread). That lets tests build the scattered layouts a long-running HAMi cluster has through
    HAMi's own per-pod means, so the same layout comes out when the real HAMi allocates.

    The node is kube-scheduler's choice here: ``hami.io/node-scheduler-policy`` is HAMi's to
    honour (``resolveNodeSchedulerPolicy``, pkg/scheduler/score.go); a test that needs a node
    layout in both modes states it with a preferred node affinity too (tests/cli/test_defrag_live.py).
    """

    def __init__(
        self, api: Any, namespaces: set[str] | None = None, interval: float = 0.2, choose_gpus: bool = False
    ) -> None:
        self.api = api
        self.choose_gpus = choose_gpus
        self.namespaces = namespaces
        self.interval = interval
        self.allocated: list[str] = []
        self.unsupported: list[str] = []  # pods whose GPU policy the simulator does not model
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hami-allocation-standin")

    def start(self) -> AllocationStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            # a test helper keeps polling through API hiccups
            with contextlib.suppress(Exception):
                self._pass(core)
            self._stop.wait(self.interval)

    def _pass(self, core: Any) -> None:
        pods = self.api.sanitize_for_serialization(core.list_pod_for_all_namespaces().items)
        nodes: dict[str, Any] = {}
        state = None
        if self.choose_gpus:
            state = build_state(self.api.sanitize_for_serialization(core.list_node().items), pods)
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            if self.namespaces is not None and meta["namespace"] not in self.namespaces:
                continue
            annotations = meta.get("annotations") or {}
            node = spec.get("nodeName")
            uuids = ann.split_list(annotations.get(ann.USE_GPU_UUID))
            if (
                spec.get("schedulerName") != "hami-scheduler"
                or not node
                or ann.POD_DEVICES_ALLOCATED in annotations
                or meta.get("deletionTimestamp")
            ):
                continue
            if not uuids:
                if state is not None and node in state.nodes:
                    self._choose(core, state, pod, node)
                continue
            if node not in nodes:
                raw = core.read_node(node).metadata.annotations or {}
                nodes[node] = {d.uuid: d for d in ann.decode_register(raw.get(ann.NODE_REGISTER)).devices}
            devices = nodes[node]
            request = pod_request(pod)
            containers: list[list[ContainerDevice]] = []
            for req in request.containers:
                if req is None:
                    containers.append([])
                    continue
                containers.append(
                    [
                        ContainerDevice(
                            u, NVIDIA_DEVICE_TYPE, req.memory_on(devices[u].devmem) if u in devices else 0, req.coresreq
                        )
                        for u in uuids[: req.nums]
                    ]
                )
            encoded = ann.encode_pod_devices(containers)
            core.patch_namespaced_pod(
                meta["name"],
                meta["namespace"],
                {
                    "metadata": {
                        "annotations": {
                            ann.POD_VGPU_NODE: node,
                            ann.POD_VGPU_TIME: str(int(time.time())),
                            ann.POD_DEVICES_TO_ALLOCATE: encoded,
                            ann.POD_DEVICES_ALLOCATED: encoded,
                            ann.POD_BIND_PHASE: "success",
                        }
                    }
                },
            )
            self.allocated.append(f"{meta['namespace']}/{meta['name']}")

    def _choose(self, core: Any, state: Any, pod: dict[str, Any], node: str) -> None:
        request = pod_request(pod)
        if not request.gpu_containers:
            return
        policy = gpu_policy(pod)
        if policy is None:
            self.unsupported.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
            return  # a policy the model does not simulate: left unallocated, never guessed
        devices = fit_on_node(request, state.nodes[node], policy)
        if devices is None:
            return  # HAMi's Filter would have refused this node; the pod stays unallocated
        encoded = ann.encode_pod_devices([list(c) for c in devices])
        annotations = {
            ann.POD_VGPU_NODE: node,
            ann.POD_VGPU_TIME: str(int(time.time())),
            ann.POD_DEVICES_TO_ALLOCATE: encoded,
            ann.POD_DEVICES_ALLOCATED: encoded,
            ann.POD_BIND_PHASE: "success",
        }
        meta = pod["metadata"]
        core.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"annotations": annotations}})
        meta.setdefault("annotations", {}).update(annotations)
        upsert_pod(state, pod)  # later pods of this pass see the usage
        self.allocated.append(f"{meta['namespace']}/{meta['name']}")
