"""Typed problems: what a check found wrong, as a code for programs and a message for people.

Callers branch on ``code``; the message is shown as it is (tests and users read it), so two
problems with the same code may word it differently.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    # the placement object itself (any shape the API server or a crafted review could send)
    MALFORMED_SPEC = "MalformedSpec"
    MALFORMED_STATUS = "MalformedStatus"
    MALFORMED_POD = "MalformedPod"
    BAD_GPU_DEVICES = "BadGpuDevices"
    BAD_SELECTOR = "BadSelector"
    REQ_ID_TAKEN = "ReqIDTaken"
    SPEC_FROZEN = "SpecFrozen"
    # the target, against the cluster
    NODE_NOT_FOUND = "NodeNotFound"
    NODE_NOT_READY = "NodeNotReady"
    NODE_UNSCHEDULABLE = "NodeUnschedulable"
    NODE_CONSTRAINTS = "NodeConstraints"  # the pod's nodeSelector, node affinity or tolerations exclude the node
    TARGET_UNRESOLVED = "TargetUnresolved"
    GPU_UNHEALTHY = "GpuUnhealthy"
    GPU_CORDONED = "GpuCordoned"
    NO_GPU_ROOM = "NoGpuRoom"
    NO_NODE_ROOM = "NoNodeRoom"
    # evictPod
    EVICT_POD_NOT_FOUND = "EvictPodNotFound"
    EVICT_POD_MIRROR = "EvictPodMirror"
    EVICT_POD_NO_CONTROLLER = "EvictPodNoController"
    EVICT_POD_DAEMONSET = "EvictPodDaemonSet"
    EVICT_POD_OWNER_UNSUPPORTED = "EvictPodOwnerUnsupported"
    EVICT_POD_NOT_SELECTED = "EvictPodNotSelected"
    EVICTION_NOT_ALLOWED = "EvictionNotAllowed"


# Problems with evictPod itself: a move refused for one of these is NotRecreatable, not InvalidTarget.
EVICT_POD_CODES = frozenset(
    {
        Code.EVICT_POD_NOT_FOUND,
        Code.EVICT_POD_MIRROR,
        Code.EVICT_POD_NO_CONTROLLER,
        Code.EVICT_POD_DAEMONSET,
        Code.EVICT_POD_OWNER_UNSUPPORTED,
        Code.EVICT_POD_NOT_SELECTED,
    }
)


@dataclass(frozen=True)
class Problem:
    code: Code
    message: str

    def __str__(self) -> str:
        return self.message


def messages(problems: Iterable[Problem]) -> list[str]:
    return [p.message for p in problems]


def has_code(problems: Iterable[Problem], *codes: Code) -> bool:
    return any(p.code in codes for p in problems)
