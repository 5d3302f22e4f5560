"""Every HAMi annotation hami-place reads or writes: the keys and the codecs, in one place.

Nothing else in the code base splits or joins a HAMi annotation string. Decoders never raise:
they return the decoded value together with a precise error for whatever they could not read,
so one garbage annotation never hides the rest of the cluster.

Sources (Project-HAMi/HAMi; v2.10.0 = 4707fb02c91c unless stated):
- register annotation: ``pkg/device/nvidia/device.go`` (``RegisterAnnos``), JSON codec
  ``MarshalNodeDevices``/``UnMarshalNodeDevices`` in ``pkg/device/devices.go`` (v2.8+); legacy
  codec ``EncodeNodeDevices``/``DecodeNodeDevices`` in the same file (9 fields, v2.5-v2.7) and
  ``pkg/util/util.go`` at v2.4.0 (7 fields, no index).
- pod device annotations: ``EncodeContainerDevices``/``EncodePodSingleDevice``/``DecodePodDevices``
  in ``pkg/device/devices.go``; written by ``Filter`` in ``pkg/scheduler/scheduler.go``.
- selection annotations: ``GPUUseUUID``/``GPUNoUseUUID``/``GPUUseType``/``GPUNoUseType`` in
  ``pkg/device/nvidia/device.go``; ``CheckUUID``/``CheckType`` in ``pkg/device/devices.go``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

# ---- keys -------------------------------------------------------------------------------------
NODE_REGISTER = "hami.io/node-nvidia-register"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_LOCK = "hami.io/mutex.lock"
NODE_DEVICE_CORDON = "hami.io/device-cordon"  # v2.10+: comma-separated UUIDs

POD_VGPU_NODE = "hami.io/vgpu-node"
POD_VGPU_TIME = "hami.io/vgpu-time"
POD_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
POD_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
POD_BIND_PHASE = "hami.io/bind-phase"
POD_GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
POD_NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"

USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"

# hami-place's own pod annotation: "false" keeps the defragmentation planner from moving the pod
# (any other value, or none, allows it). Read by hami_place_core.planning.
POD_DEFRAG = "scheduling.hami.placement.com/defrag"

# Pod annotations the domain model reads (snapshots and the agent's cache keep these, drop the rest).
MODEL_POD_ANNOTATIONS = (
    POD_VGPU_NODE,
    POD_DEVICES_ALLOCATED,
    POD_BIND_PHASE,
    USE_GPU_UUID,
    NOUSE_GPU_UUID,
    USE_GPU_TYPE,
    NOUSE_GPU_TYPE,
    POD_GPU_SCHEDULER_POLICY,
    POD_NODE_SCHEDULER_POLICY,
    POD_DEFRAG,
)

WEBHOOK_IGNORE_LABEL = "hami.io/webhook"  # value "ignore" opts a namespace/object out

# Device-type keyword HAMi writes as the second field of each pod device entry.
NVIDIA_DEVICE_TYPE = "NVIDIA"

RegisterFormat = Literal["json", "legacy-9", "legacy-7", "absent", "invalid"]


# ---- node register annotation -----------------------------------------------------------------
@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU as the HAMi device plugin registers it."""

    uuid: str
    index: int
    count: int  # split count: how many pods may share it
    devmem: int  # MiB, already x deviceMemoryScaling
    devcore: int  # 100 x deviceCoreScaling
    type: str
    numa: int = 0
    mode: str = "hami-core"
    health: bool = False


@dataclass(frozen=True)
class RegisterDecoding:
    devices: tuple[GpuDevice, ...] = ()
    format: RegisterFormat = "absent"
    error: str | None = None
    # Entries that could not be read, with the reason.
    skipped: tuple[str, ...] = field(default_factory=tuple)

    @property
    def has_index(self) -> bool:
        """≤v2.4 nodes carry no NVML index, so `gpu-N` cannot be resolved reliably on them."""
        return self.format in ("json", "legacy-9")


def _as_int(value: Any, name: str) -> int:
    # JSON numbers for int32 fields; bool is an int subclass in Python but never valid here.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {json.dumps(value)[:40]}")
    return value


def _device_from_json(entry: Any, pos: int) -> GpuDevice:
    if not isinstance(entry, dict):
        raise ValueError(f"entry {pos} is not an object")
    uuid = entry.get("id", "")
    if not isinstance(uuid, str) or not uuid:
        raise ValueError(f"entry {pos} has no id")
    health = entry.get("health", False)  # omitempty: a missing health means false (unhealthy)
    if not isinstance(health, bool):
        raise ValueError(f"entry {pos} ({uuid}): health must be a boolean")
    type_ = entry.get("type", "")
    mode = entry.get("mode", "") or "hami-core"
    if not isinstance(type_, str) or not isinstance(mode, str):
        raise ValueError(f"entry {pos} ({uuid}): type and mode must be strings")
    return GpuDevice(
        uuid=uuid,
        index=_as_int(entry.get("index", 0), f"entry {pos} ({uuid}): index"),
        count=_as_int(entry.get("count", 0), f"entry {pos} ({uuid}): count"),
        devmem=_as_int(entry.get("devmem", 0), f"entry {pos} ({uuid}): devmem"),
        devcore=_as_int(entry.get("devcore", 0), f"entry {pos} ({uuid}): devcore"),
        type=type_,
        numa=_as_int(entry.get("numa", 0), f"entry {pos} ({uuid}): numa"),
        mode=mode,
        health=health,
    )


def _parse_bool(text: str) -> bool:
    # Go's strconv.ParseBool, which the legacy decoder uses.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"health {text!r} is not a boolean")


def _device_from_legacy(fields: list[str], pos: int) -> GpuDevice:
    try:
        common = dict(
            uuid=fields[0],
            count=int(fields[1]),
            devmem=int(fields[2]),
            devcore=int(fields[3]),
            type=fields[4],
            numa=int(fields[5]),
            health=_parse_bool(fields[6]),
        )
    except ValueError as e:
        raise ValueError(f"entry {pos} ({fields[0][:40]}): {e}") from None
    if not common["uuid"]:
        raise ValueError(f"entry {pos} has no UUID")
    if len(fields) == 9:
        try:
            index = int(fields[7])
        except ValueError:
            raise ValueError(f"entry {pos} ({fields[0][:40]}): index {fields[7][:20]!r} is not an integer") from None
        return GpuDevice(index=index, mode=fields[8] or "hami-core", **common)  # type: ignore[arg-type]
    # The 7-field format has no index; HAMi's decoder defaults it to 0 and mode to hami-core.
    return GpuDevice(index=0, mode="hami-core", **common)  # type: ignore[arg-type]


def decode_register(value: str | None) -> RegisterDecoding:
    """Decode ``hami.io/node-nvidia-register`` in any format HAMi v2.4-v2.10 writes.

    Like HAMi-WebUI and mock-device-plugin, try JSON first (v2.8+) and fall back to the legacy
    colon-terminated list (v2.5-v2.7: 9 fields; ≤v2.4: 7 fields).
    """
    if value is None or not value.strip():
        return RegisterDecoding(format="absent", error="node has no hami.io/node-nvidia-register annotation")
    text = value.strip()
    if text.startswith("["):
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as e:
            return RegisterDecoding(format="invalid", error=f"register annotation is not valid JSON: {e}")
        if not isinstance(raw, list):
            return RegisterDecoding(format="invalid", error="register annotation JSON is not a list")
        devices, skipped = [], []
        for pos, entry in enumerate(raw):
            try:
                devices.append(_device_from_json(entry, pos))
            except ValueError as e:
                skipped.append(str(e))
        return _finish(devices, skipped, "json")
    devices, skipped = [], []
    fmt: RegisterFormat = "legacy-9"
    for pos, chunk in enumerate(c for c in text.split(":") if c.strip()):
        fields = chunk.strip().split(",")
        if len(fields) not in (7, 9):
            skipped.append(f"entry {pos} has {len(fields)} fields, expected 9 (v2.5-v2.7) or 7 (≤v2.4)")
            continue
        if len(fields) == 7:
            fmt = "legacy-7"
        try:
            devices.append(_device_from_legacy(fields, pos))
        except ValueError as e:
            skipped.append(str(e))
    return _finish(devices, skipped, fmt)


def _finish(devices: list[GpuDevice], skipped: list[str], fmt: RegisterFormat) -> RegisterDecoding:
    if skipped:
        # HAMi unmarshals the whole value or nothing (a Go decode error drops every device of the
        # node), so one unreadable entry makes the node unusable for HAMi: say so, keep the reasons.
        n = len(skipped)
        return RegisterDecoding(
            format="invalid",
            error=f"{n} unreadable entr{'y' if n == 1 else 'ies'} (HAMi ignores the whole node): {skipped[0]}",
            skipped=tuple(skipped),
        )
    error = None
    indices = [d.index for d in devices]
    if fmt != "legacy-7" and len(set(indices)) != len(indices):
        dupes = sorted({i for i in indices if indices.count(i) > 1})
        error = f"duplicate GPU index {dupes}: gpu-N cannot be resolved on this node"
    uuids = [d.uuid for d in devices]
    if len(set(uuids)) != len(uuids):
        error = "duplicate GPU UUID in the register annotation"
    return RegisterDecoding(devices=tuple(devices), format=fmt, error=error)


def encode_register_json(devices: list[GpuDevice] | tuple[GpuDevice, ...]) -> str:
    """The v2.8+ encoding: omitempty drops zero values, exactly as Go's json does."""
    out = []
    for d in devices:
        entry: dict[str, Any] = {
            "id": d.uuid,
            "index": d.index,
            "count": d.count,
            "devmem": d.devmem,
            "devcore": d.devcore,
            "type": d.type,
            "numa": d.numa,
            "mode": d.mode,
            "health": d.health,
        }
        out.append({k: v for k, v in entry.items() if v not in (0, "", False)})
    return json.dumps(out, separators=(",", ":"))


def encode_register_legacy(devices: list[GpuDevice] | tuple[GpuDevice, ...], fields: int = 9) -> str:
    """The pre-v2.8 encodings (9 fields for v2.5-v2.7, 7 for ≤v2.4)."""
    parts = []
    for d in devices:
        base = [d.uuid, str(d.count), str(d.devmem), str(d.devcore), d.type, str(d.numa), str(d.health).lower()]
        if fields == 9:
            base += [str(d.index), d.mode]
        parts.append(",".join(base) + ":")
    return "".join(parts)


# ---- pod device annotations -------------------------------------------------------------------
@dataclass(frozen=True)
class ContainerDevice:
    """One GPU share held by one container: ``UUID,NVIDIA,<usedmem MiB>,<usedcores>``."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int


@dataclass(frozen=True)
class PodDevicesDecoding:
    containers: tuple[tuple[ContainerDevice, ...], ...] = ()
    error: str | None = None


def decode_pod_devices(value: str | None) -> PodDevicesDecoding:
    """Decode ``hami.io/vgpu-devices-allocated``: containers end with ``;``, devices with ``:``.

    Containers keep their pod order (since v2.9.0 init containers come first) and containers
    without GPUs keep an empty segment, so positions line up with the pod spec.
    """
    if value is None or value == "":
        return PodDevicesDecoding()
    segments = value.split(";")
    # A well-formed value ends with ";": the split leaves one empty tail that is not a container.
    if segments and segments[-1] == "":
        segments = segments[:-1]
    containers: list[tuple[ContainerDevice, ...]] = []
    errors: list[str] = []
    for ci, seg in enumerate(segments):
        devs: list[ContainerDevice] = []
        for entry in seg.split(":"):
            if not entry.strip():
                continue
            fields = entry.split(",")
            if len(fields) < 4:
                errors.append(f"container {ci}: device entry {entry[:60]!r} has {len(fields)} fields, expected 4")
                continue
            try:
                devs.append(ContainerDevice(fields[0].strip(), fields[1], int(fields[2]), int(fields[3])))
            except ValueError:
                errors.append(f"container {ci}: device entry {entry[:60]!r} has non-integer memory or cores")
        containers.append(tuple(devs))
    return PodDevicesDecoding(tuple(containers), "; ".join(errors[:3]) if errors else None)


def encode_pod_devices(containers: list[list[ContainerDevice]] | tuple[tuple[ContainerDevice, ...], ...]) -> str:
    return "".join("".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in devs) + ";" for devs in containers)


# ---- selection annotations --------------------------------------------------------------------
def split_list(value: str | None) -> tuple[str, ...]:
    """Comma list as HAMi v2.10 reads it: items trimmed, empty items dropped (CheckUUID, #2045)."""
    if not value:
        return ()
    return tuple(item.strip() for item in value.split(",") if item.strip())


def use_list(value: str | None) -> tuple[str, ...]:
    """A ``use-gpuuuid``/``use-gputype`` value as HAMi v2.10 ``CheckUUID``/``CheckType`` read it.

    ``pkg/device/devices.go``: a blank value is no constraint; any other value is a constraint
    whose items are trimmed, and a blank item matches no device. So a value of separators only
    (``","``, ``" , "``) allows nothing: it reads as the one item ``""``, which no UUID or type
    matches (:class:`~hami_place_core.requests.DeviceSelectors` skips blank type items).
    """
    items = split_list(value)
    if items or not value or not value.strip():
        return items
    return ("",)


def join_list(items: list[str] | tuple[str, ...]) -> str:
    return ",".join(items)
