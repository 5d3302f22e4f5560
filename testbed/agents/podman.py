"""A pod template run with podman as a kubelet would, for the image tests.

The flags podman needs on this kind of machine are `toolchain.podman_flags.host_flags()`, shared
with `make image`. `PodmanPod` runs one pod of a Deployment's template (the chart's, as `helm install`
stored it) in a container on the host network: env with field references resolved, the Secret and
ConfigMap volumes as read-only mounts, emptyDirs as tmpfs, the service-account token from the
TokenRequest API at the path a kubelet mounts it, the securityContext as podman flags, and the
readiness probe polled. Nothing is simulated that the agent could observe differently in a pod,
except the network: the host's, with the API server at KUBERNETES_SERVICE_HOST=127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.podman_flags import host_flags

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"  # where a kubelet projects the token


class PodError(RuntimeError):
    """The pod cannot run as its template says (what a kubelet would report), or podman failed."""


def podman(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise PodError(f"podman {' '.join(args[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def image_config(image: str) -> dict[str, Any]:
    """The image's OCI config (User, Entrypoint, Env, ExposedPorts, ...)."""
    inspected = json.loads(podman("image", "inspect", image).stdout)
    return dict(inspected[0].get("Config") or {})


def _field_ref(path: str, pod: dict[str, str]) -> str:
    known = {
        "metadata.name": pod["name"],
        "metadata.namespace": pod["namespace"],
        "spec.nodeName": pod["node"],
        "spec.serviceAccountName": pod["serviceAccount"],
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path not in known:
        raise PodError(f"fieldRef {path} is not supported by the test bed's pod runner")
    return known[path]


def resolve_env(container: dict[str, Any], pod: dict[str, str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        source = var.get("valueFrom")
        if source is None:  # the API drops an empty value: "" then
            env[var["name"]] = str(var.get("value") or "")
        elif "fieldRef" in source:
            env[var["name"]] = _field_ref(source["fieldRef"]["fieldPath"], pod)
        else:
            raise PodError(f"env {var['name']}: only values and fieldRefs are supported, not {source}")
    return env


def _user(security: dict[str, Any], image_user: str) -> tuple[str | None, int]:
    """(podman --user value or None for the image's, the uid the process will run as)."""
    uid, gid = security.get("runAsUser"), security.get("runAsGroup")
    if uid is None:
        user = (image_user or "0").split(":")[0]
        if not user.isdigit():
            # A kubelet cannot verify runAsNonRoot for a user name either (it refuses to start).
            raise PodError(f"image user {image_user!r} is not numeric: runAsNonRoot cannot be verified")
        return None, int(user)
    return (f"{uid}:{gid}" if gid is not None else str(uid)), int(uid)


def security_flags(pod_security: dict[str, Any], container: dict[str, Any], image_user: str) -> list[str]:
    """The pod's and the container's securityContext as podman flags (the container's wins)."""
    sc = {**pod_security, **(container.get("securityContext") or {})}
    user, uid = _user(sc, image_user)
    if sc.get("runAsNonRoot") and uid == 0:
        raise PodError("container has runAsNonRoot and image will run as root")
    flags = ["--user", user] if user else []
    if sc.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]  # no writable /tmp /run unless mounted
    if sc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    caps = sc.get("capabilities") or {}
    flags += [f"--cap-drop={c}" for c in caps.get("drop") or []]
    flags += [f"--cap-add={c}" for c in caps.get("add") or []]
    return flags


@dataclass
class PodmanPod:
    """One pod of `template` (a Deployment's spec.template), run in a podman container.

    `volumes` holds each Secret/ConfigMap volume's files by volume name (the caller reads them from
    the API, as a kubelet does); `sa_files` the service-account mount (token, ca.crt, namespace).
    """

    name: str
    namespace: str
    template: dict[str, Any]
    image: str
    workdir: Path
    volumes: dict[str, dict[str, bytes]]
    sa_files: dict[str, bytes]
    extra_env: dict[str, str] = field(default_factory=dict)
    container_id: str = ""

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.template["spec"])

    @property
    def container(self) -> dict[str, Any]:
        (c,) = self.spec["containers"]  # the agent's pod has one container
        return dict(c)

    def _write(self, name: str, files: dict[str, bytes]) -> Path:
        d = self.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)  # the container's non-root user reads it, as a Secret volume's 0644 files
        for key, data in files.items():
            (d / key).write_bytes(data)
            (d / key).chmod(0o644)
        return d

    def _mount_flags(self) -> list[str]:
        by_name = {v["name"]: v for v in self.spec.get("volumes") or []}
        flags: list[str] = []
        for m in self.container.get("volumeMounts") or []:
            vol = by_name[m["name"]]
            if "emptyDir" in vol:
                size = (vol["emptyDir"] or {}).get("sizeLimit", "64Mi").replace("Mi", "m").replace("Gi", "g")
                flags += ["--tmpfs", f"{m['mountPath']}:rw,size={size},mode=1777"]
            elif "secret" in vol or "configMap" in vol:
                src = self._write(f"vol-{m['name']}", self.volumes[m["name"]])
                flags += ["-v", f"{src}:{m['mountPath']}:ro"]
            else:
                raise PodError(f"volume {m['name']}: only secret, configMap and emptyDir are supported")
        if self.spec.get("automountServiceAccountToken", True):
            flags += ["-v", f"{self._write('serviceaccount', self.sa_files)}:{SA_MOUNT}:ro"]
        return flags

    def run_args(self, api_port: int) -> list[str]:
        pod = {
            "name": self.name,
            "namespace": self.namespace,
            "node": "host",
            "serviceAccount": self.spec.get("serviceAccountName", "default"),
        }
        env = {
            **resolve_env(self.container, pod),
            # What the kubelet injects for the `kubernetes` Service; here the API server itself.
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api_port),
            **self.extra_env,
        }
        user = str(image_config(self.image).get("User") or "")
        args = ["run", "-d", "--name", self.name, "--network", "host", *host_flags()]
        args += security_flags(self.spec.get("securityContext") or {}, self.container, user)
        args += self._mount_flags()
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        if command := self.container.get("command"):
            args += ["--entrypoint", json.dumps(command)]  # podman takes a JSON list for several words
        return [*args, self.image, *(self.container.get("args") or [])]

    def start(self, api_port: int) -> PodmanPod:
        podman("rm", "-f", self.name, check=False)  # a container left by a killed earlier run
        self.container_id = podman(*self.run_args(api_port)).stdout.strip()
        return self

    def _probe_url(self) -> str:
        probe = self.container["readinessProbe"]["httpGet"]
        port = probe["port"]
        if isinstance(port, str):  # a named port: the container's
            port = next(p["containerPort"] for p in self.container["ports"] if p["name"] == port)
        return f"{probe.get('scheme', 'HTTP').lower()}://127.0.0.1:{port}{probe['path']}"

    def ready(self) -> bool:
        """The readiness probe as a kubelet runs it (HTTPS without verifying the certificate)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(self._probe_url(), timeout=3, context=ctx) as resp:  # noqa: S310
                return 200 <= int(resp.status) < 400
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False).stdout.strip()
        return state == "true"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if not self.running():
                raise PodError(f"the container exited:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise PodError(f"not ready after {timeout:.0f}s:\n{self.logs()}")
            time.sleep(0.5)

    def logs(self, lines: int = 80) -> str:
        proc = podman("logs", "--tail", str(lines), self.name, check=False)
        return proc.stdout + proc.stderr

    def stop(self) -> None:
        with contextlib.suppress(PodError, subprocess.TimeoutExpired):
            podman("rm", "-f", "-t", "5", self.name, check=False, timeout=60)


@contextlib.contextmanager
def service_ip(address: str) -> Any:
    """Make a Service's ClusterIP reach the host, as kube-proxy would make it reach the pod: the
    address on the loopback device (the agent listens on 0.0.0.0 with host networking)."""
    if shutil.which("ip") is None:
        raise PodError("`ip` (iproute2) is needed to give the Service's ClusterIP to the host")
    added = subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], capture_output=True, text=True)
    if added.returncode != 0 and "File exists" not in added.stderr:
        raise PodError(f"ip addr add {address}/32 dev lo: {added.stderr.strip()}")
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], capture_output=True, check=False)
