"""Ask the real HAMi scheduler where a case's pod fits: its extender ``filter`` endpoint, directly.

For a batch of cases (testbed/fit_cases.py) the probe creates every case's nodes and preloaded pods,
waits until HAMi has registered the nodes (``hami.io/node-handshake`` patched by its
``RegisterFromNodeAnnotations`` loop) and counts the preloaded pods (its metrics list them), then per
case creates the pod (HAMi's webhook mutates it; a node selector that matches nothing keeps
kube-scheduler from calling HAMi itself) and POSTs ``ExtenderArgs`` with ``NodeNames`` (the chart
sets ``nodeCacheCapable``) to ``/filter``, exactly what kube-scheduler sends. HAMi's ``Filter``
(``pkg/scheduler/scheduler.go``) answers with the chosen node in ``NodeNames`` and the others'
reasons in ``FailedNodes``, and patches its choice of GPUs onto the pod
(``hami.io/vgpu-devices-to-allocate``), which the probe reads back. Nothing is bound.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hami_place_core import annotations as ann
from testbed.cluster import TestBed
from testbed.fit_cases import CASE_LABEL, FitCase, node_manifest, pod_manifest, preloaded_manifest

HANDSHAKE = "hami.io/node-handshake"  # HAMi pkg/util/types.go HandshakeAnnos["NVIDIA"]
UNREGISTERED = "node unregistered"  # HAMi getNodesUsage's reason for a node it has not registered


@dataclass
class HamiAnswer:
    """What HAMi's Filter said about one case."""

    admitted: dict[str, Any] = field(default_factory=dict)  # the pod after HAMi's webhook
    node: str | None = None
    failed: dict[str, str] = field(default_factory=dict)  # node -> HAMi's reason
    devices: str | None = None  # hami.io/vgpu-devices-to-allocate as Filter patched it
    error: str | None = None
    seconds: float = 0.0


class FitProbe:
    def __init__(self, bed: TestBed, namespace: str, timeout: float = 60) -> None:
        if bed.hami is None:
            raise RuntimeError("the fit probe needs the real HAMi scheduler (HAMI_SCHEDULER_BIN)")
        from kubernetes import client

        self.bed = bed
        self.api = bed.api_client()
        self.core: Any = client.CoreV1Api(self.api)  # takes and returns plain dicts here
        self.namespace = namespace
        self.timeout = timeout
        self.filter_url = bed.hami.url + "/filter"
        self.metrics_url = bed.hami.metrics_url
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE  # as the chart's extender config: tlsConfig.insecure

    # ---- one batch ----------------------------------------------------------------------------
    def run(self, cases: list[FitCase]) -> list[HamiAnswer]:
        try:
            self._create_world(cases)
            self._wait_registered(cases)
            return [self.ask(case) for case in cases]
        finally:
            self._delete_world(cases)

    def _create_world(self, cases: Iterable[FitCase]) -> None:
        for case in cases:
            for p in case.preloaded:
                self.core.create_namespaced_pod(self.namespace, preloaded_manifest(case, p))
        for case in cases:
            for n in case.nodes:
                self.core.create_node(node_manifest(case, n))

    def _wait_registered(self, cases: list[FitCase]) -> None:
        nodes = {n.name for c in cases for n in c.nodes}
        pods = {p.name for c in cases for p in c.preloaded}
        deadline = time.monotonic() + self.timeout
        while True:
            listed = self.core.list_node(label_selector=CASE_LABEL).items
            shook = {n.metadata.name for n in listed if (n.metadata.annotations or {}).get(HANDSHAKE)}
            known = self._pods_in_metrics(pods) if pods else set()
            if nodes <= shook and pods <= known:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"HAMi did not register {sorted(nodes - shook)[:5]} or count {sorted(pods - known)[:5]}"
                )
            time.sleep(0.2)

    def _pods_in_metrics(self, names: set[str]) -> set[str]:
        # cmd/scheduler/metrics.go: hami_vgpu_memory_allocated_bytes{...,pod="<name>",...} per
        # container device of every pod HAMi's pod manager holds.
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:  # noqa: S310 - http, loopback
            text = r.read().decode()
        return {n for n in names if f'pod="{n}"' in text}

    def _delete_world(self, cases: Iterable[FitCase]) -> None:
        from kubernetes import client

        for case in cases:
            for name in [case.name, *(p.name for p in case.preloaded)]:
                try:
                    self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
                except client.ApiException as e:
                    if e.status != 404:
                        raise
            for n in case.nodes:
                try:
                    self.core.delete_node(n.name)
                except client.ApiException as e:
                    if e.status != 404:
                        raise

    # ---- one case -----------------------------------------------------------------------------
    def ask(self, case: FitCase) -> HamiAnswer:
        t0 = time.monotonic()
        created = self.core.create_namespaced_pod(self.namespace, pod_manifest(case))
        answer = HamiAnswer(admitted=self.api.sanitize_for_serialization(created))
        for _ in range(50):  # retried only while HAMi has not registered a node yet
            result = self._filter(answer.admitted, case.node_names)
            failed = result.get("failedNodes") or result.get("FailedNodes") or {}
            if UNREGISTERED not in failed.values():
                break
            time.sleep(0.2)
        answer.error = result.get("error") or result.get("Error") or None
        answer.failed = dict(failed)
        chosen = result.get("nodenames") or result.get("NodeNames") or []
        if chosen:
            answer.node = chosen[0]
            pod = self.core.read_namespaced_pod(case.name, self.namespace)
            annotations = pod.metadata.annotations or {}
            answer.devices = annotations.get(ann.POD_DEVICES_TO_ALLOCATE)
            if annotations.get(ann.POD_VGPU_NODE) != answer.node:
                answer.error = f"Filter chose {answer.node} but the pod says {annotations.get(ann.POD_VGPU_NODE)}"
        answer.seconds = time.monotonic() - t0
        return answer

    def _filter(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        body = json.dumps({"pod": pod, "nodenames": nodes}).encode()
        req = urllib.request.Request(  # noqa: S310 - https, loopback
            self.filter_url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30, context=self._tls) as r:  # noqa: S310
            result: dict[str, Any] = json.loads(r.read())
        return result
