"""The device seam (hami_place_core/devices/): the registry, the NVIDIA kind, the names kept where
other packages import them, and a guard that no vendor literal creeps back into the rest of the
core. Pure."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

from hami_place_core import annotations as ann
from hami_place_core import requests
from hami_place_core.devices import KINDS, NVIDIA, DeviceKind, codec, default_kind, kind_for_resource

CORE = Path(__file__).resolve().parents[2] / "hami_place_core"
DEVICES = CORE / "devices"


def test_the_registry_holds_nvidia_and_it_is_the_default() -> None:
    assert KINDS == (NVIDIA,)
    assert default_kind() is NVIDIA
    assert NVIDIA.device_type == "NVIDIA"
    assert NVIDIA.node_register == "hami.io/node-nvidia-register"


@pytest.mark.parametrize(
    "name", ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]
)
def test_a_resource_name_finds_its_vendor(name: str) -> None:
    assert kind_for_resource(name) is NVIDIA


@pytest.mark.parametrize("name", ["cpu", "nvidia.com/gpu.product", "hygon.com/dcunum", ""])
def test_a_resource_of_no_vendor_finds_none(name: str) -> None:
    assert kind_for_resource(name) is None


def test_no_two_kinds_share_a_resource_name() -> None:
    names = [name for kind in KINDS for name in kind.resources]
    assert len(names) == len(set(names))


def test_the_names_other_packages_import_are_the_default_kinds() -> None:
    kind = default_kind()
    assert kind.resources[:4] == (requests.RES_GPU, requests.RES_MEM, requests.RES_MEM_PCT, requests.RES_CORES)
    assert kind.resources == requests.HAMI_RESOURCES
    assert kind.selector_keys == (ann.USE_GPU_UUID, ann.NOUSE_GPU_UUID, ann.USE_GPU_TYPE, ann.NOUSE_GPU_TYPE)
    assert (kind.node_register, kind.node_handshake) == (ann.NODE_REGISTER, ann.NODE_HANDSHAKE)
    assert (kind.pod_to_allocate, kind.pod_allocated) == (ann.POD_DEVICES_TO_ALLOCATE, ann.POD_DEVICES_ALLOCATED)
    assert kind.device_type == ann.NVIDIA_DEVICE_TYPE


def test_the_kind_references_the_shared_codecs_and_names_its_key_when_absent() -> None:
    assert NVIDIA.register_decoder is codec.decode_register
    assert NVIDIA.allocation_encoder is ann.encode_pod_devices is codec.encode_pod_devices
    assert NVIDIA.decode_register(None).error == "node has no hami.io/node-nvidia-register annotation"
    assert ann.decode_register("").error == NVIDIA.decode_register(None).error


def _vendor_literals() -> tuple[str, ...]:
    """Every resource name and annotation key of every registered kind (they all contain a '/')."""
    values = (getattr(kind, f.name) for kind in KINDS for f in fields(DeviceKind))
    return tuple(v for v in values if isinstance(v, str) and "/" in v)


def _offending_literals(path: Path, keys: tuple[str, ...]) -> list[str]:
    """String constants of `path` naming a vendor: any mention of nvidia, or a registered kind's
    key or resource. Docstrings (where a literal is an example) and ``__all__`` names are skipped."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skipped.update(id(c) for c in ast.walk(node.value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            text = node.value
            if re.search("nvidia", text, re.IGNORECASE) or any(k in text for k in keys):
                found.append(f"{path.relative_to(CORE.parent)}:{node.lineno}: {text!r}")
    return found


def _core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if DEVICES not in p.parents)


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: str(p.relative_to(CORE)))
def test_no_vendor_literal_outside_the_device_seam(path: Path) -> None:
    found = _offending_literals(path, _vendor_literals())
    assert not found, "read these from hami_place_core.devices (a DeviceKind) instead:\n" + "\n".join(found)


def test_the_guard_sees_the_literals_where_they_belong() -> None:
    # The scan is not vacuous: the NVIDIA module holds every literal the guard refuses elsewhere.
    found = "\n".join(_offending_literals(DEVICES / "nvidia.py", _vendor_literals()))
    for literal in (*_vendor_literals(), "NVIDIA"):
        assert repr(literal) in found
