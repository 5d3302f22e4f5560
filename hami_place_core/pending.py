"""GPU pods the scheduler could not place: what the autopilot's pendingPods trigger looks for.

kube-scheduler marks a pod it could not place with the condition PodScheduled=False, reason
``Unschedulable`` (``v1.PodReasonUnschedulable``); with HAMi as its extender the message carries
HAMi's Filter reasons (e.g. ``CardInsufficientMemory``; HAMi pkg/scheduler/scheduler.go, Filter,
and the reason constants of pkg/device/common/common.go), and HAMi also records an Event with
reason ``FilteringFailed``. A condition reason of FilteringFailed is taken too, for schedulers that
report HAMi's reason there. Only pods that ask for GPUs (``nvidia.com/gpu`` in a container, as
HAMi's admission reads it: hami_place_core/requests.py) count.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_place_core.requests import pod_request

UNSCHEDULABLE_REASONS = ("Unschedulable", "FilteringFailed")


@dataclass(frozen=True)
class PendingPod:
    pod: Mapping[str, Any]
    since: dt.datetime  # when it became unschedulable
    message: str  # the scheduler's verdict

    @property
    def key(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"


def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def unschedulable(pod: Mapping[str, Any]) -> PendingPod | None:
    """The pod as a PendingPod if the scheduler could not place it and it asks for GPUs."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or spec.get("nodeName") or status.get("phase") not in (None, "Pending"):
        return None
    cond = next(
        (
            c
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        None,
    )
    if cond is None or cond.get("reason") not in UNSCHEDULABLE_REASONS:
        return None
    try:
        if not pod_request(pod, webhook=True).gpu_containers:
            return None
    except (ValueError, TypeError):
        return None  # a request HAMi would refuse at admission: not ours to make room for
    since = _time(cond.get("lastTransitionTime")) or _time(meta.get("creationTimestamp"))
    if since is None:
        return None
    return PendingPod(pod, since, str(cond.get("message") or ""))


def pending_gpu_pods(pods: Iterable[Mapping[str, Any]], now: dt.datetime, after: float) -> list[PendingPod]:
    """Unschedulable GPU pods pending for at least `after` seconds, longest waiting first."""
    out = [p for pod in pods if (p := unschedulable(pod)) is not None and (now - p.since).total_seconds() >= after]
    return sorted(out, key=lambda p: (p.since, p.key))
