"""A small, deterministic simulation of where HAMi's scheduler would put a pod.

Mirrors Project-HAMi/HAMi v2.10 (file paths below are in that repository):

* **Per-GPU Fit** is :func:`hami_place_core.fit.gpu_fit_reason` (``NvidiaGPUDevices.Fit`` in
  ``pkg/device/nvidia/device.go``): health, cordon, type and UUID selectors, share slots, memory,
  cores, exclusivity, exhausted compute.
* **GPU order** (``pkg/scheduler/policy/gpu_policy.go``, ``pkg/scheduler/score.go``
  ``fitInDevices``): per container, every GPU of the node gets ``DeviceListsScore.ComputeScore`` =
  10 x (slots + cores + memory shares already used), in float32. The request's own slot, cores
  and memory are added only on a GPU whose registered type equals the request's type
  (``"NVIDIA"``), which no device plugin writes (it registers the model, e.g. ``NVIDIA A100...``):
  in practice the request does not count. The node's list is then ``sort.Sort``-ed *in place* with
  ``DeviceUsageList.Less``: score first (``spread``: highest first; ``binpack``: lowest first),
  NUMA only breaking ties (#1806, lower NUMA first) when the pod does not ask for NUMA binding. The
  list starts in registration order (the register annotation's order) and keeps the order the
  previous container's sort left, since it is sorted, never rebuilt; Go's ``sort.Sort`` is an
  insertion sort, hence stable, for up to 12 GPUs (above that pdqsort is not stable and ties are
  not modelled). ``Fit`` (``pkg/device/nvidia/device.go``) gets the GPUs whose type contains
  "nvidia" (``getNodeResources``), walks them *from the end* and takes the first ``nums`` that fit.
  Net effect for ``spread`` (chart default): the least used GPU first, then the higher NUMA node.
* **Node choice** (``pkg/scheduler/score.go`` ``scoreNode`` and
  ``pkg/scheduler/policy/node_policy.go``): ``NodeScore.ComputeDefaultScore`` = 10 x (used slots /
  all slots + used cores / all cores + used memory / all memory) in float32 over the node's GPUs
  *before* the pod is added; the NVIDIA ``ScoreNode`` override returns 0. ``Filter`` sorts with
  ``NodeScoreList.Less`` and takes the last element: ``binpack`` (chart default) picks the highest
  score, ``spread`` the lowest. HAMi scores nodes in goroutines, so its order among equal scores
  is arbitrary; we break ties by node name, which keeps the simulation deterministic.
* Containers are placed one after another with usage accumulating (``fitInDevices`` per
  container, each re-scoring the GPUs), and HAMi's pod annotations are written as ``Filter`` and
  ``Bind`` in ``pkg/scheduler/scheduler.go`` write them: one segment per container that got GPUs.

Not simulated: init containers holding GPUs (v2.9+ peak-usage collapse), NUMA binding
(``nvidia.com/numa-bind``), topology-aware policy, MIG/MPS modes, resource quotas, and
kube-scheduler's own filters (CPU, memory, taints, affinity): pass the nodes those leave as
``allowed_nodes``.
"""

from __future__ import annotations

import copy
import struct
import uuid as uuidlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hami_place_core import annotations as ann
from hami_place_core.annotations import ContainerDevice, GpuDevice
from hami_place_core.devices import default_kind
from hami_place_core.fit import GpuUsage, add_usage, gpu_fit_reason
from hami_place_core.node_resources import pod_requests
from hami_place_core.requests import PCT_UNSET, GpuRequest, PodRequest
from hami_place_core.state import (
    ClusterState,
    NodeState,
    PodAllocation,
    add_pod,
    delete_pod,
    pod_allocation,
    set_pod_requests,
)

Policy = Literal["binpack", "spread"]
POLICIES: tuple[Policy, ...] = ("binpack", "spread")

# The vendor HAMi's placement is simulated for (NVIDIA: its Fit, its annotations, its resources).
_VENDOR = default_kind()
_DEVICE_TYPE = _VENDOR.device_type

# pkg/scheduler/policy/constant.go: `Weight int = 10`. It scales every score alike, so it never
# changes a decision; kept so the numbers match HAMi's log lines.
WEIGHT = 10


@dataclass(frozen=True, slots=True)
class Placement:
    """Where HAMi would bind a pod: the node and, per app container, the GPU shares taken."""

    node: str
    # One entry per app container, in pod order; containers without GPUs have an empty tuple.
    containers: tuple[tuple[ContainerDevice, ...], ...]
    score: float  # the node's ComputeDefaultScore (before the pod was added)

    @property
    def uuids(self) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(d.uuid for d in devs) for devs in self.containers)

    @property
    def encoded(self) -> str:
        """The value of ``hami.io/vgpu-devices-allocated`` for this placement: one segment per
        container that got GPUs, as HAMi v2.10 writes it (see ``state._align``)."""
        return _VENDOR.allocation_encoder(tuple(devs for devs in self.containers if devs))


def _check_policy(name: str, value: str) -> None:
    if value not in POLICIES:
        raise ValueError(f"{name} must be one of {', '.join(POLICIES)}, got {value!r}")


def f32(x: float) -> float:
    """`x` rounded to float32, as Go's float32 arithmetic rounds after every operation."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _ratio(a: int, b: int) -> float:
    return f32(f32(a) / f32(b))


def gpu_score(request: GpuRequest, gpu: GpuDevice, usage: GpuUsage) -> float:
    """HAMi's ``DeviceListsScore.ComputeScore`` (``pkg/scheduler/policy/gpu_policy.go``) for one
    container request on one GPU, with the default weights 1/1/1, in float32."""
    if not (gpu.count and gpu.devcore and gpu.devmem):
        return 0.0
    slots = cores = mem = 0
    # `container.Type != ds.Device.Type`: the request ("NVIDIA") counts only on a GPU registered
    # with exactly that type; real registrations carry the model name, so it normally does not.
    if gpu.type == _DEVICE_TYPE:
        slots, cores = 1, request.coresreq
        if request.mem_percentage not in (0, PCT_UNSET):
            mem = gpu.devmem * request.mem_percentage // 100
        else:
            mem = request.memreq
    used = _ratio(slots + usage.used, gpu.count)
    core = _ratio(cores + usage.usedcores, gpu.devcore)
    memory = _ratio(mem + usage.usedmem, gpu.devmem)
    return f32(WEIGHT * f32(f32(used + core) + memory))


def node_score(node: NodeState) -> float:
    """HAMi's ``NodeScore.ComputeDefaultScore`` (``pkg/scheduler/policy/node_policy.go``): how used
    the node's GPUs are, before placing, in float32."""
    used = count = usedcores = devcore = usedmem = devmem = 0
    for g in node.devices:
        u = node.usage[g.uuid]
        used += u.used
        count += g.count
        usedcores += u.usedcores
        devcore += g.devcore
        usedmem += u.usedmem
        devmem += g.devmem
    if not (count and devcore and devmem):
        return 0.0
    total = f32(f32(_ratio(used, count) + _ratio(usedcores, devcore)) + _ratio(usedmem, devmem))
    return f32(WEIGHT * total)


def _less_key(policy: Policy, score: float, gpu: GpuDevice) -> tuple[float, int]:
    # DeviceUsageList.Less without numa-bind: score first, then the lower NUMA node (#1806).
    return (-score if policy == "spread" else score, gpu.numa)


def registration_order(node: NodeState) -> list[GpuDevice]:
    """The node's GPUs in the register annotation's order: HAMi's device list starts so."""
    pos = {d.uuid: i for i, d in enumerate(node.register.devices)}
    return sorted(node.devices, key=lambda d: pos.get(d.uuid, len(pos) + d.index))


def _is_nvidia(gpu: GpuDevice) -> bool:
    # score.go getNodeResources: the devices handed to the NVIDIA Fit are those whose type
    # contains the request's type, case-insensitively.
    return _DEVICE_TYPE.lower() in gpu.type.lower()


def _fit_container(
    req: GpuRequest,
    request: PodRequest,
    node: NodeState,
    policy: Policy,
    order: list[GpuDevice],
    scratch: dict[str, GpuUsage],
) -> list[GpuDevice] | None:
    """One container, as ``fitInDevices`` + NVIDIA ``Fit``: re-sort `order` in place (Python's sort
    is stable, as Go's insertion sort is up to 12 GPUs), then walk it from the end."""
    scores = {g.uuid: gpu_score(req, g, scratch[g.uuid]) for g in order}
    order.sort(key=lambda g: _less_key(policy, scores[g.uuid], g))
    nvidia = [g for g in order if _is_nvidia(g)]
    if req.nums > len(nvidia):
        return None  # NodeInsufficientDevice (fitInDevices checks this before Fit)
    chosen: list[GpuDevice] = []
    for g in reversed(nvidia):
        if gpu_fit_reason(req, g, scratch[g.uuid], request.selectors, node.cordoned) is None:
            chosen.append(g)
            if len(chosen) == req.nums:
                return chosen
    return None


def fit_on_node(
    request: PodRequest,
    node: NodeState,
    gpu_policy: Policy = "spread",
    usage: Mapping[str, GpuUsage] | None = None,
) -> tuple[tuple[ContainerDevice, ...], ...] | None:
    """Per app container, the GPU shares HAMi would pick on `node`, or None if the pod does not fit.

    Containers without GPUs get an empty tuple (their position is kept; :attr:`Placement.encoded`
    leaves them out, as HAMi does). `usage` defaults to the node's own; it is never modified.
    """
    _check_policy("gpu_policy", gpu_policy)
    if any(r is not None for r in request.init):
        raise NotImplementedError("simulate does not place init containers that request GPUs")
    base = usage if usage is not None else node.usage
    scratch = {g.uuid: (base.get(g.uuid) or GpuUsage()).copy() for g in node.devices}
    order = registration_order(node)  # sorted in place per container, as HAMi's list is
    out: list[tuple[ContainerDevice, ...]] = []
    for req in request.containers:
        if req is None:
            out.append(())
            continue
        chosen = _fit_container(req, request, node, gpu_policy, order, scratch)
        if chosen is None:
            return None
        devs = []
        for g in chosen:
            devs.append(ContainerDevice(g.uuid, _DEVICE_TYPE, req.memory_on(g.devmem), req.coresreq))
            add_usage(scratch[g.uuid], req, g)
        out.append(tuple(devs))
    return tuple(out)


def schedulable(node: NodeState) -> bool:
    """Nodes HAMi can place on: Ready, not cordoned (spec.unschedulable), with a readable GPU inventory."""
    return node.ready and not node.unschedulable and node.parseable and bool(node.devices)


class Simulator:
    """HAMi's placement over a :class:`ClusterState` that it keeps up to date.

    Node scores depend only on a node's usage, so they are cached and recomputed only for the
    nodes :meth:`apply` and :meth:`evict` touch; :meth:`place` then tries nodes best score first and
    stops at the first that fits, which is the node HAMi's ``Filter`` would pick. Change the state
    only through this object while using it (or call :meth:`invalidate`).
    """

    def __init__(self, state: ClusterState, node_policy: Policy = "binpack", gpu_policy: Policy = "spread") -> None:
        _check_policy("node_policy", node_policy)
        _check_policy("gpu_policy", gpu_policy)
        self.state = state
        self.node_policy: Policy = node_policy
        self.gpu_policy: Policy = gpu_policy
        self._scores: dict[str, float] = {}

    def invalidate(self, node: str | None = None) -> None:
        """Forget cached scores (of one node, or all) after changing the state directly."""
        if node is None:
            self._scores.clear()
        else:
            self._scores.pop(node, None)

    def score(self, name: str) -> float:
        s = self._scores.get(name)
        if s is None:
            s = self._scores[name] = node_score(self.state.nodes[name])
        return s

    def candidates(self, allowed_nodes: Collection[str] | None = None) -> list[str]:
        """Schedulable nodes in the order HAMi prefers them (ties by name)."""
        nodes = self.state.nodes
        names = nodes if allowed_nodes is None else {n for n in allowed_nodes if n in nodes}
        sign = -1.0 if self.node_policy == "binpack" else 1.0
        return sorted((n for n in names if schedulable(nodes[n])), key=lambda n: (sign * self.score(n), n))

    def place(self, request: PodRequest, allowed_nodes: Collection[str] | None = None) -> Placement | None:
        """Where HAMi would place a pod with `request`, or None if it fits on no node (or asks for no GPU).

        `allowed_nodes` restricts the candidates (what kube-scheduler's own filters leave, e.g. by
        CPU and memory); None means every node. The state is not modified: :meth:`apply` the pod
        that :func:`bind` builds to commit the placement.
        """
        if not request.gpu_containers:
            return None
        for name in self.candidates(allowed_nodes):
            devices = fit_on_node(request, self.state.nodes[name], self.gpu_policy)
            if devices is not None:
                return Placement(name, devices, self.score(name))
        return None

    def apply(self, pod: Mapping[str, Any]) -> PodAllocation:
        alloc = apply(self.state, pod)
        self.invalidate(alloc.node)
        return alloc

    def evict(self, key: str) -> PodAllocation | None:
        alloc = evict(self.state, key)
        if alloc is not None:
            self.invalidate(alloc.node)
        return alloc


def place(
    state: ClusterState,
    request: PodRequest,
    node_policy: Policy = "binpack",
    gpu_policy: Policy = "spread",
    allowed_nodes: Collection[str] | None = None,
) -> Placement | None:
    """One-off :meth:`Simulator.place`; use a :class:`Simulator` to place many pods in a row."""
    return Simulator(state, node_policy, gpu_policy).place(request, allowed_nodes)


# ---- pods as HAMi leaves them ---------------------------------------------------------------
def pod_manifest(
    name: str,
    namespace: str,
    limits: Mapping[str, str],
    *,
    requests: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    creation_timestamp: str | None = None,
    scheduler_name: str = "hami-scheduler",
    image: str = "registry.k8s.io/pause:3.10",
) -> dict[str, Any]:
    """A one-container pod as submitted, after HAMi's webhook: Pending, not yet placed.

    `limits` are the container's limits as they stand after admission (for a whole-GPU request
    the webhook has already added ``nvidia.com/gpucores: 100``). `owner` is ``(kind, name)`` of the
    controlling owner, e.g. ``("ReplicaSet", "web-5d4f8")``.
    """
    uid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"hami-place/pod/{namespace}/{name}"))
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "labels": dict(labels or {"app": name}),
        "annotations": dict(annotations or {}),
    }
    if creation_timestamp:
        meta["creationTimestamp"] = creation_timestamp
    if owner:
        kind, owner_name = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"hami-place/{kind}/{namespace}/{owner_name}")),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    resources: dict[str, Any] = {"limits": dict(limits)}
    if requests:
        resources["requests"] = dict(requests)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [{"name": "main", "image": image, "resources": resources}],
        },
        "status": {"phase": "Pending"},
    }


def bind(pod: Mapping[str, Any], placement: Placement, vgpu_time: int | str = 0) -> dict[str, Any]:
    """A copy of `pod` as HAMi leaves it once bound by `placement`, and Running.

    ``Filter`` writes ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` and the same encoded devices into
    ``hami.io/vgpu-devices-to-allocate`` and ``hami.io/vgpu-devices-allocated``; ``Bind`` sets
    ``hami.io/bind-phase`` (``success`` once the device plugin has allocated).
    """
    spec_containers = (pod.get("spec") or {}).get("containers") or ()
    if len(placement.containers) != len(spec_containers):
        raise ValueError(
            f"placement has {len(placement.containers)} containers, the pod {len(spec_containers)}: "
            "place the pod's own request"
        )
    out = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    annotations = meta.get("annotations") or {}
    encoded = placement.encoded
    annotations.update(
        {
            ann.POD_VGPU_NODE: placement.node,
            ann.POD_VGPU_TIME: str(vgpu_time),
            _VENDOR.pod_to_allocate: encoded,
            _VENDOR.pod_allocated: encoded,
            ann.POD_BIND_PHASE: "success",
        }
    )
    meta["annotations"] = annotations
    out.setdefault("spec", {})["nodeName"] = placement.node
    out["status"] = {**(out.get("status") or {}), "phase": "Running"}
    return out


def apply(state: ClusterState, pod: Mapping[str, Any]) -> PodAllocation:
    """Add a bound pod (from :func:`bind`) to `state`, exactly as :func:`build_state` would count it."""
    alloc = pod_allocation(pod)
    if alloc is None:
        raise ValueError("pod is not bound by HAMi (no hami.io/vgpu-node) or has finished")
    if alloc.key in state.pods:
        raise ValueError(f"pod {alloc.key} is already in the state")
    add_pod(state, alloc)
    set_pod_requests(state, alloc.key, alloc.node, pod_requests(pod))
    return alloc


def evict(state: ClusterState, key: str) -> PodAllocation | None:
    """Remove pod `key` ("namespace/name") and give its GPU shares, CPU and memory back; None if it
    was not there."""
    return delete_pod(state, key)


# ---- nodes as HAMi's device plugin registers them ---------------------------------------------
def gpu_uuid(node: str, index: int) -> str:
    """A deterministic GPU UUID for (node, index), in NVML's ``GPU-<uuid>`` form."""
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{node}/{index}"))


def node_manifest(
    name: str,
    devices: Sequence[GpuDevice],
    *,
    cpu_milli: int = 64000,
    memory_mib: int = 262144,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node as a HAMi v2.10 cluster shows it: the v2.8+ JSON register annotation and allocatable
    ``nvidia.com/gpu`` = GPUs x split count (what the device plugin advertises)."""
    healthy = [d for d in devices if d.health]
    resources = {
        "cpu": f"{cpu_milli}m" if cpu_milli % 1000 else str(cpu_milli // 1000),
        "memory": f"{memory_mib}Mi",
        "pods": "110",
        _VENDOR.resource_count: str(sum(d.count for d in healthy)),
        _VENDOR.resource_memory: str(sum(d.devmem for d in healthy)),
        _VENDOR.resource_cores: str(sum(d.devcore for d in healthy)),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "gpu": "on", **(labels or {})},
            "annotations": {_VENDOR.node_register: _VENDOR.register_encoder(list(devices))},
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "capacity": resources,
            "allocatable": dict(resources),
        },
    }
