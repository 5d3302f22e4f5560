"""HAMi's per-GPU Fit rules, so the CLI, the webhook and the planner judge a GPU as HAMi would.

Order and reason names follow HAMi v2.10.0: ``NvidiaGPUDevices.Fit`` in
``pkg/device/nvidia/device.go`` (health, cordon, type, then the card-check pipeline of
``fit_checks.go``: UUID, time-slicing count, memory, cores, exclusive, compute exhausted) and the
reason constants of ``pkg/device/common/common.go``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami_place_core.annotations import GpuDevice
from hami_place_core.devices import default_kind
from hami_place_core.requests import DeviceSelectors, GpuRequest, PodRequest

_VENDOR = default_kind()

CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"  # v2.10 hami.io/device-cordon; HAMi logs it, it has no constant
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"


def _bare(key: str) -> str:
    """`key` without its ``vendor/`` prefix: a reason names the use- key in full, then the nouse- key short."""
    return key.rpartition("/")[2]


REASON_TEXT = {
    CARD_NOT_HEALTH: "GPU is unhealthy",
    CARD_CORDONED: "GPU is cordoned (hami.io/device-cordon)",
    CARD_TYPE_MISMATCH: f"GPU type excluded by {_VENDOR.use_type} / {_bare(_VENDOR.nouse_type)}",
    CARD_UUID_MISMATCH: f"GPU excluded by {_VENDOR.use_uuid} / {_bare(_VENDOR.nouse_uuid)}",
    CARD_TIME_SLICING_EXHAUSTED: "all share slots of the GPU are taken",
    CARD_INSUFFICIENT_MEMORY: "not enough free GPU memory",
    CARD_INSUFFICIENT_CORE: "not enough free GPU cores",
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: "an exclusive (100% cores) request needs an unshared GPU",
    CARD_COMPUTE_UNITS_EXHAUSTED: "all cores of the GPU are taken",
    NODE_INSUFFICIENT_DEVICE: "not enough GPUs fit on the node",
}


class GpuUsage:
    """Mutable per-GPU usage, as HAMi's ``DeviceUsage`` keeps it (Used, Usedmem, Usedcores)."""

    __slots__ = ("used", "usedcores", "usedmem")

    def __init__(self, used: int = 0, usedmem: int = 0, usedcores: int = 0) -> None:
        self.used = used
        self.usedmem = usedmem
        self.usedcores = usedcores

    def copy(self) -> GpuUsage:
        return GpuUsage(self.used, self.usedmem, self.usedcores)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpuUsage) and (self.used, self.usedmem, self.usedcores) == (
            other.used,
            other.usedmem,
            other.usedcores,
        )

    def __repr__(self) -> str:
        return f"GpuUsage(used={self.used}, usedmem={self.usedmem}, usedcores={self.usedcores})"


EMPTY = GpuUsage()
NO_SELECTORS = DeviceSelectors()


def gpu_fit_reason(
    request: GpuRequest,
    gpu: GpuDevice,
    usage: GpuUsage = EMPTY,
    selectors: DeviceSelectors = NO_SELECTORS,
    cordoned: frozenset[str] | set[str] = frozenset(),
) -> str | None:
    """None if one GPU of `request` fits on `gpu` given `usage`, else HAMi's reason."""
    if not gpu.health:
        return CARD_NOT_HEALTH
    if gpu.uuid in cordoned:
        return CARD_CORDONED
    if not selectors.type_allowed(gpu.type):
        return CARD_TYPE_MISMATCH
    if not selectors.uuid_allowed(gpu.uuid):
        return CARD_UUID_MISMATCH
    if gpu.count <= usage.used:
        return CARD_TIME_SLICING_EXHAUSTED
    if gpu.devmem - usage.usedmem < request.memory_on(gpu.devmem):
        return CARD_INSUFFICIENT_MEMORY
    if gpu.devcore - usage.usedcores < request.coresreq:
        return CARD_INSUFFICIENT_CORE
    if gpu.devcore == 100 and request.coresreq == 100 and usage.used > 0:
        return EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if gpu.devcore != 0 and usage.usedcores == gpu.devcore and request.coresreq == 0:
        return CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def add_usage(usage: GpuUsage, request: GpuRequest, gpu: GpuDevice) -> None:
    """HAMi ``AddResourceUsage``: one slot, the resolved memory and the cores."""
    usage.used += 1
    usage.usedmem += request.memory_on(gpu.devmem)
    usage.usedcores += request.coresreq


@dataclass(frozen=True)
class PodFit:
    """Outcome of fitting a whole pod on a set of candidate GPUs."""

    ok: bool
    # container position -> UUIDs picked for it (only when ok)
    assignment: tuple[tuple[str, ...], ...] = ()
    # UUID -> reason, for GPUs that did not fit the first container that could not be placed
    reasons: tuple[tuple[str, str], ...] = ()

    def message(self, names: dict[str, str] | None = None) -> str:
        if self.ok:
            return "fits"
        names = names or {}
        parts = [f"{names.get(u, u)}: {REASON_TEXT.get(r, r)} ({r})" for u, r in self.reasons]
        return "; ".join(parts) or REASON_TEXT[NODE_INSUFFICIENT_DEVICE]


def fit_pod(
    request: PodRequest,
    gpus: Iterable[GpuDevice],
    usage: dict[str, GpuUsage],
    cordoned: frozenset[str] | set[str] = frozenset(),
    exact: bool = False,
) -> PodFit:
    """Place each GPU container on distinct GPUs among `gpus`, accumulating usage as HAMi does.

    With exact=True every container must take all of `gpus` (a pinned placement: use-gpuuuid
    lists exactly the target and nvidia.com/gpu equals its size). Usage is not modified.
    """
    candidates = list(gpus)
    scratch = {g.uuid: (usage.get(g.uuid) or GpuUsage()).copy() for g in candidates}
    assignment: list[tuple[str, ...]] = []
    for req in request.gpu_containers:
        nums = len(candidates) if exact else req.nums
        fitting, reasons = [], []
        for g in candidates:
            reason = gpu_fit_reason(req, g, scratch[g.uuid], request.selectors, cordoned)
            if reason is None:
                fitting.append(g)
            else:
                reasons.append((g.uuid, reason))
        if len(fitting) < nums or (exact and reasons):
            return PodFit(False, reasons=tuple(reasons) or ((NODE_INSUFFICIENT_DEVICE, NODE_INSUFFICIENT_DEVICE),))
        # Binpack within the candidates: prefer the most used GPUs, as the planner wants to keep
        # whole GPUs free. (HAMi's own default GPU policy is spread; pinning removes the choice.)
        fitting.sort(key=lambda g: (-scratch[g.uuid].usedmem, g.index))
        chosen = fitting[:nums]
        for g in chosen:
            add_usage(scratch[g.uuid], req, g)
        assignment.append(tuple(g.uuid for g in chosen))
    return PodFit(True, assignment=tuple(assignment))
