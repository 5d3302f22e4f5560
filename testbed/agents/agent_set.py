"""Agent replicas run as local processes behind one webhook registration, for tests and benchmarks.

An `AgentSet` serves the namespaces labelled ``hami-place-agent=<label>``: it starts the agents,
registers the chart's webhooks for that label (testbed/agents/webhooks.py), waits until the API server
calls them, and creates namespaces it serves. `create_placement` waits until every agent serving
the namespace has the new placement cached.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from pathlib import Path
from typing import Any

from hami_place_core import placement as hp
from testbed.agents.agent_process import AgentProcess, RoundRobinProxy
from testbed.agents.tokens import admin_token
from testbed.agents.webhooks import register_webhooks, unregister_webhooks, webhook_configs
from testbed.controlplane.certs import CertificateAuthority
from testbed.controlplane.cluster import TestBed
from testbed.data.placements import placement

_SETS: dict[str, AgentSet] = {}  # namespace label value -> the running agent set serving it


def create_placement(api: Any, ns: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Create a placement and, unless dry-run, wait until every agent serving `ns` has it cached:
    a pod created in the same millisecond could otherwise reach an agent whose watch is behind."""
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)  # untyped: the client takes plain dicts
    core: Any = client.CoreV1Api(api)
    obj = custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body, **kw)
    if kw.get("dry_run"):
        return dict(obj)
    label = (core.read_namespace(ns).metadata.labels or {}).get("hami-place-agent", "")
    s = _SETS.get(label)
    if s is not None:
        name = body["metadata"]["name"]
        deadline = time.monotonic() + 20
        while not s.has_cached(ns, name, api):
            if time.monotonic() > deadline:
                raise AssertionError(f"placement {ns}/{name} never reached the agents' caches")
            time.sleep(0.05)
    return dict(obj)


class AgentSet:
    """One or more agent replicas behind one webhook registration, for namespaces labelled with `label`."""

    def __init__(
        self,
        testbed: TestBed,
        api: Any,
        workdir: Path,
        label: str,
        replicas: int = 1,
        env: dict[str, str] | None = None,
        kubeconfig: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.testbed, self.api, self.label = testbed, api, label
        self.ca = CertificateAuthority(f"agent-{label}-ca")
        # One autopilot intent key for the set, as the chart's Secret is one per release
        # (agent/intents.py): a new leader may finish a move its predecessor recorded.
        workdir.mkdir(parents=True, exist_ok=True)
        key = workdir / f"agent-{label}-intent.key"
        key.write_text(secrets.token_hex(32))
        env = {"HAMI_PLACE_INTENT_KEY_FILE": str(key), **(env or {})}
        self.agents = [
            AgentProcess(
                workdir,
                kubeconfig or testbed.kubeconfig,
                self.ca,
                name=f"agent-{label}-{i}",
                env=env,
                label=label,
                host=host,
                # Every agent under test refuses webhook calls without the API server's client
                # certificate, so every pin in these tests proves that path (agent/tls.py).
                webhook_client=(testbed.webhook_client_ca_file, *testbed.webhook_client_pair()),
            )
            for i in range(replicas)
        ]
        self.proxy: RoundRobinProxy | None = None
        self.created_namespaces: list[str] = []
        self.config_name = f"hami-place-test-{label}"

    @property
    def agent(self) -> AgentProcess:
        return self.agents[0]

    @property
    def namespace_labels(self) -> dict[str, str]:
        """The labels of the namespaces this set serves (its webhooks' and its agents' selector)."""
        return {"hami-place-agent": self.label}

    def start(self, timeout: float = 30) -> AgentSet:
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()  # never leave agent processes behind a failed start
            raise

    def _start(self, timeout: float) -> AgentSet:
        for a in self.agents:
            a.start(timeout)
        url = self.agents[0].url
        if len(self.agents) > 1:
            self.proxy = RoundRobinProxy([("127.0.0.1", a.port) for a in self.agents]).start()
            url = self.proxy.url
        mutating, validating = webhook_configs(
            self.testbed.binary("helm"), self.config_name, url, self.ca.cert_pem, self.namespace_labels
        )
        register_webhooks(self.api, mutating, validating)
        self._wait_active()
        _SETS[self.label] = self
        return self

    def _validations(self) -> float:
        total = 0.0
        for a in self.agents:
            for line in a.get("/metrics")[1].decode().splitlines():
                if line.startswith("hami_place_admission_seconds_count{") and 'webhook="validate"' in line:
                    total += float(line.split()[-1])
        return total

    def _wait_active(self) -> None:
        """Until the API server calls our validating webhook (seen in the agents' own metrics)."""
        from kubernetes import client
        from kubernetes.client import ApiException

        ns = self.namespace("probe")
        custom: Any = client.CustomObjectsApi(self.api)
        body = placement("probe", "probe-00001", {"app": "probe"}, "no-such-node", ["gpu-0"])
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                before = self._validations()
                with contextlib.suppress(ApiException):
                    custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body, dry_run="All")
                if self._validations() > before:
                    return
                time.sleep(0.2)
            raise AssertionError("the agent's webhooks never took effect")
        finally:
            client.CoreV1Api(self.api).delete_namespace(ns)

    def namespace(self, hint: str) -> str:
        """A new namespace this set serves, with its default ServiceAccount ready; deleted by stop()."""
        from kubernetes import client
        from kubernetes.client import ApiException

        core: Any = client.CoreV1Api(self.api)  # untyped: the client takes plain dicts
        slug = re.sub(r"[^a-z0-9-]", "-", hint.lower())[:40].strip("-")
        name = f"{slug}-{secrets.token_hex(3)}"
        core.create_namespace({"metadata": {"name": name, "labels": self.namespace_labels}})
        self.created_namespaces.append(name)
        deadline = time.monotonic() + 30
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                return name
            except ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def has_cached(self, ns: str, name: str, api: Any) -> bool:
        for a in self.agents:
            code, body = a.get(f"/api/v1/placements?namespace={ns}", admin_token(api))
            if code != 200 or name not in {i["name"] for i in json.loads(body).get("items") or []}:
                return False
        return True

    def logs(self) -> str:
        return "\n".join(f"===== {a.name} =====\n{a.log_tail(40)}" for a in self.agents)

    def stop(self) -> None:
        from kubernetes import client
        from kubernetes.client import ApiException

        _SETS.pop(self.label, None)
        core = client.CoreV1Api(self.api)
        for ns in self.created_namespaces:  # their pods hold GPU allocations other tests must not see
            with contextlib.suppress(ApiException):
                core.delete_namespace(ns, propagation_policy="Background")
        unregister_webhooks(self.api, self.config_name)
        if self.proxy:
            self.proxy.stop()
        for a in self.agents:
            a.stop()
