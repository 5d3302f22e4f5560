"""The Helm chart (chart/): lint, render, server-side dry-run, install/upgrade/uninstall, RBAC minimality.

Everything runs the test bed's own helm and kubectl binaries against its kube-apiserver. No agent
image runs here: the install test scopes the chart's webhooks to a label only its namespace carries,
so the validating webhook (failurePolicy Fail, pointing at a Service with no agent) never sees
another test's placements, and always uninstalls.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
CRD_NAME = "hamipodplacements.scheduling.hami.placement.com"
RELEASE = "gpu-descheduler"
GROUP = "scheduling.hami.placement.com"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))

# The agent's calls (agent/cache.py, mover.py, status.py, events.py, auth.py, validate.py), nothing more.
EXPECTED_CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["scheduling.hami.placement.com"],
        "resources": ["hamipodplacements"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {"apiGroups": [GROUP], "resources": ["hamipodplacements/status"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    # agent/surge.py
    {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"], "verbs": ["get"]},
    {"apiGroups": ["apps"], "resources": ["replicasets/scale", "deployments/scale"], "verbs": ["get", "patch"]},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
]
# agent/autopilot.py, with autopilot.enabled (the default): the cache lists and watches policies,
# the status subresource is PUT, each move is a placement with evictPod, and the moved pod's
# controller is read for the placement's podSelector.
AUTOPILOT_RULES = [
    {"apiGroups": [GROUP], "resources": ["hamidefragpolicies"], "verbs": ["list", "watch"]},
    {"apiGroups": [GROUP], "resources": ["hamidefragpolicies/status"], "verbs": ["update"]},
    {"apiGroups": [GROUP], "resources": ["hamipodplacements"], "verbs": ["create"]},
]
# agent/leader.py: GET the Lease, POST it when absent, PUT it to renew or take over.
EXPECTED_LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
]


def _env(testbed, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, KUBECONFIG=str(testbed.kubeconfig))
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(tmp_path / var.lower())
    return env


def _run(testbed, tmp_path: Path, tool: str, *argv: str, stdin: str | None = None, check: bool = True):
    proc = subprocess.run(
        [str(testbed.binaries[tool]), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(testbed, tmp_path),
        timeout=120,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"{tool} {' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def helm(testbed, tmp_path: Path, *argv: str, check: bool = True):
    return _run(testbed, tmp_path, "helm", *argv, check=check)


def render(testbed, tmp_path: Path, namespace: str, *argv: str) -> list[dict[str, Any]]:
    out = helm(testbed, tmp_path, "template", RELEASE, str(CHART), "-n", namespace, *argv).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def tls_secrets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The webhook TLS Secret(s): every Secret but the autopilot's intent key."""
    return [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] != f"{RELEASE}-intent-key"]


# ---- static ---------------------------------------------------------------------------------


def test_chart_crd_is_the_repo_crd_byte_for_byte() -> None:
    repo_crds = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart_crds == repo_crds
    for name in repo_crds:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes(), (
            f"chart/crds/{name} drifted from crds/{name}: copy it again"
        )


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_helm_lint_is_clean(testbed, tmp_path, values) -> None:
    argv = ["lint", str(CHART), "--strict"] + (["-f", str(values)] if values else [])
    proc = helm(testbed, tmp_path, *argv)
    out = proc.stdout + proc.stderr
    assert "[ERROR]" not in out and "[WARNING]" not in out, out
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_contradictory_values_fail_the_render(testbed, tmp_path) -> None:
    cases = {
        ("--set", "certManager.issuerRef.name=my-ca"): "the two TLS modes are exclusive",
        ("--set", "certManager.enabled=true"): "does not serve cert-manager.io/v1",
        ("--set-string", "certManager.enabled=false"): "want boolean",
        ("--set", "replicaCount=0"): "minimum",
        ("--set", "webhook.mutating.failurePolicy=Sometimes"): "failurePolicy",
        ("--set", "agent.evictionQps=0"): "evictionQps",
        ("--set", "webhook.clientAuth.enabled=true"): "caBundle",
        ("--set", "autopilot.examplePolicy.mode=Always"): "value must be one of 'DryRun', 'Apply'",
        ("--set", "autopilot.examplePolicy.minInterval=5 minutes"): "minInterval",
        ("--set", "autopilot.examplePolicy.budgets.movesPerHour=-1"): "movesPerHour",
        ("--set", "autopilot.intervalSeconds=0"): "intervalSeconds",
        ("--set-string", "autopilot.enabled=yes"): "want boolean",
        (
            "--set",
            "autopilot.examplePolicy.enabled=true",
        ): "autopilot.examplePolicy.selector.namespaces is empty: list the namespaces",
        (
            "--set",
            "autopilot.examplePolicy.enabled=true,autopilot.enabled=false,autopilot.examplePolicy.selector.namespaces={ml}",
        ): "autopilot.examplePolicy.enabled=true needs autopilot.enabled=true",
    }
    for argv, message in cases.items():
        proc = helm(testbed, tmp_path, "template", RELEASE, str(CHART), *argv, check=False)
        assert proc.returncode != 0, argv
        assert message in proc.stderr, (argv, proc.stderr)


def test_default_render_shape(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "MutatingWebhookConfiguration",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Secret",
            "Service",
            "ServiceAccount",
            "ValidatingWebhookConfiguration",
        ]
    )
    (dep,) = by_kind(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"]["app"] == "gpu-descheduler-webhook"
    assert pod["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["HAMI_PLACE_LEADER_ELECTION"] == "true"
    assert env["HAMI_PLACE_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["HAMI_PLACE_AGENT_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["HAMI_PLACE_EXCLUDED_NAMESPACES"] == "kube-system"
    assert env["HAMI_PLACE_TLS_CERT_FILE"] == "/etc/hami-place/tls/tls.crt"
    assert env["HAMI_PLACE_TLS_KEY_FILE"] == "/etc/hami-place/tls/tls.key"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] == 65532 and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    spread = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert spread["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1

    assert env["HAMI_PLACE_AUTOPILOT_ENABLED"] == "true" and env["HAMI_PLACE_AUTOPILOT_INTERVAL_SECONDS"] == "15"
    assert "HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR" not in env
    assert by_kind(docs, "HamiDefragPolicy") == []  # the example policy is opt-in
    # The key the autopilot signs its intents with (agent/intents.py): one per release, mounted.
    (key,) = [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] == f"{RELEASE}-intent-key"]
    assert len(base64.b64decode(key["data"]["key"])) == 64
    assert env["HAMI_PLACE_INTENT_KEY_FILE"] == "/etc/hami-place/intent/key"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "intent-key")
    assert mount == {"name": "intent-key", "mountPath": "/etc/hami-place/intent", "readOnly": True}
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "intent-key")
    assert volume["secret"]["secretName"] == f"{RELEASE}-intent-key"

    (mwc,) = by_kind(docs, "MutatingWebhookConfiguration")
    (vwc,) = by_kind(docs, "ValidatingWebhookConfiguration")
    (m,) = mwc["webhooks"]
    v, p = vwc["webhooks"]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert (m["failurePolicy"], m["reinvocationPolicy"], m["sideEffects"], m["timeoutSeconds"]) == (
        "Ignore",
        "IfNeeded",
        "NoneOnDryRun",
        5,
    )
    assert m["admissionReviewVersions"] == ["v1"]
    assert m["objectSelector"]["matchExpressions"] == [ignore]
    assert m["namespaceSelector"]["matchExpressions"] == [
        ignore,
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
    ]
    assert m["rules"][0]["resources"] == ["pods"] and m["rules"][0]["operations"] == ["CREATE"]
    assert (v["failurePolicy"], v["sideEffects"]) == ("Fail", "None")
    assert v["rules"][0]["resources"] == ["hamipodplacements"]
    assert v["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    # HamiDefragPolicy: cluster-scoped (no namespaceSelector), the same service path, always Fail.
    assert p["name"] == "policies.hami-place.scheduling.hami.placement.com"
    assert p["rules"] == [
        {
            "apiGroups": [GROUP],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["hamidefragpolicies"],
            "scope": "Cluster",
        }
    ]
    assert "namespaceSelector" not in p and "objectSelector" not in p
    assert (p["failurePolicy"], p["sideEffects"], p["admissionReviewVersions"]) == ("Fail", "None", ["v1"])
    assert p["clientConfig"]["service"] == v["clientConfig"]["service"]
    (secret,) = tls_secrets(docs)
    assert m["clientConfig"]["caBundle"] == v["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert p["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    svc_name = m["clientConfig"]["service"]["name"]
    (svc,) = by_kind(docs, "Service")
    assert svc["metadata"]["name"] == svc_name and svc["spec"]["ports"][0]["port"] == 8083
    assert "cert-manager.io/inject-ca-from" not in (mwc["metadata"].get("annotations") or {})


def test_generated_certificate_serves_the_service_names(testbed, tmp_path) -> None:
    from cryptography import x509

    docs = render(testbed, tmp_path, "kube-system")
    (secret,) = tls_secrets(docs)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    svc = f"{RELEASE}-webhook"
    assert f"{svc}.kube-system.svc" in sans and f"{svc}.kube-system.svc.cluster.local" in sans
    cert.verify_directly_issued_by(ca)


def test_cert_manager_mode_excludes_the_generated_secret(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system", "-f", str(CHART / "ci" / "certmanager-values.yaml"))
    assert tls_secrets(docs) == []
    (cert,) = by_kind(docs, "Certificate")
    (issuer,) = by_kind(docs, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    assert cert["spec"]["secretName"] == f"{RELEASE}-webhook-tls"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (wc,) = by_kind(docs, kind)
        assert wc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"kube-system/{RELEASE}-webhook"
        assert "caBundle" not in wc["webhooks"][0]["clientConfig"]


def test_rbac_is_exactly_what_the_agent_calls(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system")
    roles = {d["metadata"]["name"]: d for d in by_kind(docs, "ClusterRole")}
    assert roles[RELEASE]["rules"] == EXPECTED_CLUSTER_RULES + AUTOPILOT_RULES
    viewer = roles[f"{RELEASE}-policy-viewer"]
    for role in ("view", "edit", "admin"):
        assert viewer["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
    # read-only: creating a policy lets the autopilot evict pods, a cluster-admin decision
    assert viewer["rules"] == [
        {"apiGroups": [GROUP], "resources": ["hamidefragpolicies"], "verbs": ["get", "list", "watch"]}
    ]
    aggregated = [r for d in by_kind(docs, "ClusterRole") if "aggregate-to" in str(d["metadata"]) for r in d["rules"]]
    assert not [
        r for r in aggregated if "hamidefragpolicies" in r["resources"] and set(r["verbs"]) - {"get", "list", "watch"}
    ]
    editor = roles[f"{RELEASE}-placement-editor"]
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert editor["rules"] == [
        {
            "apiGroups": ["scheduling.hami.placement.com"],
            "resources": ["hamipodplacements"],
            "verbs": ["create", "get", "list", "watch", "update", "delete"],
        }
    ]
    (role,) = by_kind(docs, "Role")
    assert role["rules"] == EXPECTED_LEASE_RULES
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    (sa,) = by_kind(docs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "kube-system"}
    ]

    single = render(testbed, tmp_path, "kube-system", "--set", "replicaCount=1")
    assert by_kind(single, "Role") == [] and by_kind(single, "RoleBinding") == []
    (dep,) = by_kind(single, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_PLACE_LEADER_ELECTION"] == "false"


def test_autopilot_off_removes_its_rules_env_and_webhook(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system", "--set", "autopilot.enabled=false")
    roles = {d["metadata"]["name"]: d for d in by_kind(docs, "ClusterRole")}
    assert roles[RELEASE]["rules"] == EXPECTED_CLUSTER_RULES
    (dep,) = by_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_PLACE_AUTOPILOT_ENABLED"] == "false" and "HAMI_PLACE_INTENT_KEY_FILE" not in env
    assert [d["metadata"]["name"] for d in by_kind(docs, "Secret")] == [f"{RELEASE}-webhook-tls"]
    (vwc,) = by_kind(docs, "ValidatingWebhookConfiguration")
    assert [h["name"] for h in vwc["webhooks"]] == ["placements.hami-place.scheduling.hami.placement.com"]
    # the viewer role only reads: it stays (the CRD is installed either way)
    assert f"{RELEASE}-policy-viewer" in roles
    no_viewer = render(testbed, tmp_path, "kube-system", "--set", "rbac.policyViewer=false")
    assert f"{RELEASE}-policy-viewer" not in {d["metadata"]["name"] for d in by_kind(no_viewer, "ClusterRole")}
    # without the validating webhook there is no policies webhook either
    off = render(testbed, tmp_path, "kube-system", "--set", "webhook.validating.enabled=false")
    assert by_kind(off, "ValidatingWebhookConfiguration") == []


AUTOPILOT_VALUES = CHART / "ci" / "autopilot-values.yaml"


def test_example_policy_renders_from_the_values(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system", "-f", str(AUTOPILOT_VALUES))
    (policy,) = by_kind(docs, "HamiDefragPolicy")
    assert policy["apiVersion"] == f"{GROUP}/v1"
    assert policy["metadata"]["name"] == "nightly-defrag"
    assert "namespace" not in policy["metadata"]  # cluster-scoped
    assert policy["spec"] == {
        "mode": "Apply",
        "triggers": {"pendingPods": {"after": "10m"}, "freeGPUs": {"below": 2}},
        "selector": {
            "namespaces": ["ml", "research"],
            "podSelector": {"matchLabels": {"hami-place/movable": "true"}},
            "maxPriority": 1000,
        },
        "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100"]}]},
        "window": {"schedule": "0 2 * * *", "duration": "2h", "timeZone": "Europe/Berlin"},
        "minInterval": "2m",
        "budgets": {"movesPerRun": 3, "movesPerHour": 6, "movesPerNode": 1, "movesPerWorkload": 1},
    }
    (dep,) = by_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_PLACE_AUTOPILOT_INTERVAL_SECONDS"] == "30"
    # the defaults: DryRun, pending pods after 5m, no window, the CRD's default budgets
    (minimal,) = by_kind(
        render(
            testbed,
            tmp_path,
            "kube-system",
            "--set",
            "autopilot.examplePolicy.enabled=true",
            "--set",
            "autopilot.examplePolicy.selector.namespaces={ml}",
            "--set-json",
            'autopilot.policySelector={"hami-place/agent":"canary"}',
        ),
        "HamiDefragPolicy",
    )
    assert minimal["metadata"]["name"] == "gpu-autopilot"
    assert minimal["metadata"]["labels"]["hami-place/agent"] == "canary"  # the agent's policy selector
    assert minimal["spec"] == {
        "mode": "DryRun",
        "triggers": {"pendingPods": {"after": "5m"}},
        "selector": {"namespaces": ["ml"]},
        "minInterval": "5m",
        "budgets": {"movesPerRun": 5, "movesPerHour": 10, "movesPerNode": 2, "movesPerWorkload": 1},
    }


def test_example_policy_is_valid_against_the_crd(testbed, tmp_path, api) -> None:
    """Created for real on the API server (the CRD's schema and CEL rules), then deleted."""
    from testbed.controlplane.crd import install_crd

    install_crd(api)
    custom = client.CustomObjectsApi(api)
    for argv in (
        ["-f", str(AUTOPILOT_VALUES)],
        ["--set", "autopilot.examplePolicy.enabled=true", "--set", "autopilot.examplePolicy.selector.namespaces={ml}"],
    ):
        (policy,) = by_kind(render(testbed, tmp_path, "kube-system", *argv), "HamiDefragPolicy")
        name = f"chart-example-{secrets.token_hex(3)}"
        policy["metadata"]["name"] = name
        created = custom.create_cluster_custom_object(GROUP, "v1", "hamidefragpolicies", policy)
        try:
            assert created["spec"]["mode"] == policy["spec"]["mode"]
            assert created["spec"]["selector"] == policy["spec"]["selector"]
        finally:
            custom.delete_cluster_custom_object(GROUP, "v1", "hamidefragpolicies", name)
    # and the API server refuses what the schema refuses: the test is not vacuous
    (bad,) = by_kind(render(testbed, tmp_path, "kube-system", "-f", str(AUTOPILOT_VALUES)), "HamiDefragPolicy")
    bad["metadata"]["name"] = f"chart-bad-{secrets.token_hex(3)}"
    bad["spec"]["window"]["schedule"] = "0 2 * *"
    with pytest.raises(ApiException) as e:
        custom.create_cluster_custom_object(GROUP, "v1", "hamidefragpolicies", bad)
    assert e.value.status in (403, 422) and "schedule must have five fields" in e.value.body


def test_custom_values_reach_the_objects(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system", "-f", str(CHART / "ci" / "custom-values.yaml"))
    assert by_kind(docs, "NetworkPolicy") == []
    (dep,) = by_kind(docs, "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HAMI_PLACE_EXCLUDED_NAMESPACES"] == "kube-system,kube-public,monitoring"
    assert env["HAMI_PLACE_NAMESPACE_SELECTOR"] == "gpu=true"
    assert env["HAMI_PLACE_EVICTION_QPS"] == "0.5"
    assert env["HAMI_PLACE_MAX_MOVES_IN_FLIGHT"] == "8"
    assert env["HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR"] == "hami-place/agent=canary"
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    (m,) = by_kind(docs, "MutatingWebhookConfiguration")[0]["webhooks"]
    assert m["namespaceSelector"]["matchLabels"] == {"hami-place/enabled": "true"}
    assert m["namespaceSelector"]["matchExpressions"][1]["values"] == ["kube-system", "kube-public", "monitoring"]
    # webhook client authentication: the CA as a ConfigMap, mounted where the env var points
    assert env["HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE"] == "/etc/hami-place/webhook-client-ca/ca.crt"
    assert env["HAMI_PLACE_WEBHOOK_CLIENT_NAMES"] == "kube-apiserver-webhook-client"
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-webhook-client-ca")]
    assert cm["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----\n") and cm["data"]["ca.crt"].rstrip().endswith(
        "-----END CERTIFICATE-----"
    )
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-client-ca"]["configMap"]["name"] == cm["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["webhook-client-ca"] == "/etc/hami-place/webhook-client-ca"
    default = render(testbed, tmp_path, "kube-system")
    assert not [d for d in by_kind(default, "ConfigMap") if d["metadata"]["name"].endswith("-webhook-client-ca")]


def test_notes_warn_about_risky_settings(testbed, tmp_path) -> None:
    def notes(*argv: str) -> str:
        out = helm(testbed, tmp_path, "install", RELEASE, str(CHART), "-n", "kube-system", "--dry-run=client", *argv)
        return out.stdout.split("NOTES:", 1)[1]

    safe = notes()
    assert "kubectl get pods -n kube-system -l app=gpu-descheduler-webhook -w" in safe
    assert "Webhook callers: not authenticated: anything that reaches port 8083" in safe
    assert "WARNING" not in safe
    risky = notes(
        "--set",
        "replicaCount=1",
        "--set",
        "webhook.mutating.failurePolicy=Fail",
        "--set",
        "webhook.validating.enabled=false",
        "--set",
        "agent.excludedNamespaces={monitoring}",
        "--set",
        "progressProxy.enabled=true",
    )
    assert "replicaCount=1: no high availability" in risky
    assert "webhook.mutating.failurePolicy=Fail" in risky
    assert "webhook.validating.enabled=false" in risky
    assert "does not contain kube-system" in risky
    assert "progressProxy.controlPlaneCIDRs is empty: any pod can reach" in risky
    fenced = notes("--set", "progressProxy.enabled=true", "--set", "progressProxy.controlPlaneCIDRs={10.0.0.0/24}")
    assert "WARNING" not in fenced and "-progress-reader" in fenced
    # the autopilot: whether it runs, how to see policies, and that Apply evicts
    assert "Autopilot: enabled" in safe and "kubectl get hamidefragpolicies" in safe
    assert "kubectl hami-place policies" in safe and "mode Apply evicts pods on its own" in safe
    assert "Autopilot: disabled" in notes("--set", "autopilot.enabled=false")
    namespaces = (
        "--set",
        "autopilot.examplePolicy.enabled=true",
        "--set",
        "autopilot.examplePolicy.selector.namespaces={ml}",
    )
    dry = notes(*namespaces)
    assert "WARNING" not in dry and "Example policy gpu-autopilot (DryRun)" in dry
    applied = notes(*namespaces, "--set", "autopilot.examplePolicy.mode=Apply")
    assert (
        "WARNING: autopilot.examplePolicy.mode=Apply: HamiDefragPolicy gpu-autopilot EVICTS pods automatically"
        in applied
    )
    assert "namespaces ml, within its budgets (5 moves per run, 10 per hour)" in applied


def test_progress_proxy_is_fenced_and_its_role_names_one_service_port(testbed, tmp_path) -> None:
    docs = render(testbed, tmp_path, "kube-system", "-f", str(CHART / "ci" / "custom-values.yaml"))
    (svc,) = by_kind(docs, "Service")
    assert {"name": "proxy", "port": 8084, "targetPort": "proxy", "protocol": "TCP"} in svc["spec"]["ports"]
    (dep,) = by_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_PLACE_PROXY_PORT"] == "8084"
    fenced = render(
        testbed,
        tmp_path,
        "kube-system",
        "-f",
        str(CHART / "ci" / "custom-values.yaml"),
        "--set",
        "networkPolicy.enabled=true",
    )
    (policy,) = by_kind(fenced, "NetworkPolicy")
    proxy_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8084)
    assert proxy_rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    role = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-progress-reader"))
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["services/proxy"],
            "resourceNames": [f"https:{svc['metadata']['name']}:proxy"],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},  # the plugin finds it by label
    ]
    assert svc["metadata"]["labels"]["scheduling.hami.placement.com/progress"] == "true"
    binding = next(b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"].endswith("-progress-reader"))
    assert {(s["kind"], s["name"]) for s in binding["subjects"]} == {("Group", "gpu-operators"), ("User", "alice")}
    default = render(testbed, tmp_path, "kube-system")
    (dep,) = by_kind(default, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_PLACE_PROXY_PORT"] == "0"  # off unless asked for
    (plain,) = by_kind(default, "Service")
    assert "scheduling.hami.placement.com/progress" not in plain["metadata"]["labels"]  # nothing to find


def test_metrics_port_service_monitor_and_dashboard(testbed, tmp_path) -> None:
    docs = render(
        testbed,
        tmp_path,
        "monitoring-ns",
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.dashboard.enabled=true,metrics.poolLabel=gpu-pool",
        "--set",
        "networkPolicy.enabled=true,metrics.ingressFrom={10.9.0.0/16}",
        "--set",
        "metrics.serviceMonitor.labels.release=kube-prometheus",
    )
    (svc,) = by_kind(docs, "Service")
    assert {"name": "metrics", "port": 8085, "targetPort": "metrics", "protocol": "TCP"} in svc["spec"]["ports"]
    (dep,) = by_kind(docs, "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 8085, "protocol": "TCP"} in container["ports"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HAMI_PLACE_METRICS_PORT"] == "8085" and env["HAMI_PLACE_METRICS_POOL_LABEL"] == "gpu-pool"
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= svc["metadata"]["labels"].items()  # it selects the agent's Service
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics" and monitor["spec"]["namespaceSelector"] == {
        "matchNames": ["monitoring-ns"]
    }
    (board,) = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["hami-place.json"]) == json.loads(
        (CHART / "dashboards" / "hami-place.json").read_text()
    )
    (policy,) = by_kind(docs, "NetworkPolicy")
    rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8085)
    assert rule["from"] == [{"ipBlock": {"cidr": "10.9.0.0/16"}}]
    off = render(testbed, tmp_path, "kube-system", "--set", "metrics.enabled=false")
    (dep,) = by_kind(off, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HAMI_PLACE_METRICS_PORT"] == "0" and not by_kind(off, "ServiceMonitor")


@pytest.mark.parametrize(
    ("version", "conditions"), [("1.25.0", False), ("1.27.9", False), ("1.28.0", True), ("1.31.2", True)]
)
def test_older_servers_get_a_chart_they_accept(testbed, tmp_path, version, conditions) -> None:
    """Chart.yaml's kubeVersion is the true minimum (1.25, the CRDs' CEL rules); the mutating
    webhook's matchConditions, which API servers before 1.28 refuse, is rendered from 1.28 only."""
    docs = render(testbed, tmp_path, "kube-system", "--kube-version", version)
    (mutating,) = by_kind(docs, "MutatingWebhookConfiguration")
    assert all(("matchConditions" in hook) == conditions for hook in mutating["webhooks"])


def test_the_chart_refuses_servers_older_than_its_minimum(testbed, tmp_path) -> None:
    result = helm(testbed, tmp_path, "template", RELEASE, str(CHART), "--kube-version", "1.24.9", check=False)
    assert result.returncode != 0 and "incompatible with Kubernetes v1.24.9" in result.stderr, result.stderr


# ---- on the test bed's apiserver --------------------------------------------------------------

CERT_MANAGER_KINDS = {"Issuer", "Certificate"}  # no cert-manager CRDs on the test bed: skipped, not faked


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_every_rendered_object_passes_server_side_dry_run(testbed, tmp_path, api, ns, values) -> None:
    from testbed.controlplane.crd import install_crd

    install_crd(api)  # the autopilot values render a HamiDefragPolicy
    argv = ["-f", str(values)] if values else []
    docs = [d for d in render(testbed, tmp_path, ns, *argv) if d["kind"] not in CERT_MANAGER_KINDS]
    stream = yaml.safe_dump_all(docs)
    proc = _run(testbed, tmp_path, "kubectl", "apply", "--dry-run=server", "-f", "-", stdin=stream, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == len(docs), proc.stdout
    assert all("(server dry run)" in ln for ln in lines), proc.stdout


def test_install_upgrade_uninstall(testbed, tmp_path, api, ns) -> None:
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    adm = client.AdmissionregistrationV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    ext = client.ApiextensionsV1Api(api)
    scope = f"chart-{secrets.token_hex(4)}"
    core.patch_namespace(ns, {"metadata": {"labels": {"hami-place-chart-test": scope}}})
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": "registry.k8s.io/pause", "tag": "3.10"},
                # Only this test's namespace reaches the (agent-less) webhooks.
                "webhook": {"namespaceSelector": {"matchLabels": {"hami-place-chart-test": scope}}},
            }
        )
    )
    base = ["-n", ns, "-f", str(values)]
    helm(testbed, tmp_path, "install", RELEASE, str(CHART), "--create-namespace", *base)
    try:
        dep = apps.read_namespaced_deployment(RELEASE, ns)
        assert dep.spec.template.metadata.labels["app"] == "gpu-descheduler-webhook"
        assert dep.spec.template.metadata.labels["hami.io/webhook"] == "ignore"
        assert dep.spec.template.spec.service_account_name == RELEASE
        core.read_namespaced_service(f"{RELEASE}-webhook", ns)
        core.read_namespaced_service_account(RELEASE, ns)
        rbac.read_cluster_role(RELEASE)
        rbac.read_cluster_role(f"{RELEASE}-placement-editor")
        rbac.read_cluster_role(f"{RELEASE}-policy-viewer")
        rbac.read_namespaced_role(f"{RELEASE}-leader-election", ns)
        mwc = adm.read_mutating_webhook_configuration(RELEASE)
        vwc = adm.read_validating_webhook_configuration(RELEASE)
        assert [h.name for h in vwc.webhooks][1:] == ["policies.hami-place.scheduling.hami.placement.com"]
        assert mwc.webhooks[0].namespace_selector.match_labels == {"hami-place-chart-test": scope}
        assert vwc.webhooks[0].namespace_selector.match_labels == {"hami-place-chart-test": scope}
        ext.read_custom_resource_definition(CRD_NAME)
        secret = core.read_namespaced_secret(f"{RELEASE}-webhook-tls", ns)
        ca_bundle = base64.b64decode(mwc.webhooks[0].client_config.ca_bundle)
        assert ca_bundle == base64.b64decode(secret.data["ca.crt"])

        key = core.read_namespaced_secret(f"{RELEASE}-intent-key", ns)
        helm(testbed, tmp_path, "upgrade", RELEASE, str(CHART), *base, "--set", "agent.logLevel=DEBUG")
        after = core.read_namespaced_secret(f"{RELEASE}-webhook-tls", ns)
        assert after.data == secret.data, "the upgrade regenerated the TLS secret (lookup did not reuse it)"
        # A new key would make the replicas refuse a move their predecessors recorded.
        assert core.read_namespaced_secret(f"{RELEASE}-intent-key", ns).data == key.data
        mwc2 = adm.read_mutating_webhook_configuration(RELEASE)
        assert mwc2.webhooks[0].client_config.ca_bundle == mwc.webhooks[0].client_config.ca_bundle
        assert helm(testbed, tmp_path, "history", RELEASE, "-n", ns).stdout.count("deployed") == 1
    finally:
        helm(testbed, tmp_path, "uninstall", RELEASE, "-n", ns, "--wait", check=False)

    for read in (
        lambda: apps.read_namespaced_deployment(RELEASE, ns),
        lambda: core.read_namespaced_service(f"{RELEASE}-webhook", ns),
        lambda: core.read_namespaced_secret(f"{RELEASE}-webhook-tls", ns),
        lambda: rbac.read_cluster_role(RELEASE),
        lambda: adm.read_mutating_webhook_configuration(RELEASE),
        lambda: adm.read_validating_webhook_configuration(RELEASE),
    ):
        with pytest.raises(ApiException) as e:
            read()
        assert e.value.status == 404
    # Helm never deletes what it installed from chart/crds: the placements survive an uninstall.
    ext.read_custom_resource_definition(CRD_NAME)


def test_the_example_policy_is_admitted_only_by_a_running_agent(testbed, tmp_path, api, ns) -> None:
    """docs/chart.md: the policies webhook (failurePolicy Fail) is the release's own, so once it is
    active, creating the example policy needs a Ready agent: with none (the image here is pause)
    `helm upgrade` enabling it fails on the webhook call and no policy exists."""
    from testbed.controlplane.crd import install_crd
    from testbed.controlplane.waiting import wait_for

    install_crd(api)
    scope = f"chart-{secrets.token_hex(4)}"
    name = f"example-{scope}"
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": "registry.k8s.io/pause", "tag": "3.10"},
                "webhook": {"namespaceSelector": {"matchLabels": {"hami-place-chart-test": scope}}},
                "autopilot": {"examplePolicy": {"name": name, "selector": {"namespaces": ["ml"]}}},
            }
        )
    )
    custom = client.CustomObjectsApi(api)
    probe = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HamiDefragPolicy",
        "metadata": {"name": f"probe-{scope}"},
        "spec": {"triggers": {"pendingPods": {"after": "5m"}}, "selector": {"namespaces": ["ml"]}},
    }

    def webhook_active() -> bool:
        try:
            custom.create_cluster_custom_object(GROUP, "v1", "hamidefragpolicies", probe, dry_run="All")
        except ApiException as e:
            return "policies.hami-place.scheduling.hami.placement.com" in (e.body or "")
        return False

    base = ["-n", ns, "-f", str(values)]
    try:
        helm(testbed, tmp_path, "install", RELEASE, str(CHART), *base)
        wait_for("the release's policies webhook to be called", webhook_active, 30)
        proc = helm(
            testbed,
            tmp_path,
            "upgrade",
            RELEASE,
            str(CHART),
            *base,
            "--set",
            "autopilot.examplePolicy.enabled=true",
            check=False,
        )
        assert proc.returncode != 0
        assert "policies.hami-place.scheduling.hami.placement.com" in proc.stderr, proc.stderr
    finally:
        helm(testbed, tmp_path, "uninstall", RELEASE, "-n", ns, "--wait", check=False)
    with pytest.raises(ApiException) as e:
        custom.get_cluster_custom_object(GROUP, "v1", "hamidefragpolicies", name)
    assert e.value.status == 404


# ---- drift guards -----------------------------------------------------------------------------

# Variables the chart deliberately leaves alone: the listen host (0.0.0.0 is right in a pod), the
# out-of-cluster switches, and test-only switches.
NOT_IN_CHART = {
    "HAMI_PLACE_HOST",
    "HAMI_PLACE_KUBECONFIG",
    "HAMI_PLACE_TOKEN_FILE",
    "HAMI_PLACE_FAILPOINTS",
    "HAMI_PLACE_VALIDATION_ENABLED",
}


def test_every_agent_setting_is_reachable_from_the_chart(testbed, tmp_path) -> None:
    import re

    code = (REPO / "agent" / "config.py").read_text() + (REPO / "agent" / "failpoints.py").read_text()
    known = set(re.findall(r'"(HAMI_PLACE_[A-Z_]+)"', code))
    assert "HAMI_PLACE_EVICTION_QPS" in known
    docs = render(testbed, tmp_path, "kube-system", "-f", str(CHART / "ci" / "custom-values.yaml"))
    (dep,) = by_kind(docs, "Deployment")
    rendered = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert rendered <= known, rendered - known
    assert known - rendered == NOT_IN_CHART


def test_chart_readme_documents_every_value() -> None:
    def leaves(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            key = f"{prefix}{k}"
            opaque = k in ("resources", "podSecurityContext", "securityContext")
            out += leaves(v, key + ".") if isinstance(v, dict) and v and not opaque else [key]
        return out

    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [key for key in leaves(values) if f"`{key}`" not in readme]
    assert missing == [], "document these values in chart/README.md"


def test_dockerfile_copies_exist_and_runs_the_agent_as_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY") and "--from" not in line:
            for src in line.split()[1:-1]:
                assert (REPO / src).exists(), src
    assert "USER 65532:65532" in text
    assert 'ENTRYPOINT ["/opt/venv/bin/python", "-m", "agent"]' in text
    assert "EXPOSE 8083" in text
    assert '".[agent]"' in text
