"""The test bed's HAMi mode: the real HAMi scheduler as the ``hami-scheduler`` profile's extender.

Set ``HAMI_SCHEDULER_BIN`` to a HAMi ``scheduler`` binary (an operator extracts it from HAMi's
scheduler image; a developer may build one from HAMi's public source, outside this repository).
Nothing of HAMi is part of this repository: this module only runs a binary it is given, with the
configuration HAMi's chart (``charts/hami``, v2.10.0) renders by default:

- the extender as in ``templates/scheduler/configmap.yaml``: a kube-scheduler of its own whose only
  profile is ``hami-scheduler``, calling HAMi over HTTPS (``tlsConfig.insecure``, as the chart
  does with its admission webhook on), ``filter`` + ``bind``, ``nodeCacheCapable``, weight 1,
  ``httpTimeout: 30s`` and the chart's ``managedResources`` (all ``ignoredByScheduler``);
- the scheduler's flags as in ``templates/scheduler/deployment.yaml`` with the chart's default
  values (node policy binpack, GPU policy spread, ``--force-overwrite-default-scheduler``);
- the device config as ``templates/scheduler/device-configmap.yaml`` renders it by default;
- the mutating webhook ``vgpu.hami.io`` as in ``templates/scheduler/webhook.yaml`` (its
  ``customURL`` form): CREATE of pods, ``failurePolicy: Ignore``, ``reinvocationPolicy: Never``,
  skipping namespaces and pods labelled ``hami.io/webhook=ignore``.

What the device plugin does after Bind (its Allocate, which needs a kubelet and a GPU) is played by
``DevicePluginPostBind``: nothing else of HAMi's work is simulated in this mode.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from hami_place_core import annotations as ann
from testbed.controlplane.processes import Process, StartupError, free_port, http_ok, wait_until

ENV = "HAMI_SCHEDULER_BIN"
SCHEDULER_NAME = "hami-scheduler"
WEBHOOK_CONFIGURATION = "hami-webhook"
NODE_LOCK = "hami.io/mutex.lock"  # HAMi pkg/util/nodelock/nodelock.go NodeLockKey
NODE_LOCK_SEP = ","
BIND_PHASE_ALLOCATING = "allocating"  # HAMi pkg/util/types.go DeviceBindAllocating

# The chart's default values (charts/hami/values.yaml) as device-configmap.yaml renders them.
DEVICE_CONFIG: dict[str, Any] = {
    "nvidia": {
        "resourceCountName": "nvidia.com/gpu",
        "resourceMemoryName": "nvidia.com/gpumem",
        "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
        "resourceCoreName": "nvidia.com/gpucores",
        "resourcePriorityName": "nvidia.com/priority",
        "overwriteEnv": False,
        "defaultMemory": 0,
        "defaultCores": 0,
        "defaultGPUNum": 1,
        "preConfiguredDeviceMemory": 0,
        "memoryFactor": 1,
        "deviceSplitCount": 10,
        "deviceMemoryScaling": 1,
        "deviceCoreScaling": 1,
        "enableNumaTopology": False,
        "gpuCorePolicy": "default",
        "libCudaLogLevel": 1,
        "runtimeClassName": "",
    },
    "cambricon": {
        "resourceCountName": "cambricon.com/vmlu",
        "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
        "resourceCoreName": "cambricon.com/mlu.smlu.vcore",
    },
    "hygon": {
        "resourceCountName": "hygon.com/dcunum",
        "resourceMemoryName": "hygon.com/dcumem",
        "resourceCoreName": "hygon.com/dcucores",
        "memoryFactor": 1,
    },
    "metax": {
        "resourceCountName": "metax-tech.com/gpu",
        "resourceVCountName": "metax-tech.com/sgpu",
        "resourceVMemoryName": "metax-tech.com/vmemory",
        "resourceVCoreName": "metax-tech.com/vcore",
        "sgpuTopologyAware": False,
    },
}

# charts/hami/templates/_helpers.tpl "hami-vgpu.scheduler.managedResources" with default values.
MANAGED_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
    "cambricon.com/vmlu",
    "hygon.com/dcunum",
    "hygon.com/dcumem",
    "hygon.com/dcucores",
    "metax-tech.com/gpu",
    "metax-tech.com/sgpu",
    "metax-tech.com/vcore",
    "metax-tech.com/vmemory",
)


def scheduler_binary() -> Path | None:
    """The HAMi scheduler binary this run uses, or None for the labelled stand-in."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else None


def check_runnable(binary: Path) -> str:
    """HAMi's own version line, or StartupError naming exactly why the binary cannot run."""
    if not binary.is_file():
        raise StartupError(f"{ENV}={binary}: no such file")
    if not os.access(binary, os.X_OK):
        raise StartupError(f"{ENV}={binary}: not executable")
    try:
        out = subprocess.run(  # the operator's own binary, by path
            [str(binary), "version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as e:
        raise StartupError(f"{ENV}={binary}: cannot run it: {e}") from e
    if out.returncode != 0:
        raise StartupError(f"{ENV}={binary} version exited {out.returncode}: {(out.stderr or out.stdout)[-400:]}")
    # HAMi pkg/version/version.go renders "version: ..." and "revision: ..." lines; the scheduler's
    # version command prints them with cobra's cmd.Print, which writes to stderr.
    text = out.stdout + "\n" + out.stderr
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return f"{fields.get('version', '?').strip()} ({fields.get('revision', '?').strip()[:8]})"


def mode_banner() -> str:
    binary = scheduler_binary()
    if binary is None:
        return (
            "HAMi: the labelled stand-in allocates (testbed/hami/allocation_standin.py) and filters "
            "(testbed/hami/filter_standin.py); "
            f"set {ENV} to run the real HAMi scheduler (make test-hami)"
        )
    return f"HAMi: the real scheduler {binary} is the hami-scheduler extender"


def extender_config(url: str) -> dict[str, Any]:
    """One ``extenders`` entry exactly as HAMi's chart writes it (admission webhook enabled)."""
    return {
        "urlPrefix": url,
        "enableHTTPS": True,
        "tlsConfig": {"insecure": True},
        "filterVerb": "filter",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "weight": 1,
        "httpTimeout": "30s",
        "managedResources": [{"name": name, "ignoredByScheduler": True} for name in MANAGED_RESOURCES],
    }


def webhook_configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """HAMi's ``vgpu.hami.io`` mutating webhook (chart defaults, customURL form)."""
    ignore = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1beta1"],
                "clientConfig": {"url": url + "/webhook", "caBundle": base64.b64encode(ca_pem).decode()},
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "namespaceSelector": ignore,
                "objectSelector": ignore,
                "reinvocationPolicy": "Never",
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
                "sideEffects": "None",
                "timeoutSeconds": 10,
            }
        ],
    }


class HamiScheduler:
    """The HAMi scheduler process, on loopback, with a serving certificate from the test bed's CA."""

    def __init__(self, binary: Path, workdir: Path, log_dir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.log_dir = log_dir
        self.port = 0
        self.metrics_port = 0
        self.version = ""
        self.process: Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, kubeconfig: Path, cert: Path, key: Path, timeout: float) -> Process:
        self.version = check_runnable(self.binary)
        config = self.workdir / "hami-device-config.yaml"
        config.write_text(yaml.safe_dump(DEVICE_CONFIG, sort_keys=False))
        self.port, self.metrics_port = free_port(), free_port()
        self.process = Process(
            "hami-scheduler",
            [
                str(self.binary),
                f"--http_bind=127.0.0.1:{self.port}",
                f"--cert_file={cert}",
                f"--key_file={key}",
                f"--scheduler-name={SCHEDULER_NAME}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                "--node-scheduler-policy=binpack",
                "--gpu-scheduler-policy=spread",
                "--force-overwrite-default-scheduler=true",
                f"--device-config-file={config}",
                "--leader-elect=false",
                "--v=3",  # FilteringSucceed/Failed details, without whole node dumps
            ],
            self.log_dir,
        )
        self.process.start_with_env({**os.environ, "KUBECONFIG": str(kubeconfig)}, cwd=self.workdir)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        wait_until("/readyz", lambda: http_ok(self.url + "/readyz", insecure), self.process, timeout)
        return self.process


def nodelock_owner(pod_namespace: str, pod_name: str) -> str:
    # HAMi pkg/util/nodelock/nodelock.go: the lock value ends in ",<namespace>,<name>".
    return NODE_LOCK_SEP + pod_namespace + NODE_LOCK_SEP + pod_name


class DevicePluginPostBind:
    """What HAMi's device plugin does at kubelet Allocate, which needs a real kubelet and GPU.

    HAMi ``pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go``: it erases each container's
    entry of ``hami.io/vgpu-devices-to-allocate`` as it allocates it (``patchErasedAnnotation``),
    then ``PodAllocationSuccess`` sets ``hami.io/bind-phase=success`` and releases the node lock
    the scheduler's Bind took (``nodelock.ReleaseNodeLock``, only if this pod owns it). Which GPUs
    the pod gets is HAMi's Filter's choice; this thread never changes it.
    """

    def __init__(self, api: Any, interval: float = 0.1) -> None:
        self.api = api
        self.interval = interval
        self.completed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hami-device-plugin-post-bind")

    def start(self) -> DevicePluginPostBind:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def run_forever(self) -> None:
        self._run()

    def _run(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a test helper relists through API hiccups
                self._list_then_watch(core)
            self._stop.wait(self.interval)

    def _list_then_watch(self, core: Any) -> None:
        from kubernetes import watch

        bound = "spec.nodeName!="
        listing = core.list_pod_for_all_namespaces(field_selector=bound)
        for pod in listing.items:
            self._consider(core, pod)
        stream = watch.Watch().stream(
            core.list_pod_for_all_namespaces,
            field_selector=bound,
            resource_version=listing.metadata.resource_version,
            timeout_seconds=30,
        )
        for event in stream:
            if self._stop.is_set():
                return
            if event["type"] in ("ADDED", "MODIFIED"):
                self._consider(core, event["object"])

    def _consider(self, core: Any, pod: Any) -> None:
        annotations = pod.metadata.annotations or {}
        if annotations.get(ann.POD_BIND_PHASE) == BIND_PHASE_ALLOCATING and not pod.metadata.deletion_timestamp:
            with contextlib.suppress(Exception):  # e.g. the pod was deleted in between
                self._allocate(core, pod, annotations)

    def _allocate(self, core: Any, pod: Any, annotations: dict[str, str]) -> None:
        containers = (annotations.get(ann.POD_DEVICES_TO_ALLOCATE) or "").count(";")
        core.patch_namespaced_pod(
            pod.metadata.name,
            pod.metadata.namespace,
            {
                "metadata": {
                    "annotations": {
                        ann.POD_DEVICES_TO_ALLOCATE: ";" * containers,
                        ann.POD_BIND_PHASE: "success",
                    }
                }
            },
        )
        self._release_lock(core, pod.spec.node_name, pod.metadata.namespace, pod.metadata.name)
        self.completed.append(f"{pod.metadata.namespace}/{pod.metadata.name}")

    @staticmethod
    def _release_lock(core: Any, node_name: str, namespace: str, name: str) -> None:
        node = core.read_node(node_name)
        lock = (node.metadata.annotations or {}).get(NODE_LOCK)
        if lock is None or (NODE_LOCK_SEP in lock and not lock.endswith(nodelock_owner(namespace, name))):
            return
        core.patch_node(
            node_name,
            {"metadata": {"annotations": {NODE_LOCK: None}, "resourceVersion": node.metadata.resource_version}},
        )


def post_bind_argv(kubeconfig: Path) -> list[str]:
    """The test bed runs the post-bind step as a component process, so it outlives ``testbed up``."""
    return [sys.executable, "-m", "testbed.hami.scheduler", "post-bind", f"--kubeconfig={kubeconfig}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.hami.scheduler")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("post-bind", help="play HAMi's device-plugin post-bind step until killed")
    run.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args(argv)
    from kubernetes import config

    # SIGTERM (the test bed's stop) keeps its default action: this process holds no state.
    DevicePluginPostBind(config.new_client_from_config(config_file=str(args.kubeconfig))).run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
