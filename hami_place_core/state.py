"""The cluster as HAMi's scheduler sees it: GPUs per node and their usage, from Nodes and Pods.

Usage is rebuilt like HAMi v2.10.0's ``getNodesUsage`` (``pkg/scheduler/scheduler.go``): every
pod that has ``hami.io/vgpu-node`` and is neither Succeeded nor Failed counts, decoded from
``hami.io/vgpu-devices-allocated`` (the annotation the device plugin never erases). Init
containers are collapsed per GPU as ``CollapseInitContainerUsage`` does
(``pkg/device/initContainer.go``): max(init peak, sum of app containers), one slot for init.

Input is plain Kubernetes JSON (dicts), so the CLI, the agent's watch cache and snapshots share it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.annotations import ContainerDevice, GpuDevice, RegisterDecoding
from hami_place_core.devices import default_kind
from hami_place_core.fit import GpuUsage
from hami_place_core.node_resources import Resources, node_allocatable, pod_requests
from hami_place_core.requests import DEFAULT_CONFIG, HamiConfig, PodRequest, pod_request

TERMINAL_PHASES = ("Succeeded", "Failed")

# Nodes and pods are read as the default vendor's (NVIDIA today): its register and allocation keys.
_VENDOR = default_kind()


@dataclass(slots=True)
class PodAllocation:
    """A pod that holds GPU shares, with its usage per GPU UUID."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    labels: dict[str, str]
    owner_kind: str | None
    owner_name: str | None
    # UUID -> (slots, MiB, cores), collapsed over containers
    per_gpu: dict[str, tuple[int, int, int]]
    # app-container position -> UUIDs, for placement checks
    containers: tuple[tuple[str, ...], ...]
    request: PodRequest
    error: str | None = None
    # What kube-scheduler's filters and the planner read besides the GPU request. References into
    # the pod object (never copied, never mutated); a snapshot carries all of them but
    # `terminating` (snapshots hold no deletionTimestamp).
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    terminating: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class NodeState:
    name: str
    register: RegisterDecoding
    devices: tuple[GpuDevice, ...]  # sorted by index
    usage: dict[str, GpuUsage]
    pods: dict[str, list[str]]  # UUID -> pod keys
    ready: bool = True
    unschedulable: bool = False
    cordoned: frozenset[str] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, Any], ...] = ()
    register_raw: str | None = None
    # CPU, memory and pod slots for kube-scheduler's NodeResourcesFit; None: the node states none
    allocatable: Resources | None = None

    @property
    def error(self) -> str | None:
        return self.register.error

    @property
    def parseable(self) -> bool:
        return self.register.format not in ("absent", "invalid")

    def gpu(self, index: int) -> GpuDevice | None:
        for d in self.devices:
            if d.index == index:
                return d
        return None

    def by_uuid(self, uuid: str) -> GpuDevice | None:
        for d in self.devices:
            if d.uuid == uuid:
                return d
        return None


@dataclass(slots=True)
class ClusterState:
    nodes: dict[str, NodeState]
    pods: dict[str, PodAllocation]  # key -> allocation
    # pod key -> why its allocation is unreadable or names an unknown node/GPU
    problems: dict[str, str] = field(default_factory=dict)
    by_node: dict[str, set[str]] = field(default_factory=dict)  # node name -> pod keys allocated there
    # Every pod on a node (GPU or not, as kube-scheduler counts them): key -> (node, requests), and
    # the sum per node. Pods of nodes outside the state are kept too; they are never read.
    pod_requests: dict[str, tuple[str, Resources]] = field(default_factory=dict)
    requested: dict[str, Resources] = field(default_factory=dict)

    def requests_of(self, key: str) -> Resources:
        """What the pod asks of its node; nothing for a pod the state does not count (not bound, or done)."""
        entry = self.pod_requests.get(key)
        return entry[1] if entry is not None else Resources()

    def free_resources(self, node: str) -> Resources | None:
        """Allocatable minus what the node's pods request; None when the node states no allocatable."""
        n = self.nodes.get(node)
        if n is None or n.allocatable is None:
            return None
        return n.allocatable - self.requested.get(node, Resources())

    def problem_lines(self) -> list[str]:
        return sorted(f"pod {k}: {m}" for k, m in self.problems.items())

    def unreadable_summary(self) -> str:
        """One line on the nodes and pods whose HAMi data is invalid or inconsistent ("" if none):
        each is left out or marked, the rest of the cluster is read as usual."""
        nodes = sum(1 for n in self.nodes.values() if n.error)
        pods = len(self.problems)
        if not nodes and not pods:
            return ""
        parts = [f"{nodes} node{'s' * (nodes != 1)}"] if nodes else []
        parts += [f"{pods} pod{'s' * (pods != 1)}"] if pods else []
        return f"{' and '.join(parts)} with HAMi data that cannot be used as it is (left out or marked; see PROBLEMS)"


def _ready(node: Mapping[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def node_state(node: Mapping[str, Any]) -> NodeState:
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    register_raw = annotations.get(_VENDOR.node_register)
    reg = _VENDOR.decode_register(register_raw)
    devices = tuple(sorted(reg.devices, key=lambda d: (d.index, d.uuid)))
    spec = node.get("spec") or {}
    return NodeState(
        name=meta.get("name", ""),
        register=reg,
        devices=devices,
        usage={d.uuid: GpuUsage() for d in devices},
        pods={d.uuid: [] for d in devices},
        ready=_ready(node),
        unschedulable=bool(spec.get("unschedulable")),
        # HAMi v2.10 reads hami.io/device-cordon from the Node it stored when it last registered the
        # node's devices (cordonedDevices(nodeInfo), pkg/device/nvidia/device.go), i.e. when the
        # register annotation or the allocatable GPU count changed (NvidiaGPUDevices.CheckHealth):
        # a cordon added later is ignored by HAMi until then. We read the annotation as it is now,
        # so a fresh cordon is honoured earlier than HAMi honours it (docs/hami-fit-differential.md).
        cordoned=frozenset(ann.split_list(annotations.get(ann.NODE_DEVICE_CORDON))),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(spec.get("taints") or ()),
        register_raw=register_raw,
        allocatable=node_allocatable(node),
    )


Segments = tuple[tuple[ContainerDevice, ...], ...]


def _align(segments: Segments, request: PodRequest) -> tuple[Segments, Segments, str | None]:
    """Split decoded segments into (init, app) container positions.

    HAMi v2.10 writes one segment per container that got GPUs, init containers first
    (``allocateAppContainers``/``allocateInitContainers`` in ``pkg/scheduler/score.go`` append the
    empty segment of a GPU-less container under the node's device *type* keys, not under
    ``"NVIDIA"``, so ``PatchAnnotations`` in ``pkg/device/nvidia/device.go`` never writes it).
    A node whose GPUs are registered with the bare type ``NVIDIA`` gets one segment per container,
    and values written that way by other tools (hami-place's own stand-in) read the same.
    """
    n_init, n_app = len(request.init), len(request.containers)
    if len(segments) == n_init + n_app:
        return segments[:n_init], segments[n_init:], None
    wants = [r is not None for r in (*request.init, *request.containers)]
    if len(segments) == sum(wants):
        it = iter(segments)
        full = tuple(next(it) if w else () for w in wants)
        return full[:n_init], full[n_init:], None
    # ≤v2.8 lists app containers only; anything else is read as app containers, summed.
    warning = None
    if n_app and len(segments) not in (n_app, 0):
        warning = f"{len(segments)} container segments for {n_init} init + {n_app} app containers"
    return (), segments, warning


def _collapse(
    segments: Segments, request: PodRequest
) -> tuple[dict[str, tuple[int, int, int]], tuple[tuple[str, ...], ...], str | None]:
    """Per-UUID (slots, mem, cores) with init containers collapsed, plus app-container UUIDs."""
    if not request.init and len(request.containers) == 1 and len(segments) == 1:  # the common case
        per: dict[str, tuple[int, int, int]] = {}
        for d in segments[0]:
            old = per.get(d.uuid)
            per[d.uuid] = (
                (1, d.usedmem, d.usedcores) if old is None else (old[0] + 1, old[1] + d.usedmem, old[2] + d.usedcores)
            )
        return per, (tuple(per),), None
    init, app, warning = _align(segments, request)
    app_use: dict[str, list[int]] = {}
    for devs in app:
        for d in devs:
            s = app_use.setdefault(d.uuid, [0, 0, 0])
            s[0] += 1
            s[1] += d.usedmem
            s[2] += d.usedcores
    init_peak: dict[str, list[int]] = {}
    for devs in init:
        for d in devs:
            s = init_peak.setdefault(d.uuid, [1, 0, 0])
            s[1] = max(s[1], d.usedmem)
            s[2] = max(s[2], d.usedcores)
    per_gpu: dict[str, tuple[int, int, int]] = {}
    for uuid in app_use.keys() | init_peak.keys():
        a = app_use.get(uuid, [0, 0, 0])
        i = init_peak.get(uuid, [0, 0, 0])
        per_gpu[uuid] = (max(a[0], i[0]), max(a[1], i[1]), max(a[2], i[2]))
    return per_gpu, tuple(tuple(d.uuid for d in devs) for devs in app), warning


def pod_allocation(pod: Mapping[str, Any], config: HamiConfig = DEFAULT_CONFIG) -> PodAllocation | None:
    """The pod's HAMi allocation, or None if HAMi does not count it (no vgpu-node, or finished)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    node = annotations.get(ann.POD_VGPU_NODE)
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if not node or phase in TERMINAL_PHASES:
        return None
    spec = pod.get("spec") or {}
    decoded = _VENDOR.allocation_decoder(annotations.get(_VENDOR.pod_allocated))
    request = pod_request(pod, config)
    per_gpu, containers, warning = _collapse(decoded.containers, request)
    owner_kind = owner_name = None
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            owner_kind, owner_name = ref.get("kind"), ref.get("name")
    return PodAllocation(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        node=node,
        phase=phase,
        labels=meta.get("labels") or {},  # shared with the input, never mutated
        owner_kind=owner_kind,
        owner_name=owner_name,
        per_gpu=per_gpu,
        containers=containers,
        request=request,
        error=decoded.error or warning,
        node_selector=spec.get("nodeSelector") or {},
        affinity=spec.get("affinity") or {},
        tolerations=tuple(spec.get("tolerations") or ()),
        annotations=annotations,
        terminating=bool(meta.get("deletionTimestamp")),
    )


def build_state(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], config: HamiConfig = DEFAULT_CONFIG
) -> ClusterState:
    """Decode every node and pod and add each pod's usage to its GPUs. Never raises on bad data."""
    state = ClusterState(nodes={}, pods={})
    with gc_paused():
        for n in nodes:
            upsert_node(state, n)
        for p in pods:
            upsert_pod(state, p, config)
    return state


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Bulk decoding creates ~10 objects per pod and no reference cycles; with a large cache alive,
    the cyclic collector would rescan it over and over (measured: 40% of build time at 100k pods)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ---- incremental maintenance: the same code path serves a bulk build and a watch cache -------------
def upsert_pod(state: ClusterState, pod: Mapping[str, Any], config: HamiConfig = DEFAULT_CONFIG) -> None:
    meta = pod.get("metadata") or {}
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    alloc = pod_allocation(pod, config)
    if alloc is None:
        remove_pod(state, key)
    else:
        add_pod(state, alloc)
    phase = (pod.get("status") or {}).get("phase")
    # kube-scheduler counts a pod against its node from the moment it is assumed there; HAMi's
    # vgpu-node stands in for nodeName between Filter and Bind.
    node = (pod.get("spec") or {}).get("nodeName") or (alloc.node if alloc is not None else None)
    if node and phase not in TERMINAL_PHASES:
        set_pod_requests(state, key, node, pod_requests(pod))
    else:
        set_pod_requests(state, key, None, None)


def set_pod_requests(state: ClusterState, key: str, node: str | None, requests: Resources | None) -> None:
    """Count the pod's CPU, memory and slot on `node` (None: on no node)."""
    old = state.pod_requests.pop(key, None)
    if old is not None:
        left = state.requested[old[0]] - old[1]
        if left.pods <= 0:
            del state.requested[old[0]]
        else:
            state.requested[old[0]] = left
    if node is not None and requests is not None:
        state.pod_requests[key] = (node, requests)
        state.requested[node] = state.requested.get(node, Resources()) + requests


def add_pod(state: ClusterState, alloc: PodAllocation) -> None:
    if alloc.key in state.pods:
        remove_pod(state, alloc.key)
    state.pods[alloc.key] = alloc
    state.by_node.setdefault(alloc.node, set()).add(alloc.key)
    _count(state, alloc, +1)


def delete_pod(state: ClusterState, key: str) -> PodAllocation | None:
    """The pod is gone: its GPU shares and its CPU, memory and slot are given back."""
    set_pod_requests(state, key, None, None)
    return remove_pod(state, key)


def remove_pod(state: ClusterState, key: str) -> PodAllocation | None:
    """Take back the pod's GPU shares (its node-level requests stay: see :func:`delete_pod`)."""
    alloc = state.pods.pop(key, None)
    if alloc is None:
        return None
    keys = state.by_node.get(alloc.node)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del state.by_node[alloc.node]
    _count(state, alloc, -1)
    return alloc


def _count(state: ClusterState, alloc: PodAllocation, sign: int) -> None:
    """Add (sign=+1) or take back (-1) the pod's usage on its node's GPUs."""
    problems = [alloc.error] if alloc.error else []
    node = state.nodes.get(alloc.node)
    if node is None:
        if alloc.per_gpu:
            problems.append(f"allocated on unknown node {alloc.node}")
    else:
        for uuid, (slots, mem, cores) in alloc.per_gpu.items():
            usage = node.usage.get(uuid)
            if usage is None:
                problems.append(f"GPU {uuid} is not registered on node {node.name}")
                continue
            usage.used += sign * slots
            usage.usedmem += sign * mem
            usage.usedcores += sign * cores
            if sign > 0:
                node.pods[uuid].append(alloc.key)
            elif alloc.key in node.pods[uuid]:
                node.pods[uuid].remove(alloc.key)
    if sign > 0 and problems:
        state.problems[alloc.key] = "; ".join(problems)
    else:
        state.problems.pop(alloc.key, None)


def upsert_node(state: ClusterState, node: Mapping[str, Any]) -> NodeState:
    fresh = node_state(node)
    old = state.nodes.get(fresh.name)
    if old is not None and old.register_raw == fresh.register_raw:
        # Same GPU inventory (most node updates are heartbeats): keep the usage, refresh the rest.
        old.ready, old.unschedulable, old.cordoned = fresh.ready, fresh.unschedulable, fresh.cordoned
        old.labels, old.taints, old.allocatable = fresh.labels, fresh.taints, fresh.allocatable
        return old
    _recount_node(state, fresh.name, fresh)
    return fresh


def delete_node(state: ClusterState, name: str) -> None:
    _recount_node(state, name, None)


def _recount_node(state: ClusterState, name: str, replacement: NodeState | None) -> None:
    keys = list(state.by_node.get(name, ()))
    for k in keys:
        _count(state, state.pods[k], -1)
    if replacement is None:
        state.nodes.pop(name, None)
    else:
        state.nodes[name] = replacement
    for k in keys:
        _count(state, state.pods[k], +1)
