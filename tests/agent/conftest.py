"""Fixtures that run the real agent (``python -m agent``) against the test bed."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import placement as hp
from testbed.agent_process import CRD_FILE, AgentProcess, RoundRobinProxy, webhook_configs
from testbed.certs import CertificateAuthority
from testbed.cluster import TestBed


def install_crd(api: Any) -> None:
    ext = client.ApiextensionsV1Api(api)
    crd = yaml.safe_load(CRD_FILE.read_text())
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as e:
        if e.status != 409:
            raise
        current = ext.read_custom_resource_definition(crd["metadata"]["name"])
        crd["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        if any(c.type == "Established" and c.status == "True" for c in got.status.conditions or []):
            return
        time.sleep(0.1)
    raise AssertionError("CRD never became Established")


_SETS: dict[str, AgentSet] = {}  # namespace label value -> the running agent set serving it
_TOKENS: dict[str, str] = {}


def sa_token(api: Any, ns: str, sa: str) -> str:
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
    except ApiException as e:
        if e.status != 409:
            raise
    return str(core.create_namespaced_service_account_token(sa, ns, {"spec": {"expirationSeconds": 3600}}).status.token)


def admin_token(api: Any) -> str:
    """A bearer token with cluster-admin, for the agent's REST API."""
    if "admin" not in _TOKENS:
        rbac = client.RbacAuthorizationV1Api(api)
        try:
            rbac.create_cluster_role_binding(
                {
                    "metadata": {"name": "hami-place-test-reader"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}],
                }
            )
        except ApiException as e:
            if e.status != 409:
                raise
        _TOKENS["admin"] = sa_token(api, "default", "reader")
    return _TOKENS["admin"]


def create_placement(api: Any, ns: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Create a placement and, unless dry-run, wait until every agent serving `ns` has it cached:
    a pod created in the same millisecond could otherwise reach an agent whose watch is behind."""
    obj = client.CustomObjectsApi(api).create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body, **kw)
    if kw.get("dry_run"):
        return dict(obj)
    label = (client.CoreV1Api(api).read_namespace(ns).metadata.labels or {}).get("hami-place-agent", "")
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
            self.config_name, url, self.ca.cert_pem, {"matchLabels": {"hami-place-agent": self.label}}
        )
        adm = client.AdmissionregistrationV1Api(self.api)
        for create, delete, body in (
            (adm.create_mutating_webhook_configuration, adm.delete_mutating_webhook_configuration, mutating),
            (adm.create_validating_webhook_configuration, adm.delete_validating_webhook_configuration, validating),
        ):
            with contextlib.suppress(ApiException):
                delete(self.config_name)
            create(body)
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
        ns = self.namespace("probe")
        custom = client.CustomObjectsApi(self.api)
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
        core = client.CoreV1Api(self.api)
        slug = re.sub(r"[^a-z0-9-]", "-", hint.lower())[:40].strip("-")
        name = f"{slug}-{secrets.token_hex(3)}"
        core.create_namespace({"metadata": {"name": name, "labels": {"hami-place-agent": self.label}}})
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
        _SETS.pop(self.label, None)
        core = client.CoreV1Api(self.api)
        for ns in self.created_namespaces:  # their pods hold GPU allocations other tests must not see
            with contextlib.suppress(ApiException):
                core.delete_namespace(ns, propagation_policy="Background")
        adm = client.AdmissionregistrationV1Api(self.api)
        for delete in (adm.delete_mutating_webhook_configuration, adm.delete_validating_webhook_configuration):
            with contextlib.suppress(ApiException):
                delete(self.config_name)
        if self.proxy:
            self.proxy.stop()
        for a in self.agents:
            a.stop()


def placement(
    name: str, req_id: str, labels: dict[str, str], node: str, gpus: list[str], evict: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "reqID": req_id,
        "podSelector": {"matchLabels": labels},
        "nodeName": node,
        "gpuDevices": gpus,
    }
    if evict:
        spec["evictPod"] = evict
    return {"apiVersion": hp.API_VERSION, "kind": hp.KIND, "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="session")
def agents(testbed: TestBed, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSet]:
    install_crd(api)
    s = AgentSet(testbed, api, tmp_path_factory.mktemp("agent"), "single")
    try:
        s.start()
    except Exception:
        s.stop()
        raise
    yield s
    s.stop()


@pytest.fixture
def ans(agents: AgentSet, request: pytest.FixtureRequest, api: Any) -> Iterator[str]:
    """A namespace served by the session's agent."""
    name = agents.namespace(request.node.name)
    yield name
    client.CoreV1Api(api).delete_namespace(name, propagation_policy="Background")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.failed:
        for fixture in ("agents", "agent_pair"):
            s = getattr(item, "funcargs", {}).get(fixture)
            if isinstance(s, AgentSet):
                report.sections.append((f"{fixture} logs", s.logs()))
    return report
