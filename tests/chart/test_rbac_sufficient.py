"""The chart's RBAC is sufficient: the agent, running with a token of the chart's ServiceAccount
(not admin), serves the pin and the move flows end to end on the test bed."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from kubernetes import client

from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from testbed.agents.agent_set import AgentSet, create_placement
from testbed.controlplane.chart import render_chart
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.placements import placement
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator

# The pin and move duties cross HAMi (its Filter allocates the pinned pods): both modes.
pytestmark = [pytest.mark.testbed, pytest.mark.hami]

RELEASE, NAMESPACE = "gpu-descheduler", "hami-place-rbac"


def _render_rbac(testbed) -> list[dict]:
    show = ("--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml")
    return render_chart(testbed.binary("helm"), NAMESPACE, *show, release=RELEASE)


def _token_kubeconfig(testbed, api, sa: str, path: Path) -> Path:
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(sa, NAMESPACE, {"spec": {"expirationSeconds": 3600}})
        .status.token
    )
    return testbed.write_token_kubeconfig(path, sa, token)


def test_agent_with_the_charts_serviceaccount_pins_and_moves(api, testbed, tmp_path) -> None:
    install_crd(api)
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    docs = _render_rbac(testbed)
    kinds = sorted(d["kind"] for d in docs)
    # the agent's ClusterRole, plus the aggregated placement-editor and policy-viewer roles for users
    # (not bound to the agent); the autopilot's own rules are in the agent's ClusterRole and proven
    # sufficient by test_rbac_minimal.py's control case
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ], kinds
    api_dynamic = client.ApiClient(api.configuration)
    from kubernetes import utils

    for d in docs:
        try:
            utils.create_from_dict(api_dynamic, d, namespace=NAMESPACE)
        except utils.FailToCreateError as e:
            if not all(getattr(x, "status", 0) == 409 for x in e.api_exceptions):
                raise
    sa = next(d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount")
    kubeconfig = _token_kubeconfig(testbed, api, sa, tmp_path / "sa.kubeconfig")
    suffix = secrets.token_hex(3)
    lease = f"hami-place-rbac-{suffix}"
    s = AgentSet(
        testbed,
        api,
        tmp_path / "agent",
        "rbac",
        1,
        kubeconfig=kubeconfig,
        env={
            "HAMI_PLACE_LEADER_ELECTION": "true",
            "HAMI_PLACE_NAMESPACE": NAMESPACE,
            "HAMI_PLACE_LEASE_NAME": lease,
            "HAMI_PLACE_LEASE_DURATION_SECONDS": "5",
        },
    ).start()
    target = NodeSpec(f"rbac-{suffix}", gpus=4)
    testbed.add_nodes([target])
    allocator = None
    try:
        ns = s.namespace("rbac")
        allocator = start_allocator(api, {ns})  # real HAMi, or the stand-in in CI
        # pin
        create_placement(api, ns, placement("pin", "rbac-pin-01", {"app": "p"}, target.name, ["gpu-0/20"]))
        pod = core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": "p", "labels": {"app": "p"}},
                "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "pause"}]},
            },
        )
        assert pod.metadata.annotations[ann.USE_GPU_UUID] == target.gpu_uuid(0)
        wait_for(
            "pin Completed",
            lambda: (
                (
                    custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, "pin").get("status") or {}
                ).get("phase")
                == "Completed"
            ),
            60,
        )
        # move
        apps.create_namespaced_deployment(ns, deployment("m", replicas=1))
        victim = wait_for(
            "pod Running",
            lambda: [
                p for p in core.list_namespaced_pod(ns, label_selector="app=m").items if p.status.phase == "Running"
            ],
            60,
        )[0]
        create_placement(
            api, ns, placement("mv", "rbac-move-1", {"app": "m"}, target.name, ["gpu-1/20"], evict=victim.metadata.name)
        )
        st = wait_for(
            "move Completed",
            lambda: (
                (
                    o := custom.get_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, "mv").get("status")
                    or {}
                ).get("phase")
                in ("Completed", "Failed")
                and o
            ),
            90,
        )
        assert st["phase"] == "Completed", (st.get("reason"), st.get("message"))
        # the leader lease was taken with the namespaced Role, events were recorded with the ClusterRole
        assert (
            client.CoordinationV1Api(api).read_namespaced_lease(lease, NAMESPACE).spec.holder_identity == s.agent.name
        )
        assert core.list_namespaced_event(ns, field_selector="involvedObject.name=mv").items
        code, _ = s.agent.get("/api/v1/placements", None)
        assert code == 401
    finally:
        if allocator:
            allocator.stop()
        print(s.logs())
        s.stop()
        core.delete_node(target.name)
