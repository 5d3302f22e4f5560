"""HAMi's device annotation codecs, shared by every device vendor as HAMi shares them.

Nothing else in the code base splits or joins a HAMi device annotation string; the rest of the
code reaches these through :mod:`hami_place_core.annotations` or a vendor's
:class:`~hami_place_core.devices.base.DeviceKind`. Decoders never raise: they return the decoded
value together with a precise error for whatever they could not read, so one garbage annotation
never hides the rest of the cluster.

Sources (Project-HAMi/HAMi; v2.10.0 = 4707fb02c91c unless stated):
- register annotation: JSON codec ``MarshalNodeDevices``/``UnMarshalNodeDevices`` in
  ``pkg/device/devices.go`` (v2.8+); legacy codec ``EncodeNodeDevices``/``DecodeNodeDevices`` in
  the same file (9 fields, v2.5-v2.7) and ``pkg/util/util.go`` at v2.4.0 (7 fields, no index).
- pod device annotations: ``EncodeContainerDevices``/``EncodePodSingleDevice``/``DecodePodDevices``
  in ``pkg/device/devices.go``; written by ``Filter`` in ``pkg/scheduler/scheduler.go``.

This module imports nothing from the rest of hami_place_core (.importlinter): the vendors'
modules reference its functions, and :mod:`hami_place_core.annotations` re-exports them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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


# ---- integers exactly as HAMi's Go decoders read them ---------------------------------------------
# Field widths of HAMi's structs (pkg/device/devices.go, v2.10.0): DeviceInfo.Index uint,
# Count/Devmem/Devcore int32, Numa int; ContainerDevice.Usedmem/Usedcores int32 (Go's int and uint
# are 64 bits on every platform HAMi ships for).
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)


def go_parse_int(text: str, bits: int = 64) -> int:
    """Go's ``strconv.ParseInt(text, 10, bits)`` (and ``Atoi`` for 64): an optional ``+``/``-``
    then ASCII digits only (no spaces, no ``_``, no other script's digits, which Python's int()
    would take), within the signed range of `bits`. Raises ValueError with Go's wording."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):  # ASCII-only isdigit() is exactly 0-9 (and not "")
        raise ValueError(f"strconv.ParseInt: parsing {text[:40]!r}: invalid syntax")
    if len(digits) > 20:  # longer than any 64-bit value: out of range without converting it
        raise ValueError(f"strconv.ParseInt: parsing {text[:40]!r}: value out of range")
    value = -int(digits) if text[0] == "-" else int(digits)
    if not -(2 ** (bits - 1)) <= value <= 2 ** (bits - 1) - 1:
        raise ValueError(f"strconv.ParseInt: parsing {text[:40]!r}: value out of range")
    return value


def _not_negative(value: int, name: str) -> int:
    # HAMi's decoders take a negative count, memory or core figure as it is; hami-place never adds,
    # subtracts or divides one: the object is invalid, with this reason.
    if value < 0:
        raise ValueError(f"{name} is negative ({value})")
    return value


def _json_int(value: Any, name: str, bounds: tuple[int, int], go_type: str) -> int:
    """A JSON number decoded into a Go integer field by encoding/json: null leaves the zero value,
    anything but an integer literal in range is an error (a fraction or exponent form, a string)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {json.dumps(value)[:40]}")
    if not bounds[0] <= value <= bounds[1]:
        shown = str(value) if abs(value) < 10**40 else f"a {len(str(abs(value)))}-digit number"
        raise ValueError(f"{name} {shown} does not fit HAMi's {go_type}")
    return value


def _json_str(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {json.dumps(value)[:40]}")
    return value


# encoding/json matches object keys to struct fields case-insensitively; the last match wins.
_JSON_FIELDS = ("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health")


def _json_fields(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in entry.items():
        folded = key.lower() if key.isascii() else key
        if folded in _JSON_FIELDS:
            out[folded] = value
    return out


def _device_from_json(entry: Any, pos: int) -> GpuDevice:
    if not isinstance(entry, dict):
        raise ValueError(f"entry {pos} is not an object")
    f = _json_fields(entry)
    uuid = _json_str(f.get("id"), f"entry {pos}: id")
    if not uuid:
        raise ValueError(f"entry {pos} has no id")
    where = f"entry {pos} ({uuid[:40]})"
    health = f.get("health")  # omitempty: a missing (or null) health means false (unhealthy)
    if health is not None and not isinstance(health, bool):
        raise ValueError(f"{where}: health must be a boolean")
    return GpuDevice(
        uuid=uuid,
        index=_json_int(f.get("index"), f"{where}: index", UINT64, "uint"),
        count=_not_negative(_json_int(f.get("count"), f"{where}: count", INT32, "int32"), f"{where}: count"),
        devmem=_not_negative(_json_int(f.get("devmem"), f"{where}: devmem", INT32, "int32"), f"{where}: devmem"),
        devcore=_not_negative(_json_int(f.get("devcore"), f"{where}: devcore", INT32, "int32"), f"{where}: devcore"),
        type=_json_str(f.get("type"), f"{where}: type"),
        numa=_json_int(f.get("numa"), f"{where}: numa", INT64, "int"),
        mode=_json_str(f.get("mode"), f"{where}: mode") or "hami-core",
        health=bool(health),
    )


def _parse_bool(text: str) -> bool:
    # Go's strconv.ParseBool, which the legacy decoder uses.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"health {text!r} is not a boolean")


def _device_from_legacy(fields: list[str], pos: int) -> GpuDevice:
    # HAMi v2.10.0 DecodeNodeDevices (pkg/device/devices.go): count, memory and cores with
    # strconv.ParseInt(…, 10, 32), numa and index with strconv.Atoi, a negative index refused.
    where = f"entry {pos} ({fields[0][:40]})"
    try:
        common = dict(
            uuid=fields[0],
            count=_not_negative(go_parse_int(fields[1], 32), "count"),
            devmem=_not_negative(go_parse_int(fields[2], 32), "devmem"),
            devcore=_not_negative(go_parse_int(fields[3], 32), "devcore"),
            type=fields[4],
            numa=go_parse_int(fields[5]),
            health=_parse_bool(fields[6]),
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if not common["uuid"]:
        raise ValueError(f"entry {pos} has no UUID")
    if len(fields) == 9:
        try:
            index = go_parse_int(fields[7])
        except ValueError as e:
            raise ValueError(f"{where}: index: {e}") from None
        if index < 0:
            raise ValueError(f"{where}: index field must not be negative: {index}")
        return GpuDevice(index=index, mode=fields[8] or "hami-core", **common)  # type: ignore[arg-type]
    # The 7-field format has no index; HAMi's decoder defaults it to 0 and mode to hami-core.
    return GpuDevice(index=0, mode="hami-core", **common)  # type: ignore[arg-type]


def decode_register(value: str | None, key: str) -> RegisterDecoding:
    """Decode a register annotation (e.g. ``hami.io/node-nvidia-register``) in any format HAMi
    v2.4-v2.10 writes; `key` is the annotation's name, for the message when it is absent.

    Like HAMi-WebUI and mock-device-plugin, try JSON first (v2.8+) and fall back to the legacy
    colon-terminated list (v2.5-v2.7: 9 fields; ≤v2.4: 7 fields).
    """
    if value is None or not value.strip():
        return RegisterDecoding(format="absent", error=f"node has no {key} annotation")
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
    # HAMi's DecodeNodeDevices (pkg/device/devices.go) splits the raw value on ":" and skips only
    # empty segments; a segment without "," fails the whole node, and one with neither 7 nor 9
    # fields is dropped silently (the node keeps its other GPUs: said here as the node's problem).
    if ":" not in value:
        return RegisterDecoding(format="invalid", error="register annotation is neither JSON nor a ':'-ended list")
    devices, skipped, dropped = [], [], []
    fmt: RegisterFormat = "legacy-9"
    for pos, chunk in enumerate(c for c in value.split(":") if c):
        if "," not in chunk:
            skipped.append(f"malformed segment {chunk[:40]!r}")
            continue
        fields = chunk.split(",")
        if len(fields) not in (7, 9):
            dropped.append(f"entry {pos} has {len(fields)} fields, expected 9 (v2.5-v2.7) or 7 (≤v2.4); HAMi skips it")
            continue
        if len(fields) == 7:
            fmt = "legacy-7"
        try:
            devices.append(_device_from_legacy(fields, pos))
        except ValueError as e:
            skipped.append(str(e))
    decoded = _finish(devices, skipped, fmt)
    if dropped and decoded.error is None:
        return RegisterDecoding(decoded.devices, decoded.format, "; ".join(dropped[:3]))
    return decoded


def _finish(devices: list[GpuDevice], skipped: list[str], fmt: RegisterFormat) -> RegisterDecoding:
    if skipped:
        # HAMi unmarshals the whole value or nothing (a Go decode error drops every device of the
        # node), so one unreadable entry makes the node unusable: say so, keep the reasons.
        n = len(skipped)
        return RegisterDecoding(
            format="invalid",
            error=f"{n} unreadable entr{'y' if n == 1 else 'ies'}, so none of the node's GPUs count: {skipped[0]}",
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


def encode_register_json(devices: Sequence[GpuDevice]) -> str:
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


def encode_register_legacy(devices: Sequence[GpuDevice], fields: int = 9) -> str:
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
    """One GPU share held by one container: ``UUID,TYPE,<usedmem MiB>,<usedcores>`` (TYPE is the
    vendor's device type, e.g. ``NVIDIA``)."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int


@dataclass(frozen=True)
class PodDevicesDecoding:
    containers: tuple[tuple[ContainerDevice, ...], ...] = ()
    error: str | None = None


def decode_pod_devices(value: str | None) -> PodDevicesDecoding:
    """Decode a pod's allocation (e.g. ``hami.io/vgpu-devices-allocated``): containers end with
    ``;``, devices with ``:``.

    Containers keep their pod order (since v2.9.0 init containers come first). HAMi v2.10 writes a
    segment only for containers that got GPUs (``pkg/scheduler/score.go``); a value with one segment
    per container, empty ones included, is read too. ``state._align`` lines them up with the pod spec.
    """
    if value is None or value == "":
        return PodDevicesDecoding()
    segments = value.split(";")
    # A well-formed value ends with ";": the split leaves one empty tail that is not a container.
    if segments and segments[-1] == "":
        segments = segments[:-1]
    containers: list[tuple[ContainerDevice, ...]] = []
    for ci, seg in enumerate(segments):
        devs: list[ContainerDevice] = []
        for entry in seg.split(":"):
            if "," not in entry:
                continue  # HAMi's DecodeContainerDevices skips what has no comma
            try:
                devs.append(_container_device(entry))
            except ValueError as e:
                # HAMi fails the whole pod (DecodePodDevices) and counts none of its usage
                # (onAddPod, pkg/scheduler/scheduler.go): neither does hami-place.
                return PodDevicesDecoding(error=f"container {ci}: device entry {entry[:60]!r}: {e}")
        containers.append(tuple(devs))
    return PodDevicesDecoding(tuple(containers))


def _container_device(entry: str) -> ContainerDevice:
    """``UUID,TYPE,MEM,CORES[,…]`` as HAMi v2.10.0 DecodeContainerDevices reads it (fields as they
    are, MEM and CORES with strconv.ParseInt(…, 10, 32)); negative figures refused here too."""
    fields = entry.split(",")
    if len(fields) < 4:
        raise ValueError(f"{len(fields)} fields, expected 4")
    mem_text, cores_text = fields[2], fields[3]
    # The cache's hot path: plain ASCII figures of at most 9 digits are within int32 and not negative.
    plain = (mem_text + cores_text).isascii() and mem_text.isdigit() and cores_text.isdigit()
    if plain and len(mem_text) < 10 and len(cores_text) < 10:
        return ContainerDevice(fields[0], fields[1], int(mem_text), int(cores_text))
    try:
        mem = _not_negative(go_parse_int(fields[2], 32), "memory")
        cores = _not_negative(go_parse_int(fields[3], 32), "cores")
    except ValueError as e:
        raise ValueError(f"memory or cores: {e}") from None
    return ContainerDevice(fields[0], fields[1], mem, cores)


def encode_pod_devices(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    return "".join("".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in devs) + ";" for devs in containers)
