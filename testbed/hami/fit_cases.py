"""Seeded cases for the differential Fit test (issue 21): one pod and the few nodes it may land on.

Each case is plain data: nodes as HAMi's device plugin registers them (the v2.8+ JSON register
annotation with split counts, types, NUMA, health, sometimes in shuffled registration order, and
``hami.io/device-cordon`` set before HAMi first registers the node), pods HAMi already placed there
(``hami.io/vgpu-node`` + ``hami.io/vgpu-devices-allocated``, bound by ``nodeName`` so no scheduler
touches them) and the pod to place, as a user submits it (before HAMi's webhook). The same seed
always gives the same cases; ``features`` names what a case exercises so a unit test can check
that every feature of the issue is covered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.annotations import NVIDIA_DEVICE_TYPE, ContainerDevice, GpuDevice
from testbed.hami.simulate import gpu_uuid

# (registered type, MiB): types as HAMi's plugin writes them (testbed/data/gpu_nodes.py says why).
MODELS = (
    ("NVIDIA A100-SXM4-80GB", 81920),
    ("NVIDIA-Tesla V100-SXM2-32GB", 32768),
    ("NVIDIA-Tesla T4", 15360),
    ("NVIDIA H100 80GB HBM3", 81559),
)
TYPE_WORDS = ("A100", "v100", "T4", "h100", "Tesla", "SXM")
SPLIT_COUNTS = (1, 2, 3, 4, 10)
MEM_MIB = (1024, 2048, 4000, 8192, 10000, 16384, 20000, 40000)
MEM_PCT = (0, 10, 25, 30, 50, 75, 100)
CORES = (0, 10, 25, 30, 50, 70, 100)
CASE_LABEL = "hami-place/fit-case"

# Everything issue 21 item 3 names, so tests/unit/test_fit_cases.py can demand each is covered.
FEATURES = (
    "gpus-1",
    "gpus-2",
    "gpus-3",
    "gpus-4",
    "gpumem",
    "gpumem-percentage",
    "gpucores",
    "use-gputype",
    "nouse-gputype",
    "use-gpuuuid",
    "nouse-gpuuuid",
    "separators-only",
    "split-count",
    "unhealthy",
    "cordoned",
    "preloaded",
    "multi-container",
    "no-gpu-container",
    "count-from-webhook",
    "mixed-types",
    "shuffled-registration",
    "gpu-policy-annotation",
    "node-policy-annotation",
)


@dataclass(frozen=True)
class NodeCase:
    name: str
    devices: tuple[GpuDevice, ...]  # in registration order
    cordoned: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preloaded:
    name: str
    node: str
    devices: tuple[ContainerDevice, ...]


@dataclass(frozen=True)
class FitCase:
    seed: int
    number: int
    nodes: tuple[NodeCase, ...]
    preloaded: tuple[Preloaded, ...]
    containers: tuple[dict[str, str] | None, ...]  # limits per container; None: no HAMi resource
    annotations: dict[str, str] = field(default_factory=dict)
    features: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return f"fd{self.seed}-{self.number}"

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]


# ---- generation ---------------------------------------------------------------------------------
def _node(rng: random.Random, name: str, features: set[str]) -> NodeCase:
    n = rng.choice((1, 2, 2, 4, 4, 4, 6, 8))
    split = rng.choice(SPLIT_COUNTS) if rng.random() < 0.5 else 10
    mixed = rng.random() < 0.1
    model = rng.choice(MODELS)
    numa_split = rng.random() < 0.5
    devices = []
    for i in range(n):
        type_, mem = rng.choice(MODELS) if mixed else model
        healthy = rng.random() >= 0.1
        devices.append(
            GpuDevice(gpu_uuid(name, i), i, split, mem, 100, type_, int(numa_split and i >= n // 2), health=healthy)
        )
        if not healthy:
            features.add("unhealthy")
    if split != 10:
        features.add("split-count")
    if mixed and len({d.type for d in devices}) > 1:
        features.add("mixed-types")
    if n > 1 and rng.random() < 0.2:
        rng.shuffle(devices)
        features.add("shuffled-registration")
    cordoned: tuple[str, ...] = ()
    if rng.random() < 0.12:
        cordoned = tuple(d.uuid for d in rng.sample(devices, rng.randint(1, max(1, n // 2))))
        features.add("cordoned")
    return NodeCase(name, tuple(devices), cordoned)


def _preload(rng: random.Random, node: NodeCase, prefix: str) -> list[Preloaded]:
    """Pods HAMi placed earlier: each share fits what is left (slots, memory, cores)."""
    left = {d.uuid: [d.count, d.devmem, d.devcore] for d in node.devices}
    out = []
    for k in range(rng.choice((0, 0, 1, 2, 3, 5))):
        want = rng.choice((1, 1, 1, 2))
        mem_pct, cores = rng.choice((10, 25, 50, 100)), rng.choice((0, 10, 25, 50, 100))
        picked: list[ContainerDevice] = []
        for d in rng.sample(node.devices, len(node.devices)):
            mem, room = d.devmem * mem_pct // 100, left[d.uuid]
            if room[0] >= 1 and room[1] >= mem and room[2] >= cores and len(picked) < want:
                room[0], room[1], room[2] = room[0] - 1, room[1] - mem, room[2] - cores
                picked.append(ContainerDevice(d.uuid, NVIDIA_DEVICE_TYPE, mem, cores))
        if picked:
            out.append(Preloaded(f"{prefix}-pre{k}", node.name, tuple(picked)))
    return out


def _container(rng: random.Random, features: set[str]) -> dict[str, str] | None:
    if rng.random() < 0.12:
        features.add("no-gpu-container")
        return None
    limits: dict[str, str] = {}
    nums = rng.choice((1, 1, 1, 2, 2, 3, 4))
    if rng.random() < 0.1:
        features.add("count-from-webhook")  # HAMi's webhook adds nvidia.com/gpu: defaultGPUNum
        nums = 1
    else:
        limits["nvidia.com/gpu"] = str(nums)
    features.add(f"gpus-{nums}")
    memory = rng.random()
    if memory < 0.4:
        limits["nvidia.com/gpumem"] = str(rng.choice(MEM_MIB))
        features.add("gpumem")
    elif memory < 0.75:
        limits["nvidia.com/gpumem-percentage"] = str(rng.choice(MEM_PCT))
        features.add("gpumem-percentage")
    elif memory < 0.82:
        limits["nvidia.com/gpumem"] = str(rng.choice(MEM_MIB))
        limits["nvidia.com/gpumem-percentage"] = str(rng.choice(MEM_PCT))
        features.update(("gpumem", "gpumem-percentage"))
    if rng.random() < 0.7 or not limits:
        limits["nvidia.com/gpucores"] = str(rng.choice(CORES))
        features.add("gpucores")
    return limits


def _annotations(rng: random.Random, nodes: list[NodeCase], features: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    uuids = [d.uuid for n in nodes for d in n.devices]
    if rng.random() < 0.15:
        out[ann.USE_GPU_TYPE] = ",".join(rng.sample(TYPE_WORDS, rng.randint(1, 2)))
        features.add("use-gputype")
    if rng.random() < 0.08:
        out[ann.NOUSE_GPU_TYPE] = rng.choice(TYPE_WORDS)
        features.add("nouse-gputype")
    if rng.random() < 0.15:
        out[ann.USE_GPU_UUID] = ", ".join(rng.sample(uuids, min(len(uuids), rng.randint(1, 4))))
        features.add("use-gpuuuid")
    if rng.random() < 0.08:
        out[ann.NOUSE_GPU_UUID] = ",".join(rng.sample(uuids, 1))
        features.add("nouse-gpuuuid")
    if rng.random() < 0.04:
        out[rng.choice((ann.USE_GPU_UUID, ann.USE_GPU_TYPE))] = rng.choice((",", " , ", ",,"))
        features.add("separators-only")
    if rng.random() < 0.3:
        out[ann.POD_GPU_SCHEDULER_POLICY] = rng.choice(("binpack", "binpack", "spread"))
        features.add("gpu-policy-annotation")
    if rng.random() < 0.25:
        out[ann.POD_NODE_SCHEDULER_POLICY] = rng.choice(("spread", "spread", "binpack"))
        features.add("node-policy-annotation")
    return out


def make_case(seed: int, number: int) -> FitCase:
    rng = random.Random(f"{seed}/{number}")  # noqa: S311 - reproducible test data, not secrets
    features: set[str] = set()
    prefix = f"fd{seed}-{number}"
    nodes = [_node(rng, f"{prefix}-n{i}", features) for i in range(rng.choice((1, 2, 2, 3)))]
    preloaded = [p for n in nodes for p in _preload(rng, n, f"{prefix}-{n.name[-2:]}")]
    if preloaded:
        features.add("preloaded")
    containers = [_container(rng, features) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    if all(c is None for c in containers):
        containers[0] = {"nvidia.com/gpu": "1"}
        features.add("gpus-1")
    if len(containers) > 1:
        features.add("multi-container")
    annotations = _annotations(rng, nodes, features)
    return FitCase(seed, number, tuple(nodes), tuple(preloaded), tuple(containers), annotations, frozenset(features))


def generate(seed: int, count: int) -> list[FitCase]:
    return [make_case(seed, i) for i in range(count)]


# ---- manifests ----------------------------------------------------------------------------------
# HAMi's handshake (pkg/device/devices.go CheckHealth): a "Requesting_" value whose time does not
# parse counts as a healthy, answered handshake. Without it HAMi's register loop reads and patches
# the node once per vendor that has a handshake (NVIDIA, and Hygon's DCU is configured too), which
# its client-side rate limit makes cost about 2 s per node. The keys are the vendors'
# HandshakeAnnos constants (pkg/device/*/device.go).
HANDSHAKES = (
    "hami.io/node-handshake",
    "hami.io/node-handshake-dcu",
    "hami.io/node-handshake-ascend",
    "hami.io/node-handshake-biren",
    "hami.io/node-handshake-va",
    "hami.io/node-handshake-xpu",
)
HANDSHAKE_VALUE = "Requesting_fit-probe"


def node_manifest(case: FitCase, node: NodeCase) -> dict[str, Any]:
    """The Node as created: no kwok (no kubelet, nobody schedules onto it), GPUs as registered.

    Allocatable ``nvidia.com/gpu`` counts every GPU's slots: HAMi registers a node only while it is
    non-zero (``NvidiaGPUDevices.CheckHealth``), and Fit never reads it.
    """
    annotations = {ann.NODE_REGISTER: ann.encode_register_json(node.devices)}
    annotations.update(dict.fromkeys(HANDSHAKES, HANDSHAKE_VALUE))
    if node.cordoned:
        annotations[ann.NODE_DEVICE_CORDON] = ",".join(node.cordoned)
    slots = sum(d.count for d in node.devices)
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(slots)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": {CASE_LABEL: case.name, "gpu": "on"}, "annotations": annotations},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def preloaded_manifest(case: FitCase, pod: Preloaded) -> dict[str, Any]:
    """A pod HAMi placed before: bound by nodeName, so no scheduler looks at it again."""
    encoded = ann.encode_pod_devices((pod.devices,))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "labels": {CASE_LABEL: case.name, ann.WEBHOOK_IGNORE_LABEL: "ignore"},
            "annotations": {
                ann.POD_VGPU_NODE: pod.node,
                ann.POD_VGPU_TIME: "1764633600",
                ann.POD_DEVICES_ALLOCATED: encoded,
                ann.POD_DEVICES_TO_ALLOCATE: encoded,
                ann.POD_BIND_PHASE: "success",
            },
        },
        "spec": {"nodeName": pod.node, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }


# A node selector no node matches: kube-scheduler never calls HAMi for this pod; the probe does.
UNSCHEDULABLE_SELECTOR = {"hami-place/fit-probe": "never"}


def pod_manifest(case: FitCase) -> dict[str, Any]:
    """The pod to place, as submitted (HAMi's webhook mutates it on create)."""
    containers = []
    for i, limits in enumerate(case.containers):
        c: dict[str, Any] = {"name": f"c{i}", "image": "registry.k8s.io/pause:3.10"}
        if limits is not None:
            c["resources"] = {"limits": dict(limits)}
        containers.append(c)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": case.name, "labels": {CASE_LABEL: case.name}, "annotations": dict(case.annotations)},
        "spec": {"nodeSelector": dict(UNSCHEDULABLE_SELECTOR), "containers": containers},
    }
