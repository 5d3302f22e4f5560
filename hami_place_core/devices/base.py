"""What the core needs to know about one HAMi device vendor: :class:`DeviceKind`.

A kind is plain data: the names a vendor's pods and nodes carry, and references to the codecs of
:mod:`hami_place_core.devices.codec` that read and write its annotations. It never decides
anything; HAMi's rules (Fit, scores, the webhook) stay in the modules that model them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hami_place_core.devices.codec import ContainerDevice, GpuDevice, PodDevicesDecoding, RegisterDecoding


@dataclass(frozen=True)
class DeviceKind:
    """One HAMi device vendor: its type string, resource names, annotation keys and codecs."""

    # The type HAMi's request carries and writes as the second field of every allocated device
    # (``UUID,TYPE,MEM,CORES``); a node's devices whose registered type contains it (ignoring case)
    # are the ones this vendor's Fit is handed.
    device_type: str
    # The extended resources a container names to ask for this vendor's devices.
    resource_count: str
    resource_memory: str
    resource_memory_percentage: str
    resource_cores: str
    resource_priority: str
    # Node annotations: the device plugin's register annotation (the node's inventory) and handshake.
    node_register: str
    node_handshake: str
    # Pod annotations the scheduler writes: the devices to allocate, and the allocation that stays.
    pod_to_allocate: str
    pod_allocated: str
    # Pod annotations that restrict which devices Fit may pick (the pin writes `use_uuid`).
    use_uuid: str
    nouse_uuid: str
    use_type: str
    nouse_type: str
    # What N of ``gpu-N`` is: always a register entry's ``index`` field (never its position in the
    # annotation, whose order is arbitrary); this says what the vendor's plugin puts there.
    gpu_index: str
    # The codecs, referenced: decode(value, key) with key the register annotation's name for messages.
    register_decoder: Callable[[str | None, str], RegisterDecoding]
    register_encoder: Callable[[Sequence[GpuDevice]], str]
    allocation_decoder: Callable[[str | None], PodDevicesDecoding]
    allocation_encoder: Callable[[Sequence[Sequence[ContainerDevice]]], str]

    @property
    def resources(self) -> tuple[str, ...]:
        """Every resource name of this vendor: a container naming one is claimed by HAMi's webhook."""
        return (
            self.resource_count,
            self.resource_memory,
            self.resource_memory_percentage,
            self.resource_cores,
            self.resource_priority,
        )

    @property
    def selector_keys(self) -> tuple[str, ...]:
        """The pod annotations Fit consults for every device (use-/nouse- UUID, then type)."""
        return (self.use_uuid, self.nouse_uuid, self.use_type, self.nouse_type)

    def decode_register(self, value: str | None) -> RegisterDecoding:
        """This vendor's register annotation `value`, decoded (absent: says which key is missing)."""
        return self.register_decoder(value, self.node_register)
