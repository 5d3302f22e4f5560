"""The device seam: what the core knows about each HAMi device vendor, and the registry of them.

One module per vendor (:mod:`~hami_place_core.devices.nvidia` today) builds a
:class:`~hami_place_core.devices.base.DeviceKind` from its literals and is listed in :data:`KINDS`.
The rest of the core reads resource names, annotation keys and the device type from a kind, never
from a literal (tests/unit/test_devices.py keeps it so). The package imports nothing from the rest
of hami_place_core (.importlinter), so every module of the core may import it.

Layers, top to bottom: this registry, the vendors' modules, ``base`` (:class:`DeviceKind`),
``codec`` (HAMi's annotation codecs, shared by every vendor).
"""

from __future__ import annotations

from hami_place_core.devices.base import DeviceKind
from hami_place_core.devices.nvidia import NVIDIA

__all__ = ["KINDS", "NVIDIA", "DeviceKind", "default_kind", "kind_for_resource"]

# Every registered vendor; no two share a resource name (tests/unit/test_devices.py).
KINDS: tuple[DeviceKind, ...] = (NVIDIA,)

_BY_RESOURCE = {name: kind for kind in KINDS for name in kind.resources}


def default_kind() -> DeviceKind:
    """The vendor the core reads every pod and node as, until a caller picks one: NVIDIA."""
    return NVIDIA


def kind_for_resource(name: str) -> DeviceKind | None:
    """The vendor whose resource `name` is (``nvidia.com/gpu`` -> NVIDIA), or None."""
    return _BY_RESOURCE.get(name)
