"""NVIDIA GPUs as HAMi names them: every NVIDIA literal of the core is here.

Sources (Project-HAMi/HAMi; v2.10.0 = 4707fb02c91c unless stated):
- register annotation: ``pkg/device/nvidia/device.go`` (``RegisterAnnos``), read with the shared
  codecs of ``pkg/device/devices.go`` (:mod:`hami_place_core.devices.codec`).
- selection annotations: ``GPUUseUUID``/``GPUNoUseUUID``/``GPUUseType``/``GPUNoUseType`` in
  ``pkg/device/nvidia/device.go``; ``CheckUUID``/``CheckType`` in ``pkg/device/devices.go``.
- how a container's resources are read: ``NvidiaGPUDevices.GenerateResourceRequests`` in
  ``pkg/device/nvidia/device.go`` (modelled in :mod:`hami_place_core.requests`).
"""

from __future__ import annotations

from hami_place_core.devices import codec
from hami_place_core.devices.base import DeviceKind

# Device-type keyword HAMi writes as the second field of each pod device entry.
DEVICE_TYPE = "NVIDIA"

RES_GPU = "nvidia.com/gpu"
RES_MEM = "nvidia.com/gpumem"
RES_MEM_PCT = "nvidia.com/gpumem-percentage"
RES_CORES = "nvidia.com/gpucores"
RES_PRIORITY = "nvidia.com/priority"

NODE_REGISTER = "hami.io/node-nvidia-register"
NODE_HANDSHAKE = "hami.io/node-handshake"

POD_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
POD_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"

USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"

NVIDIA = DeviceKind(
    device_type=DEVICE_TYPE,
    resource_count=RES_GPU,
    resource_memory=RES_MEM,
    resource_memory_percentage=RES_MEM_PCT,
    resource_cores=RES_CORES,
    resource_priority=RES_PRIORITY,
    node_register=NODE_REGISTER,
    node_handshake=NODE_HANDSHAKE,
    pod_to_allocate=POD_DEVICES_TO_ALLOCATE,
    pod_allocated=POD_DEVICES_ALLOCATED,
    use_uuid=USE_GPU_UUID,
    nouse_uuid=NOUSE_GPU_UUID,
    use_type=USE_GPU_TYPE,
    nouse_type=NOUSE_GPU_TYPE,
    # The device plugin builds the register list from a Go map, so its order is arbitrary.
    gpu_index="the GPU's NVML index",
    register_decoder=codec.decode_register,
    register_encoder=codec.encode_register_json,
    allocation_decoder=codec.decode_pod_devices,
    allocation_encoder=codec.encode_pod_devices,
)
