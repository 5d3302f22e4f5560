"""What room is asked for: a pending pod read by the core's own parsers, or a `--for-request`
string turned into such a pod (:func:`parse_room_request`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.devices import default_kind
from hami_place_core.fit import NO_SELECTORS
from hami_place_core.node_resources import Resources, format_cpu, format_memory, pod_requests
from hami_place_core.quantity import QuantityError, parse_quantity
from hami_place_core.requests import PCT_UNSET, DeviceSelectors, GpuRequest, PodRequest, pod_request
from hami_place_core.state import PodAllocation

# The vendor a request string asks for (NVIDIA today): its resources and selector annotations.
_VENDOR = default_kind()
ONE_SLOT = Resources(0, 0, 1)


# ---- the request ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoomRequest:
    """What the pending pod asks for: its GPUs (HAMi's request and selectors) and its node."""

    gpu: GpuRequest  # per GPU: count, memory (MiB or percentage), cores
    selectors: DeviceSelectors = NO_SELECTORS  # use-/nouse-gputype, use-/nouse-gpuuuid
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)  # node affinity only (see notes)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    resources: Resources = ONE_SLOT  # CPU (millicores), memory (bytes), one pod slot
    name: str = "request"  # ns/name of the pod, or "request" for a hypothetical one
    notes: tuple[str, ...] = ()  # what the request had that is not checked

    @property
    def gpus(self) -> int:
        return self.gpu.nums

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], webhook: bool = False) -> RoomRequest:
        """The request of a real pod. A pending pod has passed HAMi's admission webhook already;
        `webhook` applies it (for a pod that has not, such as :func:`parse_room_request`'s)."""
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        request = pod_request(pod, webhook=webhook)
        gpu = request.gpu_containers
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}" if meta.get("name") else "request"
        if not gpu:
            raise ValueError(f"pod {name} asks for no GPU ({_VENDOR.resource_count})")
        if len(gpu) != 1 or any(r is not None for r in request.init):
            raise ValueError(
                f"pod {name} has {len(gpu)} GPU containers and "
                f"{sum(r is not None for r in request.init)} GPU init containers; only pods with one GPU "
                "container are handled"
            )
        affinity = dict(spec.get("affinity") or {})
        notes = []
        for kind in ("podAffinity", "podAntiAffinity"):
            if (affinity.pop(kind, None) or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
                notes.append(f"required {kind} is not checked")
        if spec.get("topologySpreadConstraints"):
            notes.append("topologySpreadConstraints are not checked")
        return cls(
            gpu=gpu[0],
            selectors=request.selectors,
            node_selector=dict(spec.get("nodeSelector") or {}),
            affinity=affinity,
            tolerations=tuple(spec.get("tolerations") or ()),
            resources=pod_requests(pod),
            name=name,
            notes=tuple(notes),
        )

    def as_allocation(self) -> PodAllocation:
        """The pod as the constraint checks see it (no node, no GPUs yet)."""
        ns, _, name = self.name.rpartition("/")
        return PodAllocation(
            namespace=ns,
            name=name,
            uid="",
            node="",
            phase="Pending",
            labels={},
            owner_kind=None,
            owner_name=None,
            per_gpu={},
            containers=(),
            request=PodRequest(init=(), containers=(self.gpu,), selectors=self.selectors),
            node_selector=self.node_selector,
            affinity=self.affinity,
            tolerations=self.tolerations,
        )

    def describe(self) -> str:
        parts = [f"{self.gpu.nums} GPU{'s' if self.gpu.nums != 1 else ''}"]
        if self.gpu.memreq:
            parts.append(f"{self.gpu.memreq} MiB each")
        elif self.gpu.mem_percentage != PCT_UNSET:
            parts.append(f"{self.gpu.mem_percentage}% memory each")
        parts.append(f"{self.gpu.coresreq}% cores each")
        if self.selectors.use_types:
            parts.append(f"type {','.join(self.selectors.use_types)}")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpus": self.gpu.nums,
            "gpumem": self.gpu.memreq or None,
            "gpumemPercentage": None if self.gpu.mem_percentage == PCT_UNSET else self.gpu.mem_percentage,
            "gpucores": self.gpu.coresreq,
            "types": list(self.selectors.use_types),
            "nodeSelector": dict(self.node_selector),
            "cpu": format_cpu(self.resources.cpu),
            "memory": format_memory(self.resources.memory),
        }


# ---- the hypothetical request (--for-request) ----------------------------------------------------
_INT_KEYS = {"gpus": (1, 1024), "gpumem": (1, 1 << 40), "gpumem-percentage": (1, 100), "gpucores": (0, 100)}
_LIST_KEYS = ("type", "nouse-type", "uuid", "nouse-uuid", "node-selector", "toleration")
_QUANTITY_KEYS = ("cpu", "memory")
KNOWN_KEYS = (*_INT_KEYS, *_LIST_KEYS, *_QUANTITY_KEYS)
_TOLERATION = re.compile(r"^([^=:\s]+)(?:=([^:\s]*))?(?::(NoSchedule|NoExecute|PreferNoSchedule))?$")
_LABEL = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_./]*$")


def parse_room_request(text: str) -> RoomRequest:
    """A request from ``gpus=4,gpumem=20000,gpucores=50,type=A100,node-selector=k=v`` (the
    ``--for-request`` value): comma-separated ``key=value`` items. ``gpus`` is required; ``gpumem``
    (MiB) and ``gpumem-percentage`` exclude each other; neither means the whole memory, and then
    HAMi's webhook gives the pod all the cores unless ``gpucores`` says otherwise. ``type``,
    ``nouse-type``, ``uuid``, ``nouse-uuid``, ``node-selector`` (``k=v``) and ``toleration``
    (``key[=value][:Effect]``) may repeat; ``cpu`` and ``memory`` are the pod's requests of its
    node (Kubernetes quantities). Raises ValueError naming the bad item."""
    if not text or not text.strip():
        raise ValueError("empty request: give at least gpus=N")
    ints: dict[str, int] = {}
    lists: dict[str, list[str]] = {k: [] for k in _LIST_KEYS}
    quantities: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not item.strip():
            raise ValueError(f"empty item in {text!r} (two commas in a row, or a trailing comma)")
        if not sep or not value:
            raise ValueError(f"item {item.strip()!r} needs key=value")
        if key not in KNOWN_KEYS:
            raise ValueError(f"unknown key {key!r} (known: {', '.join(KNOWN_KEYS)})")
        if key in _INT_KEYS:
            if key in ints:
                raise ValueError(f"{key} given twice")
            ints[key] = _int_value(key, value)
        elif key in _QUANTITY_KEYS:
            if key in quantities:
                raise ValueError(f"{key} given twice")
            quantities[key] = _quantity_value(key, value)
        else:
            lists[key].append(value)
    if "gpus" not in ints:
        raise ValueError("gpus=N is required (the number of GPUs the pod asks for)")
    if "gpumem" in ints and "gpumem-percentage" in ints:
        raise ValueError("give gpumem (MiB) or gpumem-percentage, not both")
    return RoomRequest.from_pod(_request_pod(ints, lists, quantities), webhook=True)


def _int_value(key: str, value: str) -> int:
    lo, hi = _INT_KEYS[key]
    if not re.fullmatch(r"\d+", value):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    n = int(value)
    if not lo <= n <= hi:
        raise ValueError(f"{key} must be between {lo} and {hi}, got {n}")
    return n


def _quantity_value(key: str, value: str) -> str:
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise ValueError(f"{key} must be a Kubernetes quantity (such as 8, 500m, 64Gi), got {value!r}") from None
    if amount < 0:
        raise ValueError(f"{key} must not be negative, got {value!r}")
    return value


def _request_pod(
    ints: Mapping[str, int], lists: Mapping[str, list[str]], quantities: Mapping[str, str]
) -> dict[str, Any]:
    """The pod the request describes, as submitted (before HAMi's webhook)."""
    limits = {_VENDOR.resource_count: str(ints["gpus"])}
    for key, res in (
        ("gpumem", _VENDOR.resource_memory),
        ("gpumem-percentage", _VENDOR.resource_memory_percentage),
        ("gpucores", _VENDOR.resource_cores),
    ):
        if key in ints:
            limits[res] = str(ints[key])
    annotations = {}
    for key, annotation in (
        ("type", _VENDOR.use_type),
        ("nouse-type", _VENDOR.nouse_type),
        ("uuid", _VENDOR.use_uuid),
        ("nouse-uuid", _VENDOR.nouse_uuid),
    ):
        if lists[key]:
            annotations[annotation] = ann.join_list(lists[key])
    node_selector: dict[str, str] = {}
    for kv in lists["node-selector"]:
        k, sep, v = kv.partition("=")
        if not sep or not _LABEL.match(k) or (v and not _LABEL.match(v)):
            raise ValueError(f"node-selector must be label=value, got {kv!r}")
        if node_selector.get(k, v) != v:
            raise ValueError(f"node-selector asks {k} to equal both {node_selector[k]!r} and {v!r}")
        node_selector[k] = v
    tolerations = []
    for t in lists["toleration"]:
        m = _TOLERATION.match(t)
        if m is None:
            raise ValueError(f"toleration must be key[=value][:NoSchedule|NoExecute|PreferNoSchedule], got {t!r}")
        key, value, effect = m.groups()
        tol: dict[str, str] = {"key": key, "operator": "Exists" if value is None else "Equal"}
        if value is not None:
            tol["value"] = value
        if effect:
            tol["effect"] = effect
        tolerations.append(tol)
    resources: dict[str, Any] = {"limits": limits}
    if quantities:
        resources["requests"] = dict(quantities)
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": resources}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"annotations": annotations}, "spec": spec}
