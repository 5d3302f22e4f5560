"""Every HAMi annotation hami-place reads or writes: the keys and the codecs, in one place.

HAMi's own keys, the same for every device vendor, are defined here. A vendor's keys (register,
allocation, selectors) and the codecs live in :mod:`hami_place_core.devices`; this module
re-exports the default vendor's keys (NVIDIA today) under the names the CLI, the agent, the
harness and the tests import, and the codecs of :mod:`hami_place_core.devices.codec`. Nothing in
the code base splits or joins a HAMi annotation string except that codec module and the list
helpers below.

Sources (Project-HAMi/HAMi; v2.10.0 = 4707fb02c91c unless stated): the register, pod device and
selection annotations are cited in :mod:`hami_place_core.devices.nvidia` (the keys) and
:mod:`hami_place_core.devices.codec` (the codecs); the selection lists are read as ``CheckUUID``/
``CheckType`` in ``pkg/device/devices.go`` read them.
"""

from __future__ import annotations

from hami_place_core.devices import default_kind
from hami_place_core.devices.codec import (
    INT32,
    INT64,
    UINT64,
    ContainerDevice,
    GpuDevice,
    PodDevicesDecoding,
    RegisterDecoding,
    RegisterFormat,
    decode_pod_devices,
    encode_pod_devices,
    encode_register_json,
    encode_register_legacy,
    go_parse_int,
)

__all__ = [
    "INT32",
    "INT64",
    "MODEL_POD_ANNOTATIONS",
    "NODE_DEVICE_CORDON",
    "NODE_HANDSHAKE",
    "NODE_LOCK",
    "NODE_REGISTER",
    "NOUSE_GPU_TYPE",
    "NOUSE_GPU_UUID",
    "NVIDIA_DEVICE_TYPE",
    "POD_BIND_PHASE",
    "POD_DEFRAG",
    "POD_DEVICES_ALLOCATED",
    "POD_DEVICES_TO_ALLOCATE",
    "POD_GPU_SCHEDULER_POLICY",
    "POD_NODE_SCHEDULER_POLICY",
    "POD_VGPU_NODE",
    "POD_VGPU_TIME",
    "UINT64",
    "USE_GPU_TYPE",
    "USE_GPU_UUID",
    "WEBHOOK_IGNORE_LABEL",
    "ContainerDevice",
    "GpuDevice",
    "PodDevicesDecoding",
    "RegisterDecoding",
    "RegisterFormat",
    "decode_pod_devices",
    "decode_register",
    "encode_pod_devices",
    "encode_register_json",
    "encode_register_legacy",
    "go_parse_int",
    "join_list",
    "split_list",
    "use_list",
]

_VENDOR = default_kind()

# ---- keys -------------------------------------------------------------------------------------
# HAMi's own, the same for every device vendor.
NODE_LOCK = "hami.io/mutex.lock"
NODE_DEVICE_CORDON = "hami.io/device-cordon"  # v2.10+: comma-separated UUIDs

POD_VGPU_NODE = "hami.io/vgpu-node"
POD_VGPU_TIME = "hami.io/vgpu-time"
POD_BIND_PHASE = "hami.io/bind-phase"
POD_GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
POD_NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"

# The default vendor's (names kept for the code that imports them from here).
NODE_REGISTER = _VENDOR.node_register
NODE_HANDSHAKE = _VENDOR.node_handshake

POD_DEVICES_ALLOCATED = _VENDOR.pod_allocated
POD_DEVICES_TO_ALLOCATE = _VENDOR.pod_to_allocate

USE_GPU_UUID = _VENDOR.use_uuid
NOUSE_GPU_UUID = _VENDOR.nouse_uuid
USE_GPU_TYPE = _VENDOR.use_type
NOUSE_GPU_TYPE = _VENDOR.nouse_type

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

# Device-type keyword HAMi writes as the second field of each pod device entry (the default vendor's).
NVIDIA_DEVICE_TYPE = _VENDOR.device_type


def decode_register(value: str | None) -> RegisterDecoding:
    """The default vendor's register annotation (:data:`NODE_REGISTER`) `value`, decoded by its
    codec (:func:`hami_place_core.devices.codec.decode_register`)."""
    return _VENDOR.decode_register(value)


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
