"""The chart's RBAC is minimal: remove any one rule and the agent, run with that reduced
ServiceAccount, fails at least one of its duties (start, pin, move, events, REST auth, leadership,
and with autopilot.enabled the autopilot's move).

Each case installs its own ServiceAccount with the chart's rules minus one, runs the real agent
with its token, and runs a short probe of every duty; the test asserts that some duty fails and
names it in the report. The autopilot's three rules are probed with the autopilot on (an Apply
policy must complete one move); a control case with no rule removed shows that probe succeeds."""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

import pytest
from kubernetes import client

from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp
from testbed.agents.agent_set import AgentSet
from testbed.agents.tokens import admin_token
from testbed.controlplane.chart import render_chart
from testbed.controlplane.crd import install_crd
from testbed.controlplane.processes import StartupError
from testbed.controlplane.waiting import running_pods
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.placements import placement
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator

# The pin and move duties cross HAMi (its Filter allocates the pinned pods): both modes.
pytestmark = [pytest.mark.testbed, pytest.mark.hami]

NAMESPACE = "hami-place-rbac-min"


def _chart_rules(testbed) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = render_chart(testbed.binary("helm"), NAMESPACE, "--show-only", "templates/rbac.yaml")
    agent_role = next(d for d in docs if d["kind"] == "ClusterRole" and "aggregate" not in str(d["metadata"]))
    lease_role = next(d for d in docs if d["kind"] == "Role")
    return agent_role["rules"], lease_role["rules"]


# The chart's ClusterRole: 13 rules for the agent's core duties (the last 4 for surge moves), then
# (autopilot.enabled, the default) 4 for the autopilot: hamidefragpolicies list/watch,
# hamidefragpolicies/status update, hamipodplacements create (its StatefulSet reads share the
# surge rule's apps get).
CORE_RULES, AUTOPILOT_RULES = 13, 3


def _cases() -> list[str]:
    # ids resolved at run time from the chart; 16 ClusterRole rules + the lease Role + a control
    # (nothing removed) that the autopilot probe must pass
    return [f"cluster-rule-{i}" for i in range(CORE_RULES + AUTOPILOT_RULES)] + ["lease-role", "autopilot-control"]


def _autopilot_case(case: str) -> bool:
    return case == "autopilot-control" or (
        case.startswith("cluster-rule-") and int(case.rsplit("-", 1)[1]) >= CORE_RULES
    )


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


def _refused(custom, ns: str, body: dict) -> str:
    """Create the placement; why the API server refused it ("" when created)."""
    try:
        custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body)
        return ""
    except client.ApiException as e:
        return f"HTTP {e.status}"


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
        pin = placement("pin", "probe-pin-1", {"app": "p"}, target.name, ["gpu-0/10"])
        refused = _refused(custom, ns, pin)  # e.g. without subjectaccessreviews: the node-read check
        if refused:
            failed.append(f"validate pin ({refused})")
            return failed
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
        refused = _refused(
            custom, ns, placement("mv", "probe-move-1", {"app": "m"}, target.name, ["gpu-1/10"], evict=victim)
        )
        if refused:
            failed.append(f"validate evictPod ({refused})")
        else:
            if not _wait(lambda: phase("mv") == "Completed", 20):
                failed.append(f"move (phase {phase('mv')})")
        failed += _probe_surge(core, apps, custom, ns, target)
        if not core.list_namespaced_event(ns, field_selector="involvedObject.name=pin").items:
            failed.append("events")
    finally:
        allocator.stop()
    return failed


def _probe_surge(core, apps, custom, ns: str, target: NodeSpec) -> list[str]:
    """A surge move: the new pod on the target, the old one removed, the count back to 1."""
    apps.create_namespaced_deployment(ns, deployment("sg", replicas=1))
    if not _wait(lambda: running_pods(core, ns, "app=sg"), 30):
        return ["surge (the workload never ran)"]
    old = running_pods(core, ns, "app=sg")[0].metadata.name
    body = placement("sg", "probe-surge-1", {"app": "sg"}, target.name, ["gpu-2/10"], evict=old)
    body["spec"]["strategy"] = "Surge"
    try:
        custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body)
    except client.ApiException as e:
        return [f"validate surge (HTTP {e.status})"]

    def done() -> bool:
        st = custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, "sg").get("status") or {}
        names = [p.metadata.name for p in running_pods(core, ns, "app=sg")]
        # "may not mark": the pod to remove went unmarked (the ReplicaSet controller chose, this time luckily)
        ok = st.get("phase") == "Completed" and "may not mark" not in str(st.get("message"))
        return ok and names == [st.get("boundPod")]

    if not _wait(done, 30):
        st = custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, "sg").get("status") or {}
        return [f"surge ({st.get('phase')}: {str(st.get('message'))[:160]})"]
    return []


SPREAD = {"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "spread"}


def _probe_autopilot(api, testbed, s: AgentSet, label: str) -> list[str]:
    """The autopilot's duty: three 30% pods spread over their own 4-GPU node (one GPU whole-free),
    an Apply policy that wants 3 free; one move must complete (the policy read, its status written,
    the move's placement created)."""
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    ns = s.namespace("pilot")
    node = NodeSpec(f"{ns[:50]}-n0", gpus=4, labels={"pilot-pool": ns})
    testbed.add_nodes([node])
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    name = f"rbac-min-{label}"
    try:
        for i in range(3):
            body = deployment(
                f"slice-{i}",
                extra_limits={"nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"},
                pod_annotations=SPREAD,
            )
            body["spec"]["template"]["spec"]["nodeSelector"] = {"pilot-pool": ns}
            apps.create_namespaced_deployment(ns, body)
            # one at a time: each sees the GPUs the earlier ones took, so spread puts it on a free one
            _wait(
                lambda i=i: [
                    p
                    for p in running_pods(core, ns, f"app=slice-{i}")
                    if "hami.io/vgpu-devices-allocated" in (p.metadata.annotations or {})
                ],
                60,
            )
        policy = {
            "apiVersion": dp.API_VERSION,
            "kind": dp.KIND,
            "metadata": {"name": name, "labels": {"hami-place-agent": label}},
            "spec": {
                "mode": "Apply",
                "triggers": {"freeGPUs": {"below": 3}},
                "selector": {"namespaces": [ns]},
                "nodeSelector": {"matchLabels": {"pilot-pool": ns}},
                "minInterval": "0s",
            },
        }
        custom.create_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, policy)

        def status() -> dict[str, Any]:
            return dict(custom.get_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name).get("status") or {})

        if not _wait(lambda: status().get("movesSucceeded") or status().get("movesFailed"), 60):
            return [f"autopilot (no move ended; state {status().get('state')})"]
        st = status()
        if not st.get("movesSucceeded"):
            return [f"autopilot move ({(st.get('failedPods') or [{}])[-1].get('reason', '')[:120]})"]
        return []
    finally:
        allocator.stop()
        try:
            custom.delete_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name)
        except client.ApiException as e:
            if e.status != 404:
                raise
        core.delete_node(node.name)


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
    assert len(cluster_rules) == CORE_RULES + AUTOPILOT_RULES
    assert [r["resources"] for r in cluster_rules[CORE_RULES:]] == [
        ["hamidefragpolicies"],
        ["hamidefragpolicies/status"],
        ["hamipodplacements"],
    ]
    suffix = secrets.token_hex(3)
    sa = f"agent-minus-{suffix}"
    rules = copy.deepcopy(cluster_rules)
    removed = "nothing (control)" if case == "autopilot-control" else "the leader-election Role"
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
    autopilot = _autopilot_case(case)
    env = {
        "HAMI_PLACE_LEADER_ELECTION": "true",
        "HAMI_PLACE_NAMESPACE": NAMESPACE,
        "HAMI_PLACE_LEASE_NAME": f"lease-{suffix}",
        "HAMI_PLACE_LEASE_DURATION_SECONDS": "5",
    }
    if autopilot:
        env.update(
            {
                "HAMI_PLACE_AUTOPILOT_ENABLED": "true",
                "HAMI_PLACE_AUTOPILOT_INTERVAL_SECONDS": "0.5",
                "HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR": f"hami-place-agent={suffix}",
                "HAMI_PLACE_EVICTION_TIMEOUT_SECONDS": "6",
            }
        )
    s = AgentSet(testbed, api, tmp_path / "agent", f"min-{suffix}", 1, kubeconfig=kubeconfig, env=env)
    try:
        try:
            s.start(timeout=10)
            failed = _probe_autopilot(api, testbed, s, suffix) if autopilot else _probe(api, testbed, s, target)
        except (StartupError, AssertionError) as e:
            failed = [f"start ({str(e).splitlines()[0][:120]})"]
        print(f"without {removed}: failed duties: {failed}")
        if case == "autopilot-control":
            assert failed == [], f"the autopilot probe fails with every rule in place: {failed}\n{s.logs()[-3000:]}"
        else:
            assert failed, f"removing {removed} broke nothing: the rule is not needed"
    finally:
        s.stop()
        core.delete_node(target.name)
        for delete in (lambda: rbac.delete_cluster_role(sa), lambda: rbac.delete_cluster_role_binding(sa)):
            delete()
