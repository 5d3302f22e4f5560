"""Run the hami-place agent as local processes against the test bed.

The agent is started exactly as in a pod (``python -m agent`` with HAMI_PLACE_* variables),
serving TLS on 127.0.0.1 with a certificate from its own CA. The webhook configurations (the
chart's, testbed/agents/webhooks.py) point at it with ``clientConfig.url``. With several replicas, a
round-robin TCP proxy (TLS passes through) stands in for the Service, so the API server's calls
really are spread over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from testbed.controlplane.certs import CertificateAuthority
from testbed.controlplane.cluster import WEBHOOK_CLIENT_CN
from testbed.controlplane.processes import Process, StartupError, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


class AgentProcess:
    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path,
        ca: CertificateAuthority,
        name: str = "agent",
        env: dict[str, str] | None = None,
        label: str = "single",
        host: str = "127.0.0.1",
        webhook_client: tuple[Path, Path, Path] | None = None,
    ) -> None:
        """`webhook_client` = (CA file, client certificate, client key): when given, the agent
        accepts webhook calls only with a certificate from that CA (the test bed's API server
        presents one), and `webhook_ssl_context()` presents the same pair, as the API server does."""
        self.label = label
        self.webhook_client = webhook_client
        self.host = host
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.ca = ca
        self.name = name
        self.port = free_port()
        self.proxy_port = free_port()  # the read-only service-proxy listener
        self.metrics_port = free_port()  # plain HTTP: metrics and probes
        self.extra_env = env or {}
        workdir.mkdir(parents=True, exist_ok=True)
        self.cert, self.key = ca.issue_server(["127.0.0.1", "localhost"]).write(workdir, f"{name}-tls")
        self.proc: Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")},
            "HAMI_PLACE_HOST": self.host,
            "HAMI_PLACE_PORT": str(self.port),
            "HAMI_PLACE_PROXY_PORT": str(self.proxy_port),
            "HAMI_PLACE_METRICS_PORT": str(self.metrics_port),
            "HAMI_PLACE_TLS_CERT_FILE": str(self.cert),
            "HAMI_PLACE_TLS_KEY_FILE": str(self.key),
            "HAMI_PLACE_KUBECONFIG": str(self.kubeconfig),
            "HAMI_PLACE_AGENT_ID": self.name,
            "HAMI_PLACE_CLAIM_LEASE_SECONDS": "30",
            "HAMI_PLACE_EXCLUDED_NAMESPACES": "kube-system",
            # Each agent set acts only on its own namespaces, as its webhooks do.
            "HAMI_PLACE_NAMESPACE_SELECTOR": f"hami-place-agent={self.label}",
            "PYTHONUNBUFFERED": "1",
            **(
                {
                    "HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE": str(self.webhook_client[0]),
                    "HAMI_PLACE_WEBHOOK_CLIENT_NAMES": WEBHOOK_CLIENT_CN,
                }
                if self.webhook_client
                else {}
            ),
            **self.extra_env,
        }

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    def webhook_ssl_context(self) -> ssl.SSLContext:
        """What the API server uses to call this agent's webhooks (its client pair, when enforced)."""
        ctx = self.ssl_context()
        if self.webhook_client:
            ctx.load_cert_chain(str(self.webhook_client[1]), str(self.webhook_client[2]))
        return ctx

    def get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(  # noqa: S310 - https only
            self.url + path, headers={"Authorization": f"Bearer {token}"} if token else {}
        )
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ssl_context()) as resp:  # noqa: S310
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, b""  # not listening (yet, or any more)

    def start(self, timeout: float = 30) -> AgentProcess:
        self.proc = Process(self.name, [sys.executable, "-m", "agent"], self.workdir)
        self.proc.start_with_env(self.env(), cwd=REPO)
        wait_until("/readyz 200", lambda: self.get("/readyz")[0] == 200, self.proc, timeout)
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()

    def kill(self) -> None:
        """SIGKILL, as a crashed pod would die."""
        if self.proc and self.proc.proc:
            self.proc.proc.kill()
            self.proc.proc.wait()

    def log_tail(self, lines: int = 60) -> str:
        return self.proc.log_tail(lines) if self.proc else ""


class RoundRobinProxy:
    """TCP proxy on 127.0.0.1 spreading connections over backends (TLS is passed through)."""

    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self.port = free_port()
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.connections = [0] * len(backends)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        start = self._next
        self._next += 1
        # A backend that refuses connections (a killed replica) is skipped, as a Service drops the
        # endpoint of a pod that is gone: the next live one takes the connection.
        for k in range(len(self.backends)):
            i = (start + k) % len(self.backends)
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.backends[i])
            except OSError:
                continue
            self.connections[i] += 1
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            return
        writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._server = server
        self._ready.set()
        self._loop.run_forever()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.stop()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        self._thread.join(5)
        self._loop.close()


def host_ip() -> str:
    """A non-loopback address of this machine: the API server refuses loopback Endpoints, and its
    service proxy must reach the agent as it would a pod IP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.254", 9))  # no packet is sent: this only picks the outgoing interface
        ip = str(s.getsockname()[0])
    if ip.startswith("127."):
        raise StartupError("this machine has no non-loopback IPv4 address for the agent's Service Endpoints")
    return ip


PROGRESS_LABEL = "scheduling.hami.placement.com/progress"  # chart/templates/service.yaml


def expose_agent_service(api: Any, agent: AgentProcess, namespace: str, name: str) -> None:
    """A selector-less Service plus Endpoints pointing at a local agent's listeners, as the chart's
    Service points at the agent pods: port `https` (main) and `proxy` (read-only, service proxy)."""
    from kubernetes import client
    from kubernetes.client import ApiException

    core = client.CoreV1Api(api)
    ip = host_ip()
    # The API server proxies only to Endpoints whose targetRef is a Pod with that IP
    # (pkg/registry/core/service/storage: isValidAddress). This stand-in Pod is never scheduled
    # (no such scheduler); its status carries the agent's address as a kubelet would write it.
    pod_name = f"{name}-local"
    pod: Any = {
        "metadata": {"name": pod_name, "labels": {"app": "gpu-descheduler-webhook"}},
        "spec": {
            "schedulerName": "no-such-scheduler",
            "containers": [{"name": "agent", "image": "local/hami-place-agent:dev"}],
        },
    }
    with contextlib.suppress(ApiException):
        core.create_namespaced_pod(namespace, pod)
    core.patch_namespaced_pod_status(
        pod_name, namespace, {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}
    )
    ports = [("https", 8083, agent.port), ("proxy", 8084, agent.proxy_port)]
    service: Any = {
        # labelled as the chart labels it with progressProxy on: how the plugin finds it by itself
        "metadata": {"name": name, "namespace": namespace, "labels": {PROGRESS_LABEL: "true"}},
        "spec": {"ports": [{"name": n, "port": p, "targetPort": t, "protocol": "TCP"} for n, p, t in ports]},
    }
    endpoints: Any = {
        "metadata": {"name": name, "namespace": namespace},
        "subsets": [
            {
                "addresses": [{"ip": ip, "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod_name}}],
                "ports": [{"name": n, "port": t, "protocol": "TCP"} for n, _, t in ports],
            }
        ],
    }
    calls: Any = (
        (core.create_namespaced_service, core.replace_namespaced_service, service),
        (core.create_namespaced_endpoints, core.replace_namespaced_endpoints, endpoints),
    )
    for create, replace, body in calls:
        try:
            create(namespace, body)
        except ApiException as e:
            if e.status != 409:
                raise
            if body is endpoints:
                replace(name, namespace, body)
