"""`plan --for podgroup/NAME` against the test bed (issue 36): a native gang (Kubernetes 1.36's
PodGroup, feature gate GenericWorkload, through the real kube-scheduler) of 4-GPU pods waits
because free GPUs are scattered over four nodes; the plan names the moves and every member's node
and GPUs; a gang that cannot fit exits 1 with the member and the reason."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes import client
from kubernetes.client import ApiException

from kubectl_hami_place.cli import cli
from testbed.controlplane.waiting import wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator

pytestmark = [pytest.mark.testbed]

PODGROUPS = ("scheduling.k8s.io", "v1alpha2", "podgroups")


@pytest.fixture
def scattered(testbed: Any, api: Any, ns: str) -> Iterator[list[NodeSpec]]:
    """Four 4-GPU nodes of the namespace's own, one whole-GPU pod on each: 12 GPUs free, no node whole."""
    nodes = [NodeSpec(f"{ns[:45]}-g{i}", gpus=4, labels={"gang-pool": ns, "gang-node": str(i)}) for i in range(4)]
    testbed.add_nodes(nodes)
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    try:
        for i in range(4):
            # Preferred, not required: a pod pinned to its node by a selector could never move.
            body = deployment(f"filler-{i}", affinity=_prefer("gang-node", str(i)))
            body["spec"]["template"]["spec"]["nodeSelector"] = {"gang-pool": ns}
            apps.create_namespaced_deployment(ns, body)
        wait_for("the fillers allocated", lambda: len(_allocated(core, ns)) == 4, 90)
        assert len({p.spec.node_name for p in _allocated(core, ns)}) == 4  # one on each node
        yield nodes
    finally:
        allocator.stop()
        for n in nodes:
            with contextlib.suppress(ApiException):
                core.delete_node(n.name)


def _prefer(key: str, value: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}


def _allocated(core: Any, ns: str) -> list[Any]:
    pods = core.list_namespaced_pod(ns, label_selector="app").items
    return [p for p in pods if (p.metadata.annotations or {}).get("hami.io/vgpu-devices-allocated")]


def _gang(api: Any, ns: str, name: str, members: int, min_count: int) -> None:
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(*PODGROUPS[:2], ns, PODGROUPS[2], group)
    core = client.CoreV1Api(api)
    for i in range(members):
        template = deployment(f"{name}-{i}", gpu=4)["spec"]["template"]
        spec = {**template["spec"], "nodeSelector": {"gang-pool": ns}, "schedulingGroup": {"podGroupName": name}}
        meta = {**template["metadata"], "name": f"{name}-{i}"}
        core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})


def _plan(testbed: Any, ns: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["plan", *args, "-n", ns, "--kubeconfig", str(testbed.kubeconfig)])


def test_a_native_gang_waiting_on_scattered_gpus_gets_every_member_placed(
    testbed: Any, api: Any, ns: str, scattered: list[NodeSpec]
) -> None:
    _gang(api, ns, "train", members=2, min_count=2)
    core = client.CoreV1Api(api)
    members = "app in (train-0,train-1)"
    assert len(core.list_namespaced_pod(ns, label_selector=members).items) == 2
    time.sleep(3)  # the scheduler has tried them: no node has four free GPUs
    assert not any(p.spec.node_name for p in core.list_namespaced_pod(ns, label_selector=members).items)

    result = _plan(testbed, ns, "--for", "podgroup/train", "-o", "json")
    assert result.exit_code == 0, (result.output, result.exception)
    doc = json.loads(result.stdout)
    assert doc["kind"] == "HamiGangRoomPlan" and doc["fits"] and doc["wanted"] == 2, doc
    assert "its gang policy's minCount" in doc["gang"]
    placed = {m["pod"]: m for m in doc["members"]}
    assert set(placed) == {f"{ns}/train-0", f"{ns}/train-1"}
    nodes = {m["node"] for m in placed.values()}
    assert nodes <= {n.name for n in scattered} and len(nodes) == 2
    assert all(sorted(m["gpus"]) == [0, 1, 2, 3] for m in placed.values())
    # Two of the four nodes are made whole: their fillers go to the other two.
    assert len(doc["moves"]) == 2 and {m["from"]["node"] for m in doc["moves"]} == nodes

    table = _plan(testbed, ns, "--for", "podgroup/train")
    assert table.exit_code == 0 and "every member fits at once after 2 moves" in table.stdout, table.output


def test_a_gang_that_cannot_fit_exits_1_and_names_the_member(
    testbed: Any, api: Any, ns: str, scattered: list[NodeSpec]
) -> None:
    _gang(api, ns, "huge", members=5, min_count=5)  # 20 GPUs at once; the pool has 16
    result = _plan(testbed, ns, "--for", "podgroup/huge")
    assert result.exit_code == 1
    assert "no room for PodGroup" in str(result.exception) and "cannot fit" in str(result.exception)
    missing = _plan(testbed, ns, "--for", "podgroup/absent")
    assert missing.exit_code == 1 and "no pod in namespace" in str(missing.exception)
