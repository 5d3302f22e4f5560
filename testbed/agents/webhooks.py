"""The agent's webhook registration on the test bed, taken from the chart, not written twice.

`helm template` renders chart/templates/webhook.yaml for namespaces carrying the given labels
(the chart's `webhook.namespaceSelector.matchLabels`); then only what a local process needs is
rewritten: each webhook's clientConfig calls the agent by URL (the chart's service path on the
local agent's address) with the agent's own CA bundle, and the configuration gets its own name,
so several agent sets can be registered at once. Every other field (rules, failurePolicy,
matchConditions, namespaceSelector, objectSelector, sideEffects, timeouts, ...) is the chart's;
tests/agent/test_registration.py proves what the API server holds differs in clientConfig only.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import json
from pathlib import Path
from typing import Any

from testbed.controlplane.chart import render_chart

KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
LOCAL_FIELDS = ("clientConfig",)  # the only webhook field a local agent changes


@functools.cache
def _rendered(helm: Path, labels: str) -> dict[str, dict[str, Any]]:
    docs = render_chart(
        helm,
        "kube-system",
        "--show-only",
        "templates/webhook.yaml",
        "--set-json",
        f"webhook.namespaceSelector.matchLabels={labels}",
    )
    return {d["kind"]: d for d in docs if d["kind"] in KINDS}


def chart_webhooks(helm: Path, namespace_labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The chart's Mutating and Validating WebhookConfigurations by kind, as it renders them for
    namespaces labelled `namespace_labels` (rendered once per label set: helm mints a CA each time)."""
    return copy.deepcopy(_rendered(helm, json.dumps(namespace_labels, sort_keys=True)))


def webhook_configs(
    helm: Path, name: str, base_url: str, ca_pem: bytes, namespace_labels: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The chart's (mutating, validating) configurations named `name`, calling the agent at `base_url`."""
    bundle = base64.b64encode(ca_pem).decode()
    chart = chart_webhooks(helm, namespace_labels)
    out = []
    for kind in KINDS:
        config = chart[kind]
        config["metadata"] = {"name": name}  # the chart's Helm release labels describe no release here
        for hook in config["webhooks"]:
            hook["clientConfig"] = {"url": base_url + hook["clientConfig"]["service"]["path"], "caBundle": bundle}
        out.append(config)
    return out[0], out[1]


def register_webhooks(api: Any, mutating: dict[str, Any], validating: dict[str, Any]) -> None:
    """Create both configurations, replacing any left under the same names."""
    from kubernetes import client
    from kubernetes.client import ApiException

    adm: Any = client.AdmissionregistrationV1Api(api)  # untyped: the client takes plain dicts
    for create, delete, body in (
        (adm.create_mutating_webhook_configuration, adm.delete_mutating_webhook_configuration, mutating),
        (adm.create_validating_webhook_configuration, adm.delete_validating_webhook_configuration, validating),
    ):
        with contextlib.suppress(ApiException):
            delete(body["metadata"]["name"])
        create(body)


def unregister_webhooks(api: Any, name: str) -> None:
    from kubernetes import client
    from kubernetes.client import ApiException

    adm = client.AdmissionregistrationV1Api(api)
    for delete in (adm.delete_mutating_webhook_configuration, adm.delete_validating_webhook_configuration):
        with contextlib.suppress(ApiException):
            delete(name)
