"""The webhook registration: the chart's equals the test bed's, and the API server calls the mutating
webhook for exactly the pods the agent would consider (agent/mutate.py, is_candidate)."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from agent.mutate import is_candidate
from testbed.agent_process import webhook_configs

pytestmark = pytest.mark.testbed

CHART = Path(__file__).resolve().parents[2] / "chart"
# Differ by design: the chart points at its Service and scopes by its values, the test bed at a
# local URL and at each agent set's namespace label.
PER_INSTALL = ("clientConfig", "namespaceSelector")


def _rendered(testbed: Any, tmp_path: Path) -> dict[str, dict[str, Any]]:
    env = dict(os.environ, KUBECONFIG=str(testbed.kubeconfig))
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(tmp_path / var.lower())
    out = subprocess.run(
        [str(testbed.binaries["helm"]), "template", "gpu-descheduler", str(CHART), "-n", "kube-system"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    return {d["kind"]: d for d in docs if d["kind"].endswith("WebhookConfiguration")}


def test_chart_and_test_bed_register_the_same_webhooks(testbed, tmp_path) -> None:
    chart = _rendered(testbed, tmp_path)
    mutating, validating = webhook_configs("x", "https://127.0.0.1:1", b"ca", {})
    for ours in (mutating, validating):
        (theirs,) = chart[ours["kind"]]["webhooks"]
        (mine,) = ours["webhooks"]
        assert set(theirs) == set(mine), (ours["kind"], set(theirs) ^ set(mine))
        for field in sorted(set(mine) - set(PER_INSTALL)):
            assert theirs[field] == mine[field], (ours["kind"], field)


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
