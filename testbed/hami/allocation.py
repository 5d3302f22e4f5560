"""Who writes HAMi's allocation in this run: the real HAMi scheduler, or the labelled stand-in.

Tests and tools call ``start_allocator`` instead of starting ``AllocationStandIn`` themselves, so
the same test holds whoever allocates: with ``HAMI_SCHEDULER_BIN`` set, HAMi's Filter chooses the
GPUs and the test bed's post-bind component (testbed/hami/scheduler.py) finishes the bind, so there is
nothing to start; without it, the stand-in writes the allocation for the given namespaces.
"""

from __future__ import annotations

from typing import Any, Protocol

from testbed.hami.allocation_standin import AllocationStandIn
from testbed.hami.scheduler import scheduler_binary


class Allocator(Protocol):
    def stop(self) -> None: ...


class HamiAllocates:
    """Real HAMi is running: its Filter allocates, the test bed's post-bind component binds."""

    def stop(self) -> None:
        return None


def real_hami() -> bool:
    return scheduler_binary() is not None


def start_allocator(
    api: Any, namespaces: set[str] | None, choose_gpus: bool = False, interval: float = 0.2
) -> Allocator:
    """`choose_gpus`: the stand-in also allocates unpinned pods, with the pod's own
    ``hami.io/gpu-scheduler-policy`` or HAMi's default (spread); with real HAMi its Filter decides,
    honouring the same per-pod annotations. A test that needs a layout states it through those
    annotations (and ``nvidia.com/use-gpuuuid``), never by writing HAMi's allocation."""
    if real_hami():
        return HamiAllocates()
    return AllocationStandIn(api, namespaces, interval=interval, choose_gpus=choose_gpus).start()
