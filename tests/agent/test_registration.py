"""The webhook registration: the test bed registers the chart's own (testbed/agents/webhooks.py), and the
API server calls the mutating webhook for exactly the pods the agent would consider
(agent/mutate.py, is_candidate)."""

from __future__ import annotations

import base64
import copy
import secrets
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from agent.mutate import is_candidate
from hami_place_core.requests import HAMI_RESOURCES
from testbed.agents.webhooks import KINDS, LOCAL_FIELDS, chart_webhooks

pytestmark = pytest.mark.testbed


def _call(api: Any, verb: str, kind: str) -> Any:
    """e.g. create_mutating_webhook_configuration for ("create", "MutatingWebhookConfiguration")."""
    which = "mutating" if kind.startswith("Mutating") else "validating"
    return getattr(client.AdmissionregistrationV1Api(api), f"{verb}_{which}_webhook_configuration")


def _as_registered(api: Any, kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """`config` as the API server would store it (dry run: defaults such as matchPolicy filled in)."""
    body = {**config, "metadata": {"name": f"drift-{secrets.token_hex(4)}"}}
    return dict(api.sanitize_for_serialization(_call(api, "create", kind)(body, dry_run="All")))


def _registered(api: Any, kind: str, name: str) -> dict[str, Any]:
    return dict(api.sanitize_for_serialization(_call(api, "read", kind)(name)))


def test_the_test_bed_registers_the_charts_webhooks_but_for_the_local_client_config(api, testbed, agents) -> None:
    """What the API server holds for the session's agents equals the chart's rendering for the same
    namespaces in every field (rules, failurePolicy, matchPolicy, matchConditions, namespaceSelector,
    objectSelector, sideEffects, timeoutSeconds, reinvocationPolicy, admissionReviewVersions) but
    clientConfig, which calls the local agent by URL on the chart's path with the agent's CA."""
    chart = chart_webhooks(testbed.binary("helm"), agents.namespace_labels)
    for kind in KINDS:
        theirs = _as_registered(api, kind, chart[kind])["webhooks"]
        mine = _registered(api, kind, agents.config_name)["webhooks"]
        assert [h["name"] for h in mine] == [h["name"] for h in theirs], kind
        for want, got in zip(theirs, mine, strict=True):
            assert set(got) == set(want), (kind, set(got) ^ set(want))
            for field in sorted(set(want) - set(LOCAL_FIELDS)):
                assert got[field] == want[field], (kind, field)
            assert set(got["clientConfig"]) == {"url", "caBundle"}, got["clientConfig"]
            assert got["clientConfig"]["url"] == agents.agent.url + want["clientConfig"]["service"]["path"]
            assert base64.b64decode(got["clientConfig"]["caBundle"]) == agents.ca.cert_pem
    assert {"matchPolicy", "namespaceSelector", "objectSelector", "rules"} <= set(mine[0]), "compared too little"


def test_the_charts_pod_match_condition_names_every_hami_resource(testbed) -> None:
    (hook,) = chart_webhooks(testbed.binary("helm"), {})["MutatingWebhookConfiguration"]["webhooks"]
    expression = " ".join(c["expression"] for c in hook["matchConditions"])
    missing = [r for r in HAMI_RESOURCES if repr(r) not in expression]
    assert not missing, f"chart/templates/webhook.yaml's matchConditions miss {missing}"


POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "reg-"},
    "spec": {"schedulerName": "no-such-scheduler", "containers": [{"name": "c", "image": "pause"}]},
}


def _pod(scheduler: str | None = None, **where: dict[str, str]) -> dict[str, Any]:
    """`where` maps 'limits'/'requests'/'init_limits'/'init_requests' to resources."""
    pod = copy.deepcopy(POD)
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    for key, resources in where.items():
        section = key.removeprefix("init_")
        if key.startswith("init_"):
            pod["spec"]["initContainers"] = [{"name": "i", "image": "pause", "resources": {section: resources}}]
        else:
            pod["spec"]["containers"][0]["resources"] = {section: resources}
    return pod


CASES = [  # (name, pod, a candidate?)
    ("plain", _pod(), False),
    ("cpu only", _pod(limits={"cpu": "1"}, requests={"cpu": "1"}), False),
    ("another scheduler", _pod("volcano"), False),
    ("init container cpu", _pod(init_limits={"cpu": "1"}), False),
    ("other extended resource", _pod(limits={"example.com/fpga": "1"}), False),
    ("hami-scheduler", _pod("hami-scheduler"), True),
    ("gpu limit", _pod(limits={"nvidia.com/gpu": "1"}), True),
    ("gpumem request", _pod(requests={"nvidia.com/gpumem": "1000"}), True),
    ("gpucores", _pod(limits={"nvidia.com/gpucores": "30"}), True),
    ("gpumem-percentage", _pod(limits={"nvidia.com/gpumem-percentage": "50"}), True),
    ("priority", _pod(limits={"nvidia.com/priority": "1"}), True),
    ("init container gpu", _pod(init_limits={"nvidia.com/gpu": "1"}), True),
    ("init container request", _pod(init_requests={"nvidia.com/gpumem": "100"}), True),
]


def _reviews(agents: Any) -> float:
    total = 0.0
    for line in agents.agent.get("/metrics")[1].decode().splitlines():
        if line.startswith("hami_place_admission_seconds_count{") and 'webhook="mutate"' in line:
            total += float(line.split()[-1])
    return total


@pytest.mark.parametrize(("pod", "candidate"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_api_server_calls_the_mutating_webhook_for_candidates_only(api, agents, ans, pod, candidate) -> None:
    assert is_candidate(pod) == candidate
    before = _reviews(agents)
    try:
        client.CoreV1Api(api).create_namespaced_pod(ans, pod, dry_run="All")  # webhooks run, nothing is stored
    except ApiException as e:
        # An extended resource in requests only is invalid, but validation comes after admission.
        assert e.status == 422 and "Limit must be set" in e.body, e.body
    assert (_reviews(agents) > before) == candidate
