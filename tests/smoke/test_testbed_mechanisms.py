"""Smoke suite: each real Kubernetes mechanism later features depend on, proven on the test bed."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core.annotations import decode_register
from testbed.controlplane.waiting import running_pods, wait_for
from testbed.controlplane.webhook_server import WebhookServer, json_patch
from testbed.data.workloads import deployment, node_affinity

pytestmark = pytest.mark.testbed


def test_version_is_stamped(api, testbed) -> None:
    info = client.VersionApi(api).get_code()
    assert info.git_version.startswith("v1.36."), info.git_version
    assert (info.major, info.minor) == ("1", "36")


def test_fake_gpu_nodes_carry_hami_register_annotation(api, testbed) -> None:
    nodes = {n.metadata.name: n for n in client.CoreV1Api(api).list_node().items}
    spec = testbed.nodes[0]
    node = nodes[spec.name]
    raw = node.metadata.annotations["hami.io/node-nvidia-register"]
    assert raw.startswith('[{"id":"GPU-')  # HAMi v2.8+ JSON, Go omitempty style (index 0 omitted)
    decoded = decode_register(raw)
    assert decoded.format == "json" and decoded.error is None
    assert [g.index for g in decoded.devices] == list(range(spec.gpus))
    assert all(g.count == 10 and g.devcore == 100 and g.mode == "hami-core" and g.health for g in decoded.devices)
    assert decoded.devices[0].uuid == spec.gpu_uuid(0)
    assert node.status.allocatable["nvidia.com/gpu"] == str(spec.gpus * 10)


@pytest.mark.hami  # its GPU pods are HAMi's to schedule
def test_hami_scheduler_deployment_runs_and_affinity_is_honoured(api, ns, testbed) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    gpu_nodes = {n.name for n in testbed.nodes}

    apps.create_namespaced_deployment(ns, deployment("spread", replicas=3))
    pods = wait_for("3 Running pods", lambda: (p := running_pods(core, ns, "app=spread")) and len(p) == 3 and p, 60)
    assert {p.spec.scheduler_name for p in pods} == {"hami-scheduler"}
    assert {p.spec.node_name for p in pods} <= gpu_nodes

    target = testbed.nodes[-1].name
    apps.create_namespaced_deployment(ns, deployment("pinned", replicas=3, affinity=node_affinity(target)))
    pods = wait_for("3 pinned pods", lambda: (p := running_pods(core, ns, "app=pinned")) and len(p) == 3 and p, 60)
    assert {p.spec.node_name for p in pods} == {target}


@pytest.mark.hami  # its GPU pods are HAMi's to schedule
def test_replicaset_recreates_deleted_pod(api, ns) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(ns, deployment("phoenix", replicas=1))
    (first,) = wait_for("1 Running pod", lambda: running_pods(core, ns, "app=phoenix"), 60)
    core.delete_namespaced_pod(first.metadata.name, ns)

    def replacement():
        pods = running_pods(core, ns, "app=phoenix")
        return [p for p in pods if p.metadata.uid != first.metadata.uid]

    (second,) = wait_for("a replacement pod", replacement, 60)
    assert second.metadata.owner_references[0].kind == "ReplicaSet"
    assert second.metadata.owner_references[0].uid == first.metadata.owner_references[0].uid


def _evict(core: client.CoreV1Api, ns: str, pod: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=ns))
    core.create_namespaced_pod_eviction(pod, ns, body)


@pytest.mark.hami  # its GPU pods are HAMi's to schedule
def test_eviction_is_refused_with_429_while_pdb_forbids_it(api, ns) -> None:
    apps, core, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    apps.create_namespaced_deployment(ns, deployment("guarded", replicas=2))
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "guarded-pdb"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    pods = wait_for("2 Running pods", lambda: (p := running_pods(core, ns, "app=guarded")) and len(p) == 2 and p, 60)
    # The disruption controller must have observed the pods before the budget means anything.
    wait_for(
        "PDB observed",
        lambda: policy.read_namespaced_pod_disruption_budget("guarded-pdb", ns).status.current_healthy == 2,
    )
    victim = pods[0].metadata.name

    with pytest.raises(ApiException) as refused:
        _evict(core, ns, victim)
    assert refused.value.status == 429
    status = json.loads(refused.value.body)
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget.", status
    # The PDB that blocked it is named in the causes: the evictor shows this to users.
    assert any("guarded-pdb" in c.get("message", "") for c in status["details"]["causes"]), status
    assert core.read_namespaced_pod(victim, ns).metadata.deletion_timestamp is None

    policy.patch_namespaced_pod_disruption_budget("guarded-pdb", ns, {"spec": {"minAvailable": 1}})
    wait_for(
        "PDB allows 1",
        lambda: policy.read_namespaced_pod_disruption_budget("guarded-pdb", ns).status.disruptions_allowed == 1,
    )
    _evict(core, ns, victim)

    def gone_or_terminating():
        try:
            return core.read_namespaced_pod(victim, ns).metadata.deletion_timestamp is not None
        except ApiException as e:
            return e.status == 404

    wait_for("evicted pod to terminate", gone_or_terminating)


SMOKE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.testbed.local"},
    "spec": {
        "group": "smoke.testbed.local",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}, "name": {"type": "string"}},
                                "x-kubernetes-validations": [
                                    {"rule": "self.size <= 10", "message": "size must be at most 10"}
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_crd_is_served_and_schema_violations_are_rejected(api, ns) -> None:
    ext, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    try:
        ext.create_custom_resource_definition(SMOKE_CRD)
    except ApiException as e:
        if e.status != 409:
            raise

    def established():
        crd = ext.read_custom_resource_definition("widgets.smoke.testbed.local")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for("CRD Established", established)
    args = ("smoke.testbed.local", "v1", ns, "widgets")
    ok = custom.create_namespaced_custom_object(
        *args,
        {"apiVersion": "smoke.testbed.local/v1", "kind": "Widget", "metadata": {"name": "ok"}, "spec": {"size": 3}},
    )
    assert ok["spec"]["size"] == 3
    for spec, message in [
        ({"size": 0}, "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"),
        ({"size": 11}, "spec: Invalid value: size must be at most 10"),
        ({"name": "x"}, "spec.size: Required value"),
    ]:
        with pytest.raises(ApiException) as bad:
            custom.create_namespaced_custom_object(
                *args,
                {"apiVersion": "smoke.testbed.local/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": spec},
            )
        assert bad.value.status == 422
        assert message in json.loads(bad.value.body)["message"]


def _webhook_config(name: str, server: WebhookServer, ns: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "smoke.testbed.local",
                "clientConfig": {"url": f"{server.url}/mutate", "caBundle": server.ca_bundle},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                # Only this test's namespace: a stray webhook must never touch other tests' pods.
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
            }
        ],
    }


def _pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }


@pytest.fixture
def mutating_webhook(api, ns):
    patch = json_patch(
        [{"op": "add", "path": "/metadata/annotations", "value": {"smoke.testbed.local/mutated": "yes"}}]
    )
    adm = client.AdmissionregistrationV1Api(api)
    with WebhookServer(patch) as server:
        name = f"smoke-{ns}"
        adm.create_mutating_webhook_configuration(_webhook_config(name, server, ns))
        yield server
        adm.delete_mutating_webhook_configuration(name)


def _wait_webhook_active(core: client.CoreV1Api, ns: str, server: WebhookServer) -> None:
    # Webhook configurations reach the apiserver's admission chain asynchronously.
    def probe():
        before = len(server.reviews)
        core.create_namespaced_pod(ns, _pod("probe"), dry_run="All")
        return len(server.reviews) > before

    wait_for("webhook registration to take effect", probe, timeout=20, interval=0.2)


def test_mutating_webhook_by_url_patches_created_pod(api, ns, mutating_webhook) -> None:
    core = client.CoreV1Api(api)
    _wait_webhook_active(core, ns, mutating_webhook)
    pod = core.create_namespaced_pod(ns, _pod("patched"))
    assert pod.metadata.annotations["smoke.testbed.local/mutated"] == "yes"
    review = mutating_webhook.reviews[-1]
    assert review["request"]["operation"] == "CREATE"
    assert review["request"]["object"]["metadata"]["name"] == "patched"
    assert review["request"]["dryRun"] is False
    # The user in the review is the caller, which a webhook needs for SubjectAccessReviews.
    assert review["request"]["userInfo"]["username"] == "testbed-admin"


def test_dry_run_reaches_webhook_flagged_and_persists_nothing(api, ns, mutating_webhook) -> None:
    core = client.CoreV1Api(api)
    _wait_webhook_active(core, ns, mutating_webhook)
    before = len(mutating_webhook.reviews)
    pod = core.create_namespaced_pod(ns, _pod("dry"), dry_run="All")
    assert pod.metadata.annotations["smoke.testbed.local/mutated"] == "yes"
    (review,) = mutating_webhook.reviews[before:]
    assert review["request"]["dryRun"] is True
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("dry", ns)
    assert missing.value.status == 404
