"""Claim lease, concurrency across replicas, bad input, REST auth and restarts, on the test bed."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import placement as hp
from testbed.agents.agent_set import AgentSet, create_placement
from testbed.agents.tokens import admin_token, grant_cluster, sa_token
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import wait_for
from testbed.controlplane.webhook_server import WebhookServer
from testbed.data.placements import placement

pytestmark = pytest.mark.testbed


def _phase(api, ns, name) -> str:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, name)
    return str((obj.get("status") or {}).get("phase") or "Pending")


def _create(api, ns, body) -> None:
    create_placement(api, ns, body)


def _gpu_pod(name: str, app: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


@pytest.fixture
def agent_set(testbed, api, tmp_path, request):
    install_crd(api)
    sets: list[AgentSet] = []

    def make(label: str, replicas: int = 1, env: dict[str, str] | None = None) -> AgentSet:
        s = AgentSet(testbed, api, tmp_path / label, label, replicas, env).start()
        sets.append(s)
        return s

    yield make
    for s in sets:
        print(s.logs())  # shown by pytest only when the test failed
        s.stop()


def test_lease_returns_a_claim_whose_pod_was_rejected_later(api, testbed, agent_set) -> None:
    s = agent_set("lease", env={"HAMI_PLACE_CLAIM_LEASE_SECONDS": "3"})
    ns = s.namespace("lease")
    node = testbed.nodes[0]
    _create(api, ns, placement("leased", "leased-001", {"app": "l"}, node.name, ["gpu-0"]))

    def deny(review):
        return {
            "uid": review["request"]["uid"],
            "allowed": False,
            "status": {"code": 403, "message": "rejected by a later webhook"},
        }

    adm = client.AdmissionregistrationV1Api(api)
    with WebhookServer(deny) as server:
        adm.create_validating_webhook_configuration(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": f"deny-{ns}"},
                "webhooks": [
                    {
                        "name": "deny.testbed.local",
                        "clientConfig": {"url": f"{server.url}/validate", "caBundle": server.ca_bundle},
                        "rules": [
                            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                        ],
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                    }
                ],
            }
        )
        core = client.CoreV1Api(api)
        try:

            def rejected() -> bool:
                try:
                    core.create_namespaced_pod(ns, _gpu_pod("doomed", "l"))
                    core.delete_namespaced_pod("doomed", ns)
                    return False
                except ApiException as e:
                    return "rejected by a later webhook" in e.body

            wait_for("the denying webhook to take effect", rejected, 20, 0.3)
            assert _phase(api, ns, "leased") == "Claimed"  # our webhook claimed it; the pod never existed
            t0 = time.monotonic()
            wait_for("back to Pending", lambda: _phase(api, ns, "leased") == "Pending", 15)
            assert time.monotonic() - t0 < 10
        finally:
            adm.delete_validating_webhook_configuration(f"deny-{ns}")
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, "leased")
    assert obj["status"]["reason"] == "ClaimLeaseExpired" and "claim" not in obj["status"]
    # Nothing was lost: the next matching pod gets the placement.
    pod = wait_for("a pod claims it again", lambda: _try_create(api, ns, "second", "l"), 20, 0.3)
    assert pod.metadata.annotations[hp.POD_PLACEMENT] == "leased"


def _try_create(api, ns, name, app):
    try:
        return client.CoreV1Api(api).create_namespaced_pod(ns, _gpu_pod(name, app))
    except ApiException:
        return None


def test_fifty_concurrent_pods_two_replicas_exactly_one_claim_20_trials(api, testbed, agent_set) -> None:
    s = agent_set("pair", replicas=2)
    ns = s.namespace("concurrency")
    core = client.CoreV1Api(api)
    node = testbed.nodes[1]
    claims_per_trial = []
    with ThreadPoolExecutor(max_workers=25) as pool:
        for trial in range(20):
            app = f"burst{trial}"
            _create(api, ns, placement(f"once-{trial}", f"once-{trial:04d}", {"app": app}, node.name, ["gpu-0/10"]))
            pods = list(
                pool.map(lambda i, app=app: core.create_namespaced_pod(ns, _gpu_pod(f"{app}-{i}", app)), range(50))
            )
            claimed = [p for p in pods if hp.POD_CLAIM in (p.metadata.annotations or {})]
            claims_per_trial.append(len(claimed))
            status = client.CustomObjectsApi(api).get_namespaced_custom_object(
                hp.GROUP, hp.VERSION, ns, hp.PLURAL, f"once-{trial}"
            )["status"]
            assert len(claimed) == 1, f"trial {trial}: {len(claimed)} pods claimed"
            assert claimed[0].metadata.annotations[hp.POD_CLAIM] == status["claim"]
            core.delete_collection_namespaced_pod(ns, label_selector=f"app={app}")
    assert claims_per_trial == [1] * 20
    # both replicas really served admission requests
    assert all(c > 0 for c in s.proxy.connections), s.proxy.connections


def test_rest_api_requires_a_token_and_rbac(api, agents, ans) -> None:
    a = agents.agent
    code, body = a.get("/api/v1/placements")
    assert code == 401 and json.loads(body)["message"] == "a bearer token is required (Authorization: Bearer <token>)"
    code, body = a.get("/api/v1/cluster-info", "not-a-real-token")
    assert code == 401 and json.loads(body)["error"] == "Unauthenticated"
    nobody = sa_token(api, ans, "nobody")
    code, body = a.get("/api/v1/placements", nobody)
    assert code == 403
    who = f"system:serviceaccount:{ans}:nobody"
    assert json.loads(body)["message"] == f"user {who} may not list {hp.PLURAL}.{hp.GROUP} cluster-wide"
    code, body = a.get(f"/api/v1/placements?namespace={ans}", nobody)
    assert code == 403 and f"in namespace {ans}" in json.loads(body)["message"]
    code, body = a.get("/api/v1/cluster-info", admin_token(api))
    info = json.loads(body)
    assert code == 200 and info["cluster"]["gpus"] >= 16 and info["nodes"][0]["gpus"][0]["uuid"].startswith("GPU-")
    code, body = a.get("/api/v1/placements", admin_token(api))
    assert code == 200 and "items" in json.loads(body)


def test_cluster_info_needs_list_on_nodes_and_pods_cluster_wide(api, agents, ans) -> None:
    """The layout is the nodes' and every namespace's pods' data: who may list placements but not
    nodes and pods (as `inspect` reads them) gets 403 naming what is missing."""
    grants = {
        "placements-only": [{"apiGroups": [hp.GROUP], "resources": [hp.PLURAL], "verbs": ["list"]}],
        "no-pods": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        "nodes-and-pods": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}],
    }
    expected = {
        "placements-only": (403, "may not list nodes cluster-wide"),
        "no-pods": (403, "may not list pods cluster-wide"),
        "nodes-and-pods": (200, ""),
    }
    removals = []
    try:
        for sa, rules in grants.items():
            subject = {"kind": "ServiceAccount", "name": sa, "namespace": ans}
            removals.append(grant_cluster(api, f"{ans}-{sa}"[:63], [subject], rules))
        authz = client.AuthorizationV1Api(api)

        def bound(sa: str) -> bool:  # the API server's authorizer sees the binding (the agent caches answers)
            first = grants[sa][0]
            review = {
                "spec": {
                    "user": f"system:serviceaccount:{ans}:{sa}",
                    "resourceAttributes": {
                        "group": first["apiGroups"][0],
                        "resource": first["resources"][0],
                        "verb": "list",
                    },
                }
            }
            return bool(authz.create_subject_access_review(review).status.allowed)

        for sa in grants:
            wait_for(f"{sa}'s binding in effect", lambda sa=sa: bound(sa), 20)
        for sa, (status, message) in expected.items():
            code, body = agents.agent.get("/api/v1/cluster-info", sa_token(api, ans, sa))
            assert code == status, (sa, code, body[:300])
            if message:
                assert json.loads(body)["message"] == f"user system:serviceaccount:{ans}:{sa} {message}"
        code, _ = agents.agent.get("/api/v1/placements", sa_token(api, ans, "placements-only"))
        assert code == 200  # the placements API asks for placements, as before
    finally:
        for remove in removals:
            remove()


def test_malformed_admission_reviews_get_400_json_and_agent_keeps_serving(agents) -> None:
    a = agents.agent
    ctx = a.webhook_ssl_context()  # as the API server calls it: with its client certificate
    cases = [
        (b"not json", "AdmissionReview body is not JSON"),
        (b"[]", "AdmissionReview body must be a JSON object"),
        (b'{"kind":"Pod"}', "expected kind AdmissionReview, got 'Pod'"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v2"}', "unsupported AdmissionReview apiVersion"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}', "AdmissionReview has no request object"),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":""}}',
            "AdmissionReview request has no uid",
        ),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","operation":"CREATE","object":7}}',
            "request.object must be an object for CREATE",
        ),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","operation":"CREATE",'
            b'"object":{"metadata":[]}}}',
            "request.object.metadata must be an object",
        ),
    ]
    for path in ("/mutate", "/validate"):
        for raw, message in cases:
            req = urllib.request.Request(
                a.url + path,
                data=raw,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=5, context=ctx)
            assert e.value.code == 400
            body = json.loads(e.value.read())
            assert body["error"] == "InvalidRequest" and message in body["message"], body
    assert a.get("/healthz")[0] == 200 and a.get("/readyz")[0] == 200
    # a well-formed review of something we do not handle is admitted unchanged
    ok = urllib.request.Request(
        a.url + "/mutate",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps(
            {
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "abc", "operation": "DELETE"},
            }
        ).encode(),
    )
    with urllib.request.urlopen(ok, timeout=5, context=a.webhook_ssl_context()) as resp:
        assert json.loads(resp.read())["response"] == {"uid": "abc", "allowed": True}


def _errors_total(agent: Any) -> float:
    lines = agent.get("/metrics")[1].decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("hami_place_errors_total{"))


def test_a_client_that_hangs_up_mid_body_is_no_agent_error(agents) -> None:
    """Issue 39, item 6: a review whose body stops short of its Content-Length and whose client
    then closes the connection made /mutate log an unhandled CancelledError and count it in
    hami_place_errors_total. The agent's log and error count stay clean, and it keeps serving."""
    a = agents.agent
    before = _errors_total(a)
    host, port = a.url.removeprefix("https://").split(":")
    ctx = a.webhook_ssl_context()
    for path in ("/mutate", "/validate"):
        raw = socket.create_connection((host, int(port)), timeout=5)
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            tls.sendall(f"{head}Content-Length: 10000\r\n\r\n".encode() + b'{"kind":"Adm')
            time.sleep(0.3)
            with contextlib.suppress(OSError, ssl.SSLError):
                tls.shutdown(socket.SHUT_RDWR)
    time.sleep(1)  # the agent notices the closed connection
    assert a.get("/healthz")[0] == 200
    assert _errors_total(a) == before
    tail = a.log_tail(200)
    assert "CancelledError" not in tail and "Traceback" not in tail, tail


def _placement_review(ns: str, uid: str, spec: object) -> bytes:
    obj = {
        "apiVersion": hp.API_VERSION,
        "kind": hp.KIND,
        "metadata": {"name": f"crafted-{uid}", "namespace": ns},
        "spec": spec,
    }
    return json.dumps(
        {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": uid,
                "kind": {"group": hp.GROUP, "version": hp.VERSION, "kind": hp.KIND},
                "resource": {"group": hp.GROUP, "version": hp.VERSION, "resource": hp.PLURAL},
                "namespace": ns,
                "name": obj["metadata"]["name"],
                "operation": "CREATE",
                "userInfo": {"username": "mallory", "groups": ["system:authenticated"]},
                "object": obj,
            },
        }
    ).encode()


def test_crafted_placement_reviews_are_denied_precisely_never_500(agents, ans) -> None:
    """Shapes the CRD's schema forbids never reach the webhook through the API server, but a crafted
    review (with the API server's client certificate) can carry them: each is denied with what is
    wrong (422), none answers 500 or logs a traceback (a fuzz run once got 71 such 500s)."""
    a = agents.agent
    good = {
        "reqID": "crafted-1",
        "podSelector": {"matchLabels": {"app": "x"}},
        "nodeName": "n",
        "gpuDevices": ["gpu-0"],
    }
    cases = [
        ({**good, "podSelector": "app=x"}, "spec.podSelector must be an object with matchLabels or matchExpressions"),
        ({**good, "podSelector": {"matchLabels": ["app", "x"]}}, "spec.podSelector.matchLabels must be an object"),
        (
            {**good, "podSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}},
            "spec.podSelector.matchExpressions[0].operator must be one of In, NotIn, Exists, DoesNotExist",
        ),
        ("not an object", "spec must be an object, got str 'not an object'"),
        ({**good, "gpuDevices": "gpu-0"}, "gpuDevices must list 1 to 16 entries like gpu-0 or gpu-0/50"),
        ({**good, "reqID": 12345}, "spec.reqID must be a string, got int 12345"),
    ]
    tracebacks = a.log_tail(100000).count("Traceback")
    for n, (spec, message) in enumerate(cases):
        req = urllib.request.Request(
            a.url + "/validate",
            data=_placement_review(ans, f"crafted-{n}", spec),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10, context=a.webhook_ssl_context()) as resp:
            answer = json.loads(resp.read())["response"]
        assert answer["uid"] == f"crafted-{n}" and answer["allowed"] is False, answer
        assert answer["status"]["code"] == 422 and message in answer["status"]["message"], answer
    assert a.log_tail(100000).count("Traceback") == tracebacks, a.log_tail(40)
    assert a.get("/healthz")[0] == 200


def _pod_review(ns: str, app: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", **_gpu_pod("forged", app)}
    return json.dumps(
        {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": "forged-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": ns,
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": {**pod, "metadata": {**pod["metadata"], "namespace": ns}},
            },
        }
    ).encode()


def test_forged_reviews_without_the_api_servers_certificate_claim_nothing(api, testbed, agents) -> None:
    """Anyone who can reach the agent's port could POST a pod review that claims a placement;
    with HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE only the API server's client certificate is accepted."""
    a, ns = agents.agent, agents.namespace("forged")
    _create(api, ns, placement("bait", "bait-00001", {"app": "bait"}, testbed.nodes[1].name, ["gpu-3/10"]))
    token = admin_token(api)

    def phase() -> str:
        return _phase(api, ns, "bait")

    # the agent's cache holds it, so a forged review that got through would claim it
    wait_for(
        "the agent's cache to hold the placement",
        lambda: b'"bait-00001"' in a.get(f"/api/v1/placements?namespace={ns}", token)[1],
        20,
    )
    review = _pod_review(ns, "bait")
    for path in ("/mutate", "/validate"):
        req = urllib.request.Request(
            a.url + path, data=review, method="POST", headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5, context=a.ssl_context())  # TLS, but no client certificate
        body = json.loads(e.value.read())
        assert e.value.code == 401 and body["error"] == "Unauthenticated", body
        assert "must present a client certificate signed by HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE" in body["message"]
    # a certificate from another CA (the admin's, which the API server itself trusts) fails the handshake
    wrong = a.ssl_context()
    wrong.load_cert_chain(str(testbed.pki / "admin-client.crt"), str(testbed.pki / "admin-client.key"))
    req = urllib.request.Request(a.url + "/mutate", data=review, method="POST")
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(req, timeout=5, context=wrong)
    time.sleep(1.5)  # a claim would have been written by now
    assert phase() == "Pending"
    # the REST API needs no client certificate: its callers present bearer tokens
    assert a.get("/api/v1/placements", token)[0] == 200
    # and the real path still works: the API server presents its certificate, the pod is pinned
    pod = client.CoreV1Api(api).create_namespaced_pod(ns, _gpu_pod("bait-0", "bait"))
    assert pod.metadata.annotations[hp.POD_REQ_ID] == "bait-00001"
    wait_for("the placement claimed by the real pod", lambda: phase() in ("Claimed", "Bound"), 20)


def test_restart_loses_nothing_and_consumes_nothing_twice(api, testbed, agent_set) -> None:
    s = agent_set("restart")
    ns = s.namespace("restart")
    core = client.CoreV1Api(api)
    node = testbed.nodes[2]
    for i in range(3):
        _create(api, ns, placement(f"r{i}", f"restart-{i:03d}", {"app": "r"}, node.name, [f"gpu-{i}/20"]))
    # one claim in flight when the agent dies
    first = core.create_namespaced_pod(ns, _gpu_pod("r-a", "r"))
    assert hp.POD_CLAIM in first.metadata.annotations
    s.agent.kill()
    # while it is down, pods are admitted unchanged (failurePolicy Ignore) and nothing is consumed
    down = core.create_namespaced_pod(ns, _gpu_pod("r-down", "r"))
    assert hp.POD_CLAIM not in (down.metadata.annotations or {})
    s.agent.start()
    for name in ("r-b", "r-c", "r-d"):
        core.create_namespaced_pod(ns, _gpu_pod(name, "r"))
    wait_for("three placements Bound", lambda: [_phase(api, ns, f"r{i}") for i in range(3)] == ["Bound"] * 3, 30)
    pods = core.list_namespaced_pod(ns).items
    claims = [p.metadata.annotations.get(hp.POD_CLAIM) for p in pods if hp.POD_CLAIM in (p.metadata.annotations or {})]
    assert len(claims) == 3 and len(set(claims)) == 3
    bound = {
        client.CustomObjectsApi(api).get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, f"r{i}")[
            "status"
        ]["boundPod"]
        for i in range(3)
    }
    assert bound == {"r-a", "r-b", "r-c"}  # the in-flight claim survived the crash; r-d got nothing


def test_sse_streams_phase_transitions_and_metrics_count_them(api, agents, ans, testbed) -> None:
    import threading

    a = agents.agent
    _create(api, ans, placement("watched", "watched-01", {"app": "w"}, testbed.nodes[0].name, ["gpu-1/10"]))
    req = urllib.request.Request(
        f"{a.url}/api/v1/placements/{ans}/watched/events", headers={"Authorization": f"Bearer {admin_token(api)}"}
    )
    events: list[dict] = []

    def read() -> None:
        with urllib.request.urlopen(req, timeout=30, context=a.ssl_context()) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            for raw in resp:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                if len(events) >= 3:
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for("the first event", lambda: events, 10)
    client.CoreV1Api(api).create_namespaced_pod(ans, _gpu_pod("watched-pod", "w"))
    reader.join(20)
    assert [e["phase"] for e in events] == ["Pending", "Claimed", "Bound"]
    assert events[-1]["boundPod"] == "watched-pod" and events[-1]["targetUUIDs"] == [testbed.nodes[0].gpu_uuid(1)]

    code, body = a.get(f"/api/v1/placements/{ans}/nope/events", admin_token(api))
    assert code == 404 and json.loads(body)["message"] == f"placement {ans}/nope not found"
    code, body = a.get("/metrics")
    text = body.decode()
    assert code == 200
    for metric in (
        "hami_place_claims_total",
        "hami_place_admission_seconds_bucket",
        'hami_place_cache_synced{resource="pods"} 1.0',
        "hami_place_phase_transitions_total",
        "hami_place_claim_lease_expiries_total",
        "hami_place_event_loop_lag_seconds_bucket",  # the stall detector runs (agent/loop_lag.py)
        "hami_place_event_loop_lag_max_seconds",
    ):
        assert metric in text, metric
    lag_count = next(line for line in text.splitlines() if line.startswith("hami_place_event_loop_lag_seconds_count"))
    assert float(lag_count.split()[-1]) > 0
    claims = next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("hami_place_claims_total "))
    assert claims >= 1
