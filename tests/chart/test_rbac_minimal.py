"""The chart's RBAC is minimal: remove any one rule and the agent, run with that reduced
ServiceAccount, fails at least one of its duties (start, pin, move, events, REST auth, leadership).

Each case installs its own ServiceAccount with the chart's rules minus one, runs the real agent
with its token, and runs a short probe of every duty; the test asserts that some duty fails and
names it in the report."""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

import pytest
from kubernetes import client

from hami_place_core import placement as hp
from testbed.agent_set import AgentSet
from testbed.allocation import start_allocator
from testbed.chart import render_chart
from testbed.crd import install_crd
from testbed.gpu_nodes import NodeSpec
from testbed.placements import placement
from testbed.processes import StartupError
from testbed.tokens import admin_token
from testbed.workloads import deployment

# The pin and move duties cross HAMi (its Filter allocates the pinned pods): both modes.
pytestmark = [pytest.mark.testbed, pytest.mark.hami]

NAMESPACE = "hami-place-rbac-min"


def _chart_rules(testbed) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = render_chart(testbed.binary("helm"), NAMESPACE, "--show-only", "templates/rbac.yaml")
    agent_role = next(d for d in docs if d["kind"] == "ClusterRole" and "aggregate" not in str(d["metadata"]))
    lease_role = next(d for d in docs if d["kind"] == "Role")
    return agent_role["rules"], lease_role["rules"]


def _cases() -> list[str]:
    # ids resolved at run time from the chart; 9 ClusterRole rules + the lease Role
    return [f"cluster-rule-{i}" for i in range(9)] + ["lease-role"]


def _wait(fn, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if fn():
                return True
        except Exception:  # noqa: BLE001, S110 - a probe that errors has simply not succeeded yet
            pass
        time.sleep(0.2)
    return False


def _probe(api, testbed, s: AgentSet, target: NodeSpec) -> list[str]:
    """Every duty of the agent, each with a short deadline; returns the names of those that failed."""
    failed = []
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    ns = s.namespace("probe")
    allocator = start_allocator(api, {ns})  # real HAMi, or the stand-in in CI
    try:
        code, _ = s.agent.get("/api/v1/placements", admin_token(api))
        if code != 200:
            failed.append(f"REST auth ({code})")
        custom.create_namespaced_custom_object(
            hp.GROUP,
            hp.VERSION,
            ns,
            hp.PLURAL,
            placement("pin", "probe-pin-1", {"app": "p"}, target.name, ["gpu-0/10"]),
        )
        time.sleep(1)  # let the agent's cache see it
        core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": "p", "labels": {"app": "p"}},
                "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "pause"}]},
            },
        )

        def phase(name: str) -> str:
            return str(
                (
                    custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, name).get("status") or {}
                ).get("phase")
                or "Pending"
            )

        if not _wait(lambda: phase("pin") == "Completed", 15):
            failed.append(f"pin (phase {phase('pin')})")
        apps.create_namespaced_deployment(ns, deployment("m", replicas=1))
        _wait(
            lambda: [
                p for p in core.list_namespaced_pod(ns, label_selector="app=m").items if p.status.phase == "Running"
            ],
            30,
        )
        victim = core.list_namespaced_pod(ns, label_selector="app=m").items[0].metadata.name
        try:
            custom.create_namespaced_custom_object(
                hp.GROUP,
                hp.VERSION,
                ns,
                hp.PLURAL,
                placement("mv", "probe-move-1", {"app": "m"}, target.name, ["gpu-1/10"], evict=victim),
            )
        except client.ApiException as e:
            failed.append(f"validate evictPod (HTTP {e.status})")
        else:
            if not _wait(lambda: phase("mv") == "Completed", 20):
                failed.append(f"move (phase {phase('mv')})")
        if not core.list_namespaced_event(ns, field_selector="involvedObject.name=pin").items:
            failed.append("events")
    finally:
        allocator.stop()
    return failed


@pytest.mark.parametrize("case", _cases())
def test_removing_any_rule_breaks_a_duty(api, testbed, tmp_path, case) -> None:
    install_crd(api)
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    cluster_rules, lease_rules = _chart_rules(testbed)
    assert len(cluster_rules) == 9
    suffix = secrets.token_hex(3)
    sa = f"agent-minus-{suffix}"
    rules = copy.deepcopy(cluster_rules)
    removed = "the leader-election Role"
    if case.startswith("cluster-rule-"):
        gone = rules.pop(int(case.rsplit("-", 1)[1]))
        removed = f"{gone['resources']} {gone['verbs']}"
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": sa}})
    rbac.create_cluster_role({"metadata": {"name": sa}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": sa},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
        }
    )
    if case != "lease-role":
        rbac.create_namespaced_role(NAMESPACE, {"metadata": {"name": sa}, "rules": lease_rules})
        rbac.create_namespaced_role_binding(
            NAMESPACE,
            {
                "metadata": {"name": sa},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
            },
        )
    token = core.create_namespaced_service_account_token(
        sa, NAMESPACE, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    kubeconfig = testbed.write_token_kubeconfig(tmp_path / "sa.kubeconfig", sa, token)
    target = NodeSpec(f"rbac-min-{suffix}", gpus=4)
    testbed.add_nodes([target])
    s = AgentSet(
        testbed,
        api,
        tmp_path / "agent",
        f"min-{suffix}",
        1,
        kubeconfig=kubeconfig,
        env={
            "HAMI_PLACE_LEADER_ELECTION": "true",
            "HAMI_PLACE_NAMESPACE": NAMESPACE,
            "HAMI_PLACE_LEASE_NAME": f"lease-{suffix}",
            "HAMI_PLACE_LEASE_DURATION_SECONDS": "5",
        },
    )
    try:
        try:
            s.start(timeout=10)
            failed = _probe(api, testbed, s, target)
        except (StartupError, AssertionError) as e:
            failed = [f"start ({str(e).splitlines()[0][:120]})"]
        print(f"without {removed}: failed duties: {failed}")
        assert failed, f"removing {removed} broke nothing: the rule is not needed"
    finally:
        s.stop()
        core.delete_node(target.name)
        for delete in (lambda: rbac.delete_cluster_role(sa), lambda: rbac.delete_cluster_role_binding(sa)):
            delete()
