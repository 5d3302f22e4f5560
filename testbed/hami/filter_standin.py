"""STAND-IN for HAMi's Filter decision, for the CI mode of the test bed (no HAMi binary).

The test bed runs the real HAMi scheduler when ``HAMI_SCHEDULER_BIN`` names one (testbed/hami/scheduler.py,
``make test-hami``). CI has no HAMi binary, so there the ``hami-scheduler`` profile is a plain
kube-scheduler profile, which only checks the nodes' aggregate ``nvidia.com/*`` resources: a pod
whose request fits no single GPU would be bound anyway. This labelled stand-in is a scheduler
extender of that profile (testbed/controlplane/cluster.py) that imitates the *decision* of HAMi v2.10.0's
``Scheduler.Filter`` (``pkg/scheduler/scheduler.go``): for each candidate node, does the pod fit
the node's GPUs, and if not, HAMi's reason. A pod that fits no GPU then stays Pending with
``PodScheduled=False``, reason ``Unschedulable`` and HAMi-like reasons in the message, exactly as
HAMi leaves it.

It decides with the project's own model of HAMi, nothing else: the cluster as HAMi sees it
(``hami_place_core.state.build_state`` over the live Nodes and Pods, the filtered pod itself left
out as ``Filter`` drops its own stale usage), the pod's request as HAMi's admission leaves it
(``pod_request(webhook=True)``, the ``nvidia.com/use-gputype``/``nouse-gputype``/``use-gpuuuid``
selectors included) and HAMi's Fit over the node's GPUs (``testbed.hami.simulate.fit_on_node``,
per-GPU rules from ``hami_place_core.fit``). A failed node's reason is formatted as HAMi's
``common.GenReason`` (``pkg/device/common/common.go``) writes it from ``NvidiaGPUDevices.Fit``
(``pkg/device/nvidia/device.go``), e.g. ``1/4 CardInsufficientCore, 3/4 CardInsufficientMemory``;
a node without a GPU inventory is ``node unregistered``, and a request for more GPUs than the node
has is ``NodeInsufficientDevice`` (``fitInDevices``, ``pkg/scheduler/score.go``).

What it does NOT do: choose a node or GPUs, write any annotation or bind (kube-scheduler binds;
``testbed/hami/allocation_standin.py`` writes the allocation), count pods bound but not yet allocated
(HAMi counts a pod from its Filter on; here only allocated pods count, so two pods filtered in the
same instant may both pass), quotas, NUMA binding, topology-aware or mutex policies, MIG, init
containers that request GPUs (such a pod passes every node). Pods without a GPU request pass every
node, as HAMi's ``Filter`` lets them. Any error inside the stand-in (the API unreachable or slow,
a malformed request) lets every node pass and is logged: an extender error would block scheduling,
and the extender is configured ``ignorable`` for the same reason.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import (
    NODE_INSUFFICIENT_DEVICE,
    GpuUsage,
    add_usage,
    gpu_fit_reason,
)
from hami_place_core.requests import HAMI_RESOURCES, PodRequest, pod_request
from hami_place_core.state import NodeState, build_state
from testbed.hami.allocation_standin import gpu_policy
from testbed.hami.simulate import fit_on_node

log = logging.getLogger("hami-filter-standin")

COMPONENT = "hami-filter-standin"  # the test bed's component (process and log) name
FILTER_VERB = "filter"
NODE_UNREGISTERED = "node unregistered"  # HAMi getNodesUsage (pkg/scheduler/scheduler.go)
ALLOCATED_CARDS_INSUFFICIENT = "AllocatedCardsInsufficientRequest"  # pkg/device/common/common.go
API_TIMEOUT = 20.0  # seconds per list call; the extender's httpTimeout is longer (cluster.py)


def gen_reason(reasons: Mapping[str, int], cards: int) -> str:
    """HAMi ``common.GenReason``: "<count>/<cards> <reason>" per reason, sorted, comma-joined."""
    return ", ".join(sorted(f"{count}/{cards} {reason}" for reason, count in reasons.items()))


def _is_nvidia(gpu: GpuDevice) -> bool:
    # score.go getNodeResources: the devices whose type contains the request's type ("NVIDIA").
    return "nvidia" in gpu.type.lower()


def _container_reason(request: PodRequest, index: int, node: NodeState, usage: Mapping[str, GpuUsage]) -> str:
    """Why container `index` fits none of its GPU sets, counted over the node's GPUs as
    ``NvidiaGPUDevices.Fit`` counts them when it fails (it walks every GPU then)."""
    req = request.containers[index]
    assert req is not None
    gpus = [g for g in node.devices if _is_nvidia(g)]
    if req.nums > len(gpus):
        return NODE_INSUFFICIENT_DEVICE  # fitInDevices checks this before Fit
    reasons: dict[str, int] = {}
    fitting = 0
    for g in gpus:
        reason = gpu_fit_reason(req, g, usage.get(g.uuid) or GpuUsage(), request.selectors, node.cordoned)
        if reason is None:
            fitting += 1
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    if fitting:
        reasons[ALLOCATED_CARDS_INSUFFICIENT] = fitting
    return gen_reason(reasons, len(gpus))


def node_failure(request: PodRequest, node: NodeState | None, policy: Any = "spread") -> str | None:
    """None if the pod fits `node`'s GPUs as HAMi's Fit judges, else HAMi's reason for the node."""
    if node is None or not node.parseable or not node.devices:
        return NODE_UNREGISTERED
    if fit_on_node(request, node, policy) is not None:
        return None
    # The first container that does not fit, on the usage the containers before it left
    # (fitInDevices places containers one after another, accumulating usage).
    for i, req in enumerate(request.containers):
        if req is None:
            continue
        prefix = PodRequest(init=request.init, containers=request.containers[:i], selectors=request.selectors)
        placed = fit_on_node(prefix, node, policy)
        if placed is None:  # cannot happen (the prefix fitted one step earlier); stay safe
            break
        with_this = PodRequest(init=request.init, containers=request.containers[: i + 1], selectors=request.selectors)
        if fit_on_node(with_this, node, policy) is not None:
            continue
        usage = {uuid: u.copy() for uuid, u in node.usage.items()}
        by_uuid = {g.uuid: g for g in node.devices}
        for pos, devices in enumerate(placed):
            creq = request.containers[pos]
            for d in devices:
                if creq is not None and d.uuid in by_uuid:
                    add_usage(usage.setdefault(d.uuid, GpuUsage()), creq, by_uuid[d.uuid])
        return _container_reason(request, i, node, usage)
    return NODE_INSUFFICIENT_DEVICE


def _field(obj: Mapping[str, Any], name: str) -> Any:
    # kube-scheduler's extender/v1 types carry no json tags: Go's field names ("Pod", "NodeNames");
    # accept the lower-case spelling too, as Go's decoder does.
    return obj.get(name, obj.get(name[0].lower() + name[1:]))


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def filter_result(
    args: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The ExtenderFilterResult for ExtenderArgs `args` (``nodeCacheCapable``: node names only),
    given the cluster's Nodes and Pods as plain JSON. Raises on malformed input (the caller lets
    every node pass then)."""
    pod = _field(args, "Pod") or {}
    names = [str(n) for n in (_field(args, "NodeNames") or [])]
    request = pod_request(pod, webhook=True)  # as HAMi's admission webhook leaves the pod
    if not request.wants_gpu:
        return {"NodeNames": names, "FailedNodes": {}, "Error": ""}
    if any(r is not None for r in request.init):
        log.info("%s/%s: init containers request GPUs (not modelled): every node passes", *_key(pod))
        return {"NodeNames": names, "FailedNodes": {}, "Error": ""}
    me = _key(pod)
    wanted = set(names)
    state = build_state(
        (n for n in nodes if (n.get("metadata") or {}).get("name") in wanted),
        (p for p in pods if _key(p) != me),  # Filter drops the pod's own earlier usage first
    )
    policy = gpu_policy(pod) or "spread"  # the choice among GPUs; whether a pod fits a node rarely depends on it
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        reason = node_failure(request, state.nodes.get(name), policy)
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return {"NodeNames": passed, "FailedNodes": failed, "Error": ""}


class FilterStandIn:
    """The extender's HTTP server (plain HTTP on 127.0.0.1) over the live API."""

    def __init__(self, api: Any, port: int = 0, api_timeout: float = API_TIMEOUT) -> None:
        self.api = api
        self.api_timeout = api_timeout
        self.calls = 0
        self.errors = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connection

            def do_GET(self) -> None:
                if self.path in ("/healthz", "/readyz"):
                    self._send(200, b"ok", "text/plain")
                else:
                    self._send(404, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path.rstrip("/") != "/" + FILTER_VERB:
                    self._send(404, b"")
                    return
                out = json.dumps(outer.handle_filter(body)).encode()
                self._send(200, out, "application/json")

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass  # every filter call is logged by handle_filter

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _list(self, kind: str) -> list[dict[str, Any]]:
        # Raw JSON (camelCase, as the model reads it), no model objects: fast on a busy machine.
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        call: Any = core.list_node if kind == "nodes" else core.list_pod_for_all_namespaces
        resp = call(_preload_content=False, _request_timeout=self.api_timeout)
        return list(json.loads(resp.data).get("items") or [])

    def handle_filter(self, body: bytes) -> dict[str, Any]:
        """Never raises: on any error every node passes (logged), so scheduling goes on."""
        self.calls += 1
        t0 = time.monotonic()
        names: list[str] = []
        pod_name = "?"
        try:
            args = json.loads(body)
            names = [str(n) for n in (_field(args, "NodeNames") or [])]
            pod_name = "/".join(_key(_field(args, "Pod") or {}))
            result = filter_result(args, self._list("nodes"), self._list("pods"))
        except Exception as e:  # an extender error would block scheduling
            self.errors += 1
            log.exception("filter %s: %s; every node passes", pod_name, e)
            return {"NodeNames": names, "FailedNodes": {}, "Error": ""}
        log.info(
            "filter %s in %.2fs: passed %s, failed %s",
            pod_name,
            time.monotonic() - t0,
            result["NodeNames"],
            result["FailedNodes"],
        )
        return result

    def start(self) -> FilterStandIn:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="hami-filter-standin")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, so only once started
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()


def extender_config(url: str) -> dict[str, Any]:
    """The ``extenders`` entry of the CI mode's hami-scheduler kube-scheduler.

    As HAMi's chart (testbed/hami/scheduler.py ``extender_config``): ``filter``, ``nodeCacheCapable``,
    ``httpTimeout: 30s``; unlike it: plain HTTP, no ``bind`` (kube-scheduler binds), ``ignorable``
    (an unreachable stand-in never blocks scheduling), and the ``nvidia.com/*`` resources managed
    but not ignored, so kube-scheduler still checks the node's aggregate as before and calls the
    stand-in only for pods that name one of them (pods without GPUs never wait on it).
    """
    return {
        "urlPrefix": url,
        "filterVerb": FILTER_VERB,
        "nodeCacheCapable": True,
        "weight": 1,
        "httpTimeout": "30s",
        "ignorable": True,
        "managedResources": [{"name": name, "ignoredByScheduler": False} for name in HAMI_RESOURCES],
    }


def argv(kubeconfig: Path, port: int) -> list[str]:
    """The test bed runs the stand-in as a component process (its log with the others)."""
    return [sys.executable, "-m", "testbed.hami.filter_standin", f"--kubeconfig={kubeconfig}", f"--port={port}"]


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.hami.filter_standin", description="STAND-IN for HAMi's Filter (CI mode)"
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    opts = parser.parse_args(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    from kubernetes import config

    server = FilterStandIn(config.new_client_from_config(config_file=str(opts.kubeconfig)), opts.port)
    log.info("STAND-IN for HAMi's Filter listening on %s", server.url)
    # SIGTERM (the test bed's stop) keeps its default action: this process holds no state.
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
