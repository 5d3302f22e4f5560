"""Ask the real HAMi scheduler where a case's pod fits: its extender ``filter`` endpoint, directly.

For a batch of cases (testbed/hami/fit_cases.py) the probe creates every case's nodes and preloaded pods,
waits until HAMi's ``RegisterFromNodeAnnotations`` loop has registered the nodes, then per
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
from testbed.controlplane.cluster import TestBed
from testbed.hami.fit_cases import FitCase, node_manifest, pod_manifest, preloaded_manifest

# HAMi getNodesUsage's reasons for a node it has not registered yet, or registered between listing
# the nodes and looking this one up (pkg/scheduler/scheduler.go): asked again, they are transient.
NOT_YET = ("node unregistered", "node usage unavailable")


def _field(result: dict[str, Any], name: str) -> Any:
    # kube-scheduler's extender/v1 types carry no json tags, so HAMi writes Go's field names
    # ("NodeNames", "FailedNodes", "Error"); kube-scheduler decodes either case.
    return result.get(name, result.get(name[0].lower() + name[1:]))


class ProbeError(RuntimeError):
    """HAMi answered with an error, or its answer and the pod disagree."""


@dataclass
class HamiAnswer:
    """What HAMi's Filter said about one case."""

    admitted: dict[str, Any] = field(default_factory=dict)  # the pod after HAMi's webhook
    node: str | None = None  # HAMi's choice among all the case's nodes
    failed: dict[str, str] = field(default_factory=dict)  # node -> HAMi's reason
    # node -> hami.io/vgpu-devices-to-allocate as Filter patched it, for every node that fits
    devices: dict[str, str | None] = field(default_factory=dict)
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
        """Until HAMi has registered every node of the batch (its register loop wakes on node adds).

        HAMi is asked for a pod that fits no node (more GPUs than any node has): a registered
        node fails with ``NodeInsufficientDevice``, one not registered yet with ``node
        unregistered``. A failed ``Filter`` writes nothing but an Event. The preloaded pods were
        created before the nodes, so HAMi's pod informer has seen them by then. (A case whose node
        is caught in the middle anyway is asked again: :meth:`_ask_nodes`.)
        """
        nodes = [n.name for c in cases for n in c.nodes]
        deadline = time.monotonic() + self.timeout
        while nodes and time.monotonic() < deadline:
            failed = _field(self._filter(self._unfittable(), nodes), "FailedNodes") or {}
            if len(failed) == len(nodes) and not set(NOT_YET) & set(failed.values()):
                return
            time.sleep(0.2)

    def _unfittable(self) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": "64"}
        return {
            "metadata": {"name": "fit-probe-registration", "namespace": self.namespace, "uid": "fit-probe"},
            "spec": {
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}]
            },
        }

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
        """HAMi's node choice among all the case's nodes, then each other node alone.

        On success ``Filter`` returns only the chosen node (no ``FailedNodes``), so whether the pod
        fits each other node, and on which GPUs, is asked node by node. Every call starts by
        dropping the pod's previous assignment (``TakeAndDeletePod``), so the calls are independent.
        """
        t0 = time.monotonic()
        created = self.core.create_namespaced_pod(self.namespace, pod_manifest(case))
        answer = HamiAnswer(admitted=self.api.sanitize_for_serialization(created))
        try:
            chosen, answer.failed, devices = self._ask_nodes(case, answer.admitted, case.node_names)
            answer.node = chosen
            if chosen is not None:
                answer.devices[chosen] = devices
                for name in case.node_names:
                    if name != chosen:
                        fits, failed, devices = self._ask_nodes(case, answer.admitted, [name])
                        answer.failed.update(failed)
                        if fits is not None:
                            answer.devices[fits] = devices
        except ProbeError as e:
            answer.error = str(e)
        answer.seconds = time.monotonic() - t0
        return answer

    def _ask_nodes(
        self, case: FitCase, pod: dict[str, Any], nodes: list[str]
    ) -> tuple[str | None, dict[str, str], str | None]:
        """(chosen node or None, failed node -> reason, the GPUs Filter patched onto the pod)."""
        deadline = time.monotonic() + self.timeout
        while True:  # asked again only while HAMi has not registered a node yet
            result = self._filter(pod, nodes)
            failed = _field(result, "FailedNodes") or {}
            if not set(NOT_YET) & set(failed.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if _field(result, "Error"):
            raise ProbeError(_field(result, "Error"))
        chosen = (_field(result, "NodeNames") or [None])[0]
        if chosen is None:
            return None, dict(failed), None
        annotations = self.core.read_namespaced_pod(case.name, self.namespace).metadata.annotations or {}
        if annotations.get(ann.POD_VGPU_NODE) != chosen:
            raise ProbeError(f"Filter chose {chosen} but the pod says {annotations.get(ann.POD_VGPU_NODE)}")
        return chosen, dict(failed), annotations.get(ann.POD_DEVICES_TO_ALLOCATE)

    def _filter(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        body = json.dumps({"pod": pod, "nodenames": nodes}).encode()
        req = urllib.request.Request(  # noqa: S310 - https, loopback
            self.filter_url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30, context=self._tls) as r:  # noqa: S310
            result: dict[str, Any] = json.loads(r.read())
        return result
