"""HamiPodPlacement objects on the test bed: a manifest builder and reads."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any

from hami_place_core import placement as hp


def placement(
    name: str, req_id: str, labels: dict[str, str], node: str, gpus: list[str], evict: str | None = None
) -> dict[str, Any]:
    """A placement of the pod labelled `labels` onto `gpus` of `node` (moving pod `evict`, if given)."""
    spec: dict[str, Any] = {
        "reqID": req_id,
        "podSelector": {"matchLabels": labels},
        "nodeName": node,
        "gpuDevices": gpus,
    }
    if evict:
        spec["evictPod"] = evict
    return {"apiVersion": hp.API_VERSION, "kind": hp.KIND, "metadata": {"name": name}, "spec": spec}


def get_placement(api: Any, ns: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)
    return dict(custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, name))


def placement_status(api: Any, ns: str, name: str) -> dict[str, Any]:
    """The placement's status ({} until the agent writes one)."""
    return dict(get_placement(api, ns, name).get("status") or {})


def wait_phase(api: Any, ns: str, name: str, phases: Collection[str], timeout: float = 60) -> dict[str, Any]:
    """The placement's status once its phase is one of `phases`; fail with the last status after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        st = placement_status(api, ns, name)
        if st.get("phase") in phases:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} not in {phases} after {timeout}s: {json.dumps(st)[:1500]}")
        time.sleep(0.2)
