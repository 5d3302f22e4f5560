"""CPU, memory and pod slots: what kube-scheduler's NodeResourcesFit checks besides the GPUs.

A move is only as good as the node it lands on. HAMi's Filter looks at GPUs alone; kube-scheduler
(or HAMi's scheduler, which runs the same default plugins) still refuses a node whose allocatable
CPU, memory or pod count the pod's requests would exceed, and the pinned replacement then stays
Pending. On the openb trace, half the moves of a GPU-only plan failed this check.

Requests are computed as kube-scheduler computes them: ``PodRequests`` in
``k8s.io/component-helpers/resource/helpers.go`` (v0.36), which
``pkg/scheduler/framework/plugins/noderesources/fit.go`` (``computePodResourceRequest``) uses:
app containers summed; restartable init containers (sidecars) added to them; each plain init
container with the sidecars started before it, the largest of those if it exceeds the sum; plus
``spec.overhead``; pod-level ``spec.resources.requests`` win for CPU and memory where set. A
container with a limit but no request is counted at its limit, as the API server defaults it
(``pkg/apis/core/v1/defaults.go``, ``SetDefaults_Pod``). The node side is
``status.allocatable``; a node without CPU and memory there is *unknown* and never refuses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_place_core.quantity import QuantityError, parse_quantity


@dataclass(frozen=True, slots=True)
class Resources:
    """Millicores, bytes and pod slots."""

    cpu: int = 0
    memory: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.pods + other.pods)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.pods - other.pods)

    def covers(self, need: Resources) -> bool:
        """Every amount here is at least the one in `need`."""
        return self.cpu >= need.cpu and self.memory >= need.memory and self.pods >= need.pods

    def shortfall(self, need: Resources) -> str | None:
        """Why `need` does not fit in this much room, in kube-scheduler's words; None if it does."""
        short = []
        if need.pods > self.pods:
            short.append("Too many pods")
        if need.cpu > self.cpu:
            short.append(f"Insufficient cpu ({format_cpu(max(self.cpu, 0))} free, {format_cpu(need.cpu)} requested)")
        if need.memory > self.memory:
            short.append(
                f"Insufficient memory ({format_memory(max(self.memory, 0))} free, "
                f"{format_memory(need.memory)} requested)"
            )
        return ", ".join(short) or None


ZERO = Resources()


def format_cpu(milli: int) -> str:
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def format_memory(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if (n >= size and n % size == 0) or n >= 10 * size:
            value = n / size
            return f"{value:.0f}{unit}" if value == int(value) or value >= 100 else f"{value:.1f}{unit}"
    return str(n)


@functools.lru_cache(maxsize=4096)
def _milli(value: str) -> int:
    # Quantity.MilliValue rounds up (apimachinery resource/quantity.go).
    return math.ceil(parse_quantity(value) * 1000)


@functools.lru_cache(maxsize=4096)
def _whole(value: str) -> int:
    # Quantity.Value rounds up.
    return math.ceil(parse_quantity(value))


def _amount(values: Mapping[str, Any], name: str, parse: Any) -> int:
    value = values.get(name)
    if value is None:
        return 0
    try:
        return int(parse(str(value)))
    except QuantityError:
        return 0  # the API server never stores one; a hand-made snapshot counts it as nothing


def _requests(resources: Mapping[str, Any] | None) -> tuple[int, int]:
    if not resources:
        return 0, 0
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    cpu = requests if "cpu" in requests else limits
    memory = requests if "memory" in requests else limits
    return _amount(cpu, "cpu", _milli), _amount(memory, "memory", _whole)


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the pod takes from its node's allocatable, as kube-scheduler counts it (one pod slot)."""
    spec = pod.get("spec") or {}
    cpu = memory = 0
    for c in spec.get("containers") or ():
        c_cpu, c_mem = _requests(c.get("resources"))
        cpu += c_cpu
        memory += c_mem
    inits: Iterable[Mapping[str, Any]] = spec.get("initContainers") or ()
    if inits:
        side_cpu = side_mem = init_cpu = init_mem = 0
        for c in inits:
            c_cpu, c_mem = _requests(c.get("resources"))
            if c.get("restartPolicy") == "Always":  # a sidecar runs alongside the app containers
                cpu += c_cpu
                memory += c_mem
                side_cpu += c_cpu
                side_mem += c_mem
                c_cpu, c_mem = side_cpu, side_mem
            else:
                c_cpu, c_mem = c_cpu + side_cpu, c_mem + side_mem
            init_cpu, init_mem = max(init_cpu, c_cpu), max(init_mem, c_mem)
        cpu, memory = max(cpu, init_cpu), max(memory, init_mem)
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    if "cpu" in pod_level:
        cpu = _amount(pod_level, "cpu", _milli)
    if "memory" in pod_level:
        memory = _amount(pod_level, "memory", _whole)
    overhead = spec.get("overhead") or {}
    if overhead:
        cpu += _amount(overhead, "cpu", _milli)
        memory += _amount(overhead, "memory", _whole)
    return Resources(cpu, memory, 1)


def node_allocatable(node: Mapping[str, Any]) -> Resources | None:
    """The node's allocatable CPU, memory and pods; None when it states neither CPU nor memory."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if "cpu" not in allocatable and "memory" not in allocatable:
        return None
    big = 1 << 62  # a resource the node does not state does not limit it
    return Resources(
        _amount(allocatable, "cpu", _milli) if "cpu" in allocatable else big,
        _amount(allocatable, "memory", _whole) if "memory" in allocatable else big,
        _amount(allocatable, "pods", _whole) if "pods" in allocatable else big,
    )
