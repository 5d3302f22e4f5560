"""A pod's GPU request as HAMi resolves it, and the pod-wide device selectors.

Rules from HAMi v2.10.0 ``NvidiaGPUDevices.GenerateResourceRequests`` (``pkg/device/nvidia/device.go``):
- each value is read from limits, falling back to requests, and must be an integer
  (``Quantity.AsInt64``); a fractional quantity counts as absent;
- ``mem`` = ``nvidia.com/gpumem`` x ``memoryFactor``;
- ``pct`` = ``nvidia.com/gpumem-percentage``, clamped to 100, and ≤0 means unset (sentinel 101);
- neither given: ``mem = defaultMemory`` if that is non-zero, else ``pct = 100``;
- ``cores`` = ``nvidia.com/gpucores``, else ``defaultCores``.
HAMi's webhook (``NvidiaGPUDevices.MutateAdmission`` in ``pkg/device/nvidia/device.go``, v2.7+) adds
``nvidia.com/gpu: defaultGPUNum`` to a container whose *limits* ask only for memory/cores
(``mutateContainerResource``), and ``gpucores: 100`` when memory is exclusive
(``defaultExclusiveCoreIfNeeded``, mirrored by :func:`_exclusive_memory`); those are mutations of
the pod, applied with ``webhook=True`` when reading a pod *template* that has not been through
HAMi's admission yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.devices import default_kind
from hami_place_core.quantity import as_int64, value_ceil

# Every pod is read as the default vendor's (NVIDIA today); module constants, as they are read for
# every container of every pod.
_VENDOR = default_kind()
RES_GPU = _VENDOR.resource_count
RES_MEM = _VENDOR.resource_memory
RES_MEM_PCT = _VENDOR.resource_memory_percentage
RES_CORES = _VENDOR.resource_cores
HAMI_RESOURCES = _VENDOR.resources

PCT_UNSET = 101  # HAMi's internal "no percentage given" sentinel


@dataclass(frozen=True)
class HamiConfig:
    """The scheduler's device config; defaults are HAMi v2.10.0's chart (charts/hami/values.yaml)."""

    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1


DEFAULT_CONFIG = HamiConfig()


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """One container's request, per GPU it asks for."""

    nums: int
    memreq: int = 0  # MiB; 0 means "use the percentage"
    mem_percentage: int = PCT_UNSET
    coresreq: int = 0

    def memory_on(self, devmem: int) -> int:
        """MiB this request takes on a GPU of `devmem` MiB (HAMi ``computeMemreq``: gpumem wins)."""
        if self.memreq > 0:
            return self.memreq
        if self.mem_percentage != PCT_UNSET:
            return devmem * self.mem_percentage // 100
        return 0

    def describe(self) -> str:
        mem = (
            f"{self.memreq}MiB"
            if self.memreq
            else f"{self.mem_percentage}%"
            if self.mem_percentage != PCT_UNSET
            else "-"
        )
        return f"{self.nums}x(mem {mem}, cores {self.coresreq}%)"


@dataclass(frozen=True, slots=True)
class DeviceSelectors:
    """The pod-wide annotations HAMi's Fit consults for every device (``CheckUUID``/``CheckType``)."""

    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str] | None) -> DeviceSelectors:
        a = annotations or {}
        if not any(k in a for k in _SELECTOR_KEYS):
            return _NO_SELECTORS
        return cls(
            use_uuids=ann.use_list(a.get(_VENDOR.use_uuid)),
            nouse_uuids=ann.split_list(a.get(_VENDOR.nouse_uuid)),
            use_types=ann.use_list(a.get(_VENDOR.use_type)),
            nouse_types=ann.split_list(a.get(_VENDOR.nouse_type)),
        )

    def uuid_allowed(self, uuid: str) -> bool:
        # v2.10 CheckUUID: an empty list is no constraint; use- and nouse- both apply. A use-list
        # of separators only is ("",), which no UUID equals (annotations.use_list).
        if self.use_uuids and uuid not in self.use_uuids:
            return False
        return uuid not in self.nouse_uuids

    def type_allowed(self, gpu_type: str) -> bool:
        # CheckType (pkg/device/devices.go): case-insensitive substring match against the
        # registered type; a blank item matches nothing (see annotations.use_list).
        if not self.use_types and not self.nouse_types:
            return True
        upper = gpu_type.upper()
        if self.use_types and not any(t and t.upper() in upper for t in self.use_types):
            return False
        return not any(t and t.upper() in upper for t in self.nouse_types)


_SELECTOR_KEYS = _VENDOR.selector_keys
_NO_SELECTORS = DeviceSelectors()


@dataclass(frozen=True, slots=True)
class PodRequest:
    """Everything about a pod HAMi's Fit needs: per-container requests and selectors."""

    init: tuple[GpuRequest | None, ...]
    containers: tuple[GpuRequest | None, ...]
    selectors: DeviceSelectors = DeviceSelectors()

    @property
    def gpu_containers(self) -> tuple[GpuRequest, ...]:
        return tuple(r for r in self.containers if r is not None)

    @property
    def wants_gpu(self) -> bool:
        return any(r is not None for r in (*self.init, *self.containers))

    @property
    def max_gpus(self) -> int:
        return max((r.nums for r in (*self.init, *self.containers) if r is not None), default=0)


def _raw(resources: Mapping[str, Any] | None, name: str) -> Any:
    """The resource's value from limits, falling back to requests, as every HAMi reader does."""
    if not resources:
        return None
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    return limits.get(name) if name in limits else requests.get(name)


def _value(resources: Mapping[str, Any] | None, name: str) -> int | None:
    raw = _raw(resources, name)
    return None if raw is None else as_int64(raw)


_BOTH = ("limits", "requests")


def _present(resources: Mapping[str, Any] | None, name: str, sections: tuple[str, ...] = _BOTH) -> bool:
    """The resource is named at all (HAMi ``resourcePresent``), whatever its value."""
    return any(name in ((resources or {}).get(s) or {}) for s in sections)


def _webhook_gpu_num(resources: Mapping[str, Any] | None, config: HamiConfig) -> bool:
    """HAMi ``mutateContainerResource``: only *limits* of memory/cores, and no count, imply defaultGPUNum."""
    if _present(resources, RES_GPU, ("limits",)) or config.default_gpu_num <= 0:
        return False
    return any(_present(resources, r, ("limits",)) for r in (RES_CORES, RES_MEM, RES_MEM_PCT))


def _exclusive_memory(resources: Mapping[str, Any] | None, count_present: bool) -> bool:
    """HAMi ``defaultExclusiveCoreIfNeeded`` (``pkg/device/nvidia/device.go``): the webhook sets
    ``gpucores: 100`` when a container names a GPU count, names no cores, and either names a
    memory percentage whose ``Quantity.Value()`` is exactly 100 or names no memory at all.
    Presence decides, not the parsed value: a fractional or zero ``gpumem`` still counts as named.
    """
    if not count_present or _present(resources, RES_CORES):
        return False
    if _present(resources, RES_MEM_PCT):
        return value_ceil(_raw(resources, RES_MEM_PCT)) == 100
    return not _present(resources, RES_MEM)


def container_request(
    resources: Mapping[str, Any] | None, config: HamiConfig = DEFAULT_CONFIG, webhook: bool = False
) -> GpuRequest | None:
    nums = _value(resources, RES_GPU)
    injected = webhook and _webhook_gpu_num(resources, config)
    if injected:
        nums = config.default_gpu_num
    if nums is None or nums <= 0:
        return None
    mem = _value(resources, RES_MEM)
    memreq = (mem or 0) * config.memory_factor if mem and mem > 0 else 0
    pct = _value(resources, RES_MEM_PCT)
    mem_percentage = PCT_UNSET if pct is None or pct <= 0 else min(pct, 100)
    if mem_percentage == PCT_UNSET and memreq == 0:
        if config.default_memory:
            memreq = config.default_memory
        else:
            mem_percentage = 100
    cores = _value(resources, RES_CORES)
    if webhook and _exclusive_memory(resources, injected or _present(resources, RES_GPU)):
        cores = 100  # v2.7+ (#1354): an exclusive-memory container gets all the cores
    coresreq = cores if cores is not None else config.default_cores
    coresreq = min(max(coresreq, 0), 100)  # normalizeCoresreq clamps >100 (fit_checks.go)
    return GpuRequest(nums=nums, memreq=memreq, mem_percentage=mem_percentage, coresreq=coresreq)


def pod_request(pod: Mapping[str, Any], config: HamiConfig = DEFAULT_CONFIG, webhook: bool = False) -> PodRequest:
    """The request of a pod (or a pod template: pass webhook=True to apply HAMi's admission)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return PodRequest(
        init=tuple(container_request(c.get("resources"), config, webhook) for c in spec.get("initContainers") or ()),
        containers=tuple(container_request(c.get("resources"), config, webhook) for c in spec.get("containers") or ()),
        selectors=DeviceSelectors.from_annotations(meta.get("annotations")),
    )


def has_hami_resources(pod: Mapping[str, Any]) -> bool:
    """True if any container names a HAMi resource: HAMi's webhook would claim this pod."""
    spec = pod.get("spec") or {}
    for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        res = c.get("resources") or {}
        for section in (res.get("limits") or {}, res.get("requests") or {}):
            if any(name in section for name in HAMI_RESOURCES):
                return True
    return False
