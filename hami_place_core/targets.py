"""``gpuDevices`` entries of a HamiPodPlacement: ``gpu-N`` or ``gpu-N/P``, resolved on a node.

``N`` is the GPU's NVML ``index`` from the node's register annotation (never its position in the
list: the device plugin builds that list from a Go map, so its order is arbitrary). ``/P`` (1..100)
means the pod gets ``nvidia.com/gpumem-percentage: P`` and ``nvidia.com/gpucores: P``.

All entries of one placement must share the same P (or all have none): HAMi applies one request
to all of a container's GPUs, so per-GPU percentages cannot be expressed (HAMi
``GenerateResourceRequests`` returns a single ContainerDeviceRequest per container).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hami_place_core.annotations import GpuDevice
from hami_place_core.devices import default_kind
from hami_place_core.state import NodeState

_VENDOR = default_kind()

ENTRY_RE = re.compile(r"^gpu-(0|[1-9][0-9]{0,2})(?:/([1-9][0-9]?|100))?$")
MAX_ENTRIES = 16


class TargetError(ValueError):
    """A gpuDevices list that is malformed or does not resolve on the node; message is user-facing."""


@dataclass(frozen=True)
class GpuTarget:
    index: int
    percent: int | None  # None = whole GPU

    def __str__(self) -> str:
        return f"gpu-{self.index}" + (f"/{self.percent}" if self.percent is not None else "")


@dataclass(frozen=True)
class TargetSpec:
    entries: tuple[GpuTarget, ...]

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(e.index for e in self.entries)

    @property
    def percent(self) -> int | None:
        return self.entries[0].percent if self.entries else None

    def resources(self) -> dict[str, str]:
        """The HAMi resources the pinned pod must request, per container that uses GPUs."""
        out = {_VENDOR.resource_count: str(len(self.entries))}
        if self.percent is not None:
            out[_VENDOR.resource_memory_percentage] = str(self.percent)
            out[_VENDOR.resource_cores] = str(self.percent)
        return out


def parse_entry(text: object) -> GpuTarget:
    if not isinstance(text, str):
        raise TargetError(f"gpuDevices entry {text!r} must be a string like gpu-0 or gpu-0/50")
    m = ENTRY_RE.match(text)
    if not m:
        raise TargetError(
            f"gpuDevices entry {text!r} is not gpu-N or gpu-N/P (N a GPU index 0-999, P a percentage 1-100)"
        )
    return GpuTarget(int(m.group(1)), int(m.group(2)) if m.group(2) else None)


def parse_targets(entries: object) -> TargetSpec:
    if not isinstance(entries, list | tuple) or not entries:
        raise TargetError("gpuDevices must list 1 to 16 entries like gpu-0 or gpu-0/50")
    if len(entries) > MAX_ENTRIES:
        raise TargetError(f"gpuDevices has {len(entries)} entries; at most {MAX_ENTRIES} are allowed")
    parsed = tuple(parse_entry(e) for e in entries)
    seen: set[int] = set()
    for t in parsed:
        if t.index in seen:
            raise TargetError(f"gpuDevices names gpu-{t.index} twice; each GPU can be listed once")
        seen.add(t.index)
    percents = {t.percent for t in parsed}
    if len(percents) > 1:
        shown = ", ".join(sorted(str(t) for t in parsed))
        raise TargetError(
            f"gpuDevices entries must all share one percentage (HAMi applies one request to all of a "
            f"container's GPUs): got {shown}"
        )
    return TargetSpec(parsed)


def resolve(spec: TargetSpec, node: NodeState) -> tuple[GpuDevice, ...]:
    """The node's GPUs for the spec, by NVML index; raises TargetError with what is wrong."""
    if not node.parseable:
        raise TargetError(f"node {node.name} has no readable HAMi GPU inventory: {node.error}")
    if node.error:
        # A duplicate index or UUID, or an entry HAMi skips: gpu-N (or the pin's UUID) could name
        # another GPU than the one meant, so nothing on the node is resolved until it is fixed.
        raise TargetError(
            f"node {node.name}'s HAMi GPU inventory is inconsistent, so gpu-N is not resolved: {node.error}"
        )
    if not node.register.has_index:
        raise TargetError(
            f"node {node.name} registers GPUs in the ≤v2.4 format, which has no GPU index, so gpu-N "
            f"cannot be resolved; upgrade HAMi on that node"
        )
    gpus, missing = [], []
    for t in spec.entries:
        g = node.gpu(t.index)
        if g is None:
            missing.append(str(t.index))
        else:
            gpus.append(g)
    if missing:
        have = ", ".join(str(d.index) for d in node.devices) or "none"
        raise TargetError(f"node {node.name} has no GPU with index {', '.join(missing)} (it has: {have})")
    return tuple(gpus)
