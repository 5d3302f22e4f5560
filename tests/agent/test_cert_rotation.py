"""Certificate rotation under load (issue 25): the agent's serving certificate and its webhook client
CA are rewritten in place, as cert-manager renews a Secret, while the API server sends a steady
stream of validating reviews (failurePolicy Fail, so a refused handshake would fail the request).

The serving certificate moves to a new CA the way a CA rotation is rolled out: the webhooks'
caBundle first trusts both CAs, then the files change (the certificate written before its key, so
the agent meets a mismatched pair and must keep the old one), then the bundle drops the old CA.
The client CA file gets a second CA, whose client certificate is refused before the reload and
accepted after it; replaced by that CA alone, the API server's own certificate is refused, which
shows the old CA is dropped, not kept."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import placement as hp
from testbed.agents.agent_set import AgentSet
from testbed.controlplane.certs import CertificateAuthority
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import wait_for
from testbed.data.placements import placement

pytestmark = [pytest.mark.testbed]

REFUSED_AS_EXPECTED = "denied the request: node no-such-node not found"


class ReviewLoad:
    """A thread creating dry-run placements as fast as the API server answers; each answer is our
    webhook's precise refusal (ok) or anything else (failed: a webhook call that did not happen)."""

    def __init__(self, api: Any, ns: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.ns = ns
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ReviewLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        body = placement("rot", "rotate-00001", {"app": "rot"}, "no-such-node", ["gpu-0"])
        while not self._stop.is_set():
            try:
                self.custom.create_namespaced_custom_object(
                    hp.GROUP, hp.VERSION, self.ns, hp.PLURAL, body, dry_run="All"
                )
                self.failed.append("admitted")
            except ApiException as e:
                message = (json.loads(e.body or "{}") if e.body else {}).get("message", "")
                if e.status == 422 and REFUSED_AS_EXPECTED in message:
                    self.ok += 1
                else:
                    self.failed.append(f"{e.status}: {message[:300]}")


def set_ca_bundle(api: Any, name: str, pem: bytes) -> None:
    adm: Any = client.AdmissionregistrationV1Api(api)
    bundle = base64.b64encode(pem).decode()
    for read, patch in (
        (adm.read_mutating_webhook_configuration, adm.patch_mutating_webhook_configuration),
        (adm.read_validating_webhook_configuration, adm.patch_validating_webhook_configuration),
    ):
        config = read(name)
        hooks = [{"name": h.name, "clientConfig": {"caBundle": bundle}} for h in config.webhooks]
        patch(name, {"webhooks": hooks})


def serves_for(port: int, ca: CertificateAuthority) -> bool:
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return True
    except (ssl.SSLError, OSError):
        return False


def validate_status(port: int, serving_ca: bytes, pair: tuple[Path, Path]) -> int:
    """POST an empty review to /validate presenting `pair`: 400 = accepted as the API server (and
    the body refused), 401 = no usable client certificate, 0 = the handshake was refused."""
    ctx = ssl.create_default_context(cadata=serving_ca.decode())
    ctx.load_cert_chain(str(pair[0]), str(pair[1]))
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}/validate", data=b"{}", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, ssl.SSLError, OSError):
        return 0


def reloads(agent: Any, result: str) -> float:
    for line in agent.get("/metrics")[1].decode().splitlines():
        if line.startswith(f'hami_place_certificate_reloads_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_rotating_the_serving_certificate_and_client_ca_under_load_fails_no_review(
    testbed: Any, api: Any, tmp_path: Path
) -> None:
    install_crd(api)
    s = AgentSet(testbed, api, tmp_path / "rot", "certrot", 1, {"HAMI_PLACE_CERT_RELOAD_SECONDS": "0.3"})
    agent = s.agent
    assert agent.webhook_client is not None
    client_ca_file = tmp_path / "webhook-client-ca.crt"  # this agent's own copy: the test bed's is shared
    client_ca_file.write_bytes(Path(agent.webhook_client[0]).read_bytes())
    agent.webhook_client = (client_ca_file, agent.webhook_client[1], agent.webhook_client[2])
    old_client_ca = client_ca_file.read_bytes()
    s.start()
    load: ReviewLoad | None = None
    try:
        load = ReviewLoad(testbed.api_client(), s.namespace("certrot")).start()
        wait_for("reviews flowing", lambda: load.ok >= 5, 30)

        # 1. the serving certificate moves to a new CA
        new_ca = CertificateAuthority("agent-certrot-ca-2")
        set_ca_bundle(api, s.config_name, s.ca.cert_pem + new_ca.cert_pem)
        time.sleep(2)  # the API server's webhook configuration informer
        fresh_crt, fresh_key = new_ca.issue_server(["127.0.0.1", "localhost"]).write(tmp_path, "fresh")
        Path(agent.cert).write_bytes(fresh_crt.read_bytes())  # certificate before key: a mismatched pair
        wait_for("the mismatched pair refused", lambda: reloads(agent, "failed") >= 1, 10)
        assert serves_for(agent.port, s.ca)  # the previous pair still serves
        Path(agent.key).write_bytes(fresh_key.read_bytes())
        wait_for("the new certificate served", lambda: serves_for(agent.port, new_ca), 10)
        set_ca_bundle(api, s.config_name, new_ca.cert_pem)
        time.sleep(2)
        agent.ca = new_ca  # the harness's own calls (metrics, REST) trust the new CA from now on

        # 2. the webhook client CA gets a second CA
        other = CertificateAuthority("other-webhook-client-ca")
        other_pair = other.issue_client("kube-apiserver-webhook-client").write(tmp_path, "other-client")
        assert validate_status(agent.port, new_ca.cert_pem, other_pair) == 0  # not trusted yet
        client_ca_file.write_bytes(old_client_ca + other.cert_pem)
        wait_for(
            "the second client CA trusted", lambda: validate_status(agent.port, new_ca.cert_pem, other_pair) == 400, 10
        )
        time.sleep(1)
        load.stop()
        assert load.failed == [], load.failed[:5]
        assert load.ok >= 20, load.ok
        assert reloads(agent, "reloaded") >= 2

        # 3. the old client CA removed: the API server's certificate (from it) is refused now
        client_ca_file.write_bytes(other.cert_pem)
        api_server_pair = (Path(agent.webhook_client[1]), Path(agent.webhook_client[2]))
        wait_for(
            "the old client CA dropped", lambda: validate_status(agent.port, new_ca.cert_pem, api_server_pair) == 0, 10
        )
        assert validate_status(agent.port, new_ca.cert_pem, other_pair) == 400
    finally:
        if load is not None:
            load.stop()
        with contextlib.suppress(Exception):
            client_ca_file.write_bytes(old_client_ca)
        s.stop()
