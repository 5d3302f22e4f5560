"""Fake GPU nodes that look like HAMi v2.10 nodes to anything reading the API.

What HAMi's device plugin would write is written here by hand:
- ``hami.io/node-nvidia-register``: the v2.8+ JSON array (HAMi ``pkg/device/devices.go``
  ``MarshalNodeDevices``), one entry per GPU with ``id`` (UUID), ``index`` (NVML index), ``count``
  (deviceSplitCount, 10 by default), ``devmem`` (MiB), ``devcore`` (100), ``type``, ``numa``,
  ``mode`` and ``health``;
- allocatable ``nvidia.com/gpu`` = GPUs x split count (the device plugin advertises one vGPU per
  split), plus ``nvidia.com/gpumem``/``gpucores``/``gpumem-percentage`` as HAMi's
  mock-device-plugin would (``internal/pkg/api/device/nvidia/device.go``).
kwok then plays the kubelet: it keeps the node Ready and runs the pods bound to it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from hami_place_core.annotations import NODE_REGISTER, GpuDevice, encode_register_json

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class GpuModel:
    # `type` as HAMi's plugin writes it: NVML's name, prefixed "NVIDIA-" only when it does not
    # already start with NVIDIA (pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go).
    type: str
    devmem_mib: int


A100_80G = GpuModel("NVIDIA A100-SXM4-80GB", 81920)
V100_32G = GpuModel("NVIDIA-Tesla V100-SXM2-32GB", 32768)
T4 = GpuModel("NVIDIA-Tesla T4", 15360)
MODELS = {"a100": A100_80G, "v100": V100_32G, "t4": T4}


@dataclass
class NodeSpec:
    name: str
    gpus: int = 4
    model: GpuModel = A100_80G
    split_count: int = 10
    unhealthy_indices: frozenset[int] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)
    # Allocatable CPU and memory: kube-scheduler's NodeResourcesFit filters on them before HAMi's
    # extender sees the node, so a replay of a trace's nodes (testbed/data/openb.py) sets its own.
    cpu_milli: int = 64000
    memory_mib: int = 512 * 1024
    # Per-GPU NUMA node; None: the first half of the GPUs on NUMA 0, the rest on 1 (a 2-socket host).
    numa: tuple[int, ...] | None = None

    def gpu_uuid(self, index: int) -> str:
        # Deterministic, so tests and docs can name a GPU by node and index.
        return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.name}/{index}"))

    def gpu_numa(self, index: int) -> int:
        if self.numa is not None:
            return self.numa[index]
        return 0 if index < max(1, self.gpus // 2) else 1

    def devices(self) -> list[GpuDevice]:
        return [
            GpuDevice(
                uuid=self.gpu_uuid(i),
                index=i,
                count=self.split_count,
                devmem=self.model.devmem_mib,
                devcore=100,
                type=self.model.type,
                numa=self.gpu_numa(i),
                mode="hami-core",
                health=i not in self.unhealthy_indices,
            )
            for i in range(self.gpus)
        ]

    def manifest(self) -> dict[str, Any]:
        devices = self.devices()
        healthy = [d for d in devices if d.health]
        resources = {
            "cpu": _quantity(self.cpu_milli, 1000, "m", ""),
            "memory": _quantity(self.memory_mib, 1024, "Mi", "Gi"),
            "pods": "110",
            "ephemeral-storage": "1Ti",
            "nvidia.com/gpu": str(len(healthy) * self.split_count),
            "nvidia.com/gpumem": str(sum(d.devmem for d in healthy)),
            "nvidia.com/gpucores": str(100 * len(healthy)),
            "nvidia.com/gpumem-percentage": str(100 * len(healthy)),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "annotations": {
                    KWOK_ANNOTATION: "fake",
                    NODE_REGISTER: encode_register_json(devices),
                },
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    "gpu": "on",  # the label HAMi's device-plugin DaemonSet selects on
                    **self.labels,
                },
            },
            "spec": {},
            "status": {
                "capacity": resources,
                "allocatable": resources,
            },
        }


def _quantity(value: int, per_unit: int, small: str, large: str) -> str:
    # The larger unit when it is exact: the default node keeps reading "64" CPUs and "512Gi".
    return f"{value // per_unit}{large}" if value % per_unit == 0 else f"{value}{small}"


def uniform_nodes(count: int, gpus: int = 4, model: GpuModel = A100_80G, prefix: str = "gpu-node") -> list[NodeSpec]:
    return [NodeSpec(name=f"{prefix}-{i}", gpus=gpus, model=model) for i in range(1, count + 1)]
