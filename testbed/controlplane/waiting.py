"""Waiting on the test bed: poll until something is true, or fail saying what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Poll fn() until it returns something truthy; fail with `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def running_pods(core: Any, namespace: str, selector: str) -> list[Any]:
    """Pods matching `selector` that are Running and not being deleted."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
