"""Precise binding end to end: a placement pins the next matching pod to its node and GPUs, once."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from testbed.agents.agent_set import create_placement
from testbed.agents.tokens import bind_role, grant_node_read, user
from testbed.controlplane.waiting import wait_for
from testbed.data.placements import get_placement, placement
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator

pytestmark = pytest.mark.testbed
# What a placement author needs in their namespace (plus `get` on the nodes they target).
PLACER = [{"apiGroups": [hp.GROUP], "resources": [hp.PLURAL], "verbs": ["create", "get", "list"]}]


def custom(api):
    return client.CustomObjectsApi(api)


def dry_run_answer(api, ns: str, body: dict) -> tuple[int, str]:
    """(201, "") when the API server and the agent accept the placement (server dry run), else the
    status and the message."""
    try:
        custom(api).create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body, dry_run="All")
        return 201, ""
    except ApiException as e:
        return e.status, json.loads(e.body)["message"]


@pytest.mark.hami
def test_pin_first_pod_lands_on_target_and_second_is_untouched(api, ans, testbed, request) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    request.addfinalizer(start_allocator(api, {ans}).stop)  # real HAMi, or the stand-in in CI
    target = testbed.nodes[2]
    create_placement(api, ans, placement("pin-web", "pin-web-0001", {"app": "web"}, target.name, ["gpu-1/30"]))
    apps.create_namespaced_deployment(ans, deployment("web", replicas=1))

    pods = wait_for(
        "the first pod Running",
        lambda: [
            p for p in core.list_namespaced_pod(ans, label_selector="app=web").items if p.status.phase == "Running"
        ],
        60,
    )
    first = pods[0]
    assert first.spec.node_name == target.name
    assert first.metadata.annotations[ann.USE_GPU_UUID] == target.gpu_uuid(1)
    assert first.metadata.annotations[hp.POD_PLACEMENT] == "pin-web"
    assert first.metadata.annotations[hp.POD_REQ_ID] == "pin-web-0001"
    limits = first.spec.containers[0].resources.limits
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"}
    terms = first.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [f.to_dict() for f in terms[0].match_fields] == [
        {"key": "metadata.name", "operator": "In", "values": [target.name]}
    ]

    # HAMi's Filter (or the stand-in) allocates the pinned UUID: the placement completes on it.
    p = wait_for(
        "placement Completed",
        lambda: (o := get_placement(api, ans, "pin-web"))["status"].get("phase") == "Completed" and o,
        30,
    )
    assert p["status"]["boundPod"] == first.metadata.name
    assert p["status"]["boundPodUID"] == first.metadata.uid
    assert p["status"]["targetUUIDs"] == [target.gpu_uuid(1)]
    assert p["status"]["allocatedDevices"] == [target.gpu_uuid(1)]

    # The placement is consumed: a second pod of the same workload is not pinned.
    apps.patch_namespaced_deployment_scale("web", ans, {"spec": {"replicas": 2}})
    pods = wait_for(
        "2 pods",
        lambda: (ps := core.list_namespaced_pod(ans, label_selector="app=web").items) and len(ps) == 2 and ps,
        60,
    )
    second = next(p for p in pods if p.metadata.name != first.metadata.name)
    assert ann.USE_GPU_UUID not in (second.metadata.annotations or {})
    assert second.spec.affinity is None

    events = client.CoreV1Api(api).list_namespaced_event(ans, field_selector="involvedObject.name=pin-web").items
    assert {"Claimed", "Bound", "Allocated"} <= {e.reason for e in events}


@pytest.mark.standin_only(
    reason="it writes hami.io/vgpu-devices-allocated by hand (a matching and a mismatching UUID); "
    "real HAMi's Filter writes it for the same pod, so the two race"
)
def test_completed_when_hami_allocates_target(api, ans, testbed, request) -> None:
    """HAMi writes hami.io/vgpu-devices-allocated after Filter; with the stand-in scheduler the test
    writes it the way HAMi does. Matching UUIDs complete the placement, others fail it."""
    from testbed.data.gpu_nodes import NodeSpec

    core = client.CoreV1Api(api)
    node = NodeSpec(f"{ans[:50]}-n", gpus=4)  # its own node: the full-GPU allocations stay out of other tests
    testbed.add_nodes([node])
    request.addfinalizer(lambda: core.delete_node(node.name))
    for name, target, gpu_written in (("good", 0, 0), ("bad", 1, 3)):
        create_placement(api, ans, placement(name, f"{name}-00001", {"app": name}, node.name, [f"gpu-{target}"]))
        pod = {
            "metadata": {"generateName": f"{name}-", "labels": {"app": name}},
            "spec": {
                "schedulerName": "hami-scheduler",
                "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }
        created = core.create_namespaced_pod(ans, pod)
        wait_for("Bound", lambda n=name: get_placement(api, ans, n)["status"].get("phase") == "Bound", 30)
        encoded = ann.encode_pod_devices([[ann.ContainerDevice(node.gpu_uuid(gpu_written), "NVIDIA", 81920, 100)]])
        core.patch_namespaced_pod(
            created.metadata.name,
            ans,
            {"metadata": {"annotations": {ann.POD_VGPU_NODE: node.name, ann.POD_DEVICES_ALLOCATED: encoded}}},
        )
    good = wait_for(
        "Completed", lambda: (o := get_placement(api, ans, "good"))["status"]["phase"] == "Completed" and o, 30
    )
    assert good["status"]["allocatedDevices"] == [node.gpu_uuid(0)] and good["status"]["consumedAt"]
    bad = wait_for("Failed", lambda: (o := get_placement(api, ans, "bad"))["status"]["phase"] == "Failed" and o, 30)
    assert bad["status"]["reason"] == "AllocationMismatch"
    assert bad["status"]["message"] == f"HAMi allocated {node.gpu_uuid(3)} but the target was {node.gpu_uuid(1)}"


@pytest.mark.hami
def test_dry_run_consumes_nothing(api, ans, testbed) -> None:
    core = client.CoreV1Api(api)
    node = testbed.nodes[0]
    create_placement(api, ans, placement("dry", "dry-000001", {"app": "dry"}, node.name, ["gpu-2"]))
    pod = {
        "metadata": {"name": "dry-pod", "labels": {"app": "dry"}},
        "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "pause"}]},
    }
    shown = core.create_namespaced_pod(ans, pod, dry_run="All")
    # the would-be mutation is shown...
    assert shown.metadata.annotations[ann.USE_GPU_UUID] == node.gpu_uuid(2)
    # ...but the placement is still pending and the next real pod gets it
    assert get_placement(api, ans, "dry").get("status", {}).get("phase", "Pending") == "Pending"
    real = core.create_namespaced_pod(ans, pod)
    assert real.metadata.annotations[ann.USE_GPU_UUID] == node.gpu_uuid(2)
    # with real HAMi the pod may already be allocated, and the placement Completed
    assert get_placement(api, ans, "dry")["status"]["phase"] in ("Claimed", "Bound", "Completed")


def test_non_candidate_pods_are_never_touched(api, ans, testbed) -> None:
    core = client.CoreV1Api(api)
    create_placement(api, ans, placement("nc", "nc-000001", {"app": "plain"}, testbed.nodes[0].name, ["gpu-0"]))
    plain = core.create_namespaced_pod(
        ans,
        {
            "metadata": {"name": "plain", "labels": {"app": "plain"}},
            "spec": {"containers": [{"name": "c", "image": "pause"}]},
        },
    )
    assert ann.USE_GPU_UUID not in (plain.metadata.annotations or {})
    assert get_placement(api, ans, "nc").get("status", {}).get("phase", "Pending") == "Pending"


# ---- the validating webhook: every rejection, with its message -------------------------------------------
def _rejection(api, ns, body) -> str:
    with pytest.raises(ApiException) as e:
        create_placement(api, ns, body)
    assert e.value.status == 422, e.value.body
    return json.loads(e.value.body)["message"]


def test_rejects_missing_node(api, ans) -> None:
    msg = _rejection(api, ans, placement("x", "x-000001", {"app": "x"}, "ghost-node", ["gpu-0"]))
    assert msg.endswith("denied the request: node ghost-node not found")


def test_rejects_missing_gpu_index(api, ans, testbed) -> None:
    n = testbed.nodes[0].name
    msg = _rejection(api, ans, placement("x", "x-000001", {"app": "x"}, n, ["gpu-0", "gpu-7"]))
    assert msg.endswith(f"denied the request: node {n} has no GPU with index 7 (it has: 0, 1, 2, 3)")


def test_rejects_unhealthy_gpu(api, ans, testbed) -> None:
    from testbed.data.gpu_nodes import NodeSpec

    spec = NodeSpec(f"sick-{ans[-6:]}", gpus=2, unhealthy_indices=frozenset({1}))
    testbed.add_nodes([spec])
    try:
        wait_for("node in the agent cache", lambda: _node_known(api, ans, spec.name), 20)
        msg = _rejection(api, ans, placement("x", "x-000001", {"app": "x"}, spec.name, ["gpu-1"]))
        assert msg.endswith(f"denied the request: gpu-1 ({spec.gpu_uuid(1)}) on node {spec.name} is unhealthy")
    finally:
        client.CoreV1Api(api).delete_node(spec.name)


def test_rejects_a_node_without_cpu_for_the_pod_until_the_hog_leaves(api, ans, testbed) -> None:
    """kube-scheduler's NodeResourcesFit: a CPU hog (no GPU) fills a node's 64 CPUs; a placement
    there for a pod that requests 500m is refused with the shortfall, and accepted once it leaves."""
    from testbed.data.gpu_nodes import NodeSpec

    core = client.CoreV1Api(api)
    spec = NodeSpec(f"busy-{ans[-6:]}", gpus=2)
    testbed.add_nodes([spec])

    def bare(name: str, node: str, cpu: str) -> dict:
        return {
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
                ],
            },
        }

    body = placement("x", "x-000001", {"app": "needy"}, spec.name, ["gpu-0/30"])

    def verdict() -> str:
        try:
            create_placement(api, ans, body, dry_run="All")
            return "accepted"
        except ApiException as e:
            return str(json.loads(e.body)["message"])

    try:
        wait_for("node in the agent cache", lambda: _node_known(api, ans, spec.name), 20)
        core.create_namespaced_pod(ans, bare("needy", testbed.nodes[0].name, "500m"))
        core.create_namespaced_pod(ans, bare("hog", spec.name, "64"))
        msg = wait_for("the hog counted", lambda: (m := verdict()) != "accepted" and m, 20)
        assert msg.endswith(
            f"denied the request: node {spec.name} has no room for the pod: Insufficient cpu (0 free, 500m requested)"
        ), msg
        core.delete_namespaced_pod("hog", ans, grace_period_seconds=0)
        wait_for("the hog's CPU given back", lambda: verdict() == "accepted", 30)
    finally:
        core.delete_node(spec.name)


def _node_known(api, ns, node) -> bool:
    try:
        create_placement(api, ns, placement("probe", "probe-0001", {"app": "probe"}, node, ["gpu-0"]), dry_run="All")
        return True
    except ApiException as e:
        return "not found" not in e.body


@pytest.mark.hami
def test_rejects_full_gpu(api, ans, testbed, request) -> None:
    from testbed.hami.hami_pods import pinned_pod

    core = client.CoreV1Api(api)
    node = testbed.nodes[3]
    request.addfinalizer(start_allocator(api, {ans}).stop)
    # HAMi (or the stand-in) allocates the hog exactly on gpu-2: 70 GiB and 80% of it
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "71680", "nvidia.com/gpucores": "80"}
    core.create_namespaced_pod(ans, pinned_pod("hog", node.name, [node.gpu_uuid(2)], limits))
    wait_for("hog counted", lambda: not _fits(api, ans, node.name), 20)
    msg = _rejection(api, ans, placement("x", "x-000001", {"app": "x"}, node.name, ["gpu-2/30"]))
    assert msg.endswith(
        f"denied the request: the target GPUs on node {node.name} have no room for the request: "
        "gpu-2: not enough free GPU memory (CardInsufficientMemory)"
    )


def _fits(api, ns, node) -> bool:
    try:
        create_placement(api, ns, placement("probe", "probe-0001", {"app": "probe"}, node, ["gpu-2/30"]), dry_run="All")
        return True
    except ApiException:
        return False


def test_rejects_reused_req_id(api, ans, testbed) -> None:
    n = testbed.nodes[0].name
    create_placement(api, ans, placement("first", "same-req-1", {"app": "a"}, n, ["gpu-0"]))
    wait_for("first in cache", lambda: "already used" in _probe_dup(api, ans, n), 20)
    msg = _rejection(api, ans, placement("second", "same-req-1", {"app": "b"}, n, ["gpu-1"]))
    assert msg.endswith(f"denied the request: reqID 'same-req-1' is already used by placement first in namespace {ans}")


def _probe_dup(api, ns, node) -> str:
    try:
        create_placement(api, ns, placement("dup-probe", "same-req-1", {"app": "b"}, node, ["gpu-1"]), dry_run="All")
        return ""
    except ApiException as e:
        return e.body


@pytest.mark.hami
def test_rejects_spec_change_after_claim(api, ans, testbed) -> None:
    core = client.CoreV1Api(api)
    n = testbed.nodes[0].name
    create_placement(api, ans, placement("frozen", "frozen-001", {"app": "frozen"}, n, ["gpu-3"]))
    core.create_namespaced_pod(
        ans,
        {
            "metadata": {"name": "f", "labels": {"app": "frozen"}},
            "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "pause"}]},
        },
    )
    wait_for(
        "claimed",
        lambda: get_placement(api, ans, "frozen").get("status", {}).get("phase") in ("Claimed", "Bound", "Completed"),
        20,
    )
    with pytest.raises(ApiException) as e:
        custom(api).patch_namespaced_custom_object(
            hp.GROUP, hp.VERSION, ans, hp.PLURAL, "frozen", {"spec": {"gpuDevices": ["gpu-2"]}}
        )
    assert e.value.status == 422
    assert "placement frozen was already claimed (phase" in json.loads(e.value.body)["message"]
    assert (
        "its spec can no longer change. Delete it and create a new one with a new reqID"
        in json.loads(e.value.body)["message"]
    )


def test_rejects_missing_or_standalone_evict_pod(api, ans, testbed) -> None:
    core = client.CoreV1Api(api)
    n = testbed.nodes[0].name
    msg = _rejection(api, ans, placement("x", "x-000001", {"app": "solo"}, n, ["gpu-0"], evict="nope"))
    assert msg.endswith(f"denied the request: evictPod nope not found in namespace {ans}")
    core.create_namespaced_pod(
        ans,
        {
            "metadata": {"name": "solo", "labels": {"app": "solo"}},
            "spec": {"containers": [{"name": "c", "image": "pause"}]},
        },
    )
    wait_for("solo cached", lambda: "not found in namespace" not in _evict_probe(api, ans, n), 20)
    msg = _rejection(api, ans, placement("x", "x-000001", {"app": "solo"}, n, ["gpu-0"], evict="solo"))
    assert msg.endswith(
        "denied the request: evictPod solo has no controller owner: nothing would recreate it after eviction"
    )


def _evict_probe(api, ns, node) -> str:
    try:
        create_placement(
            api, ns, placement("x", "x-000001", {"app": "solo"}, node, ["gpu-0"], evict="solo"), dry_run="All"
        )
        return ""
    except ApiException as e:
        return e.body


@pytest.mark.hami
def test_rejects_user_who_may_not_evict(api, ans, testbed, tmp_kubeconfig, request) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment(ans, deployment("victim", replicas=1))
    pod = wait_for("victim pod", lambda: core.list_namespaced_pod(ans, label_selector="app=victim").items, 30)[0]
    # "alice" may manage placements but not evict pods
    bind_role(api, ans, "alice", [user("alice")], PLACER)
    alice = client.CustomObjectsApi(testbed.api_client(tmp_kubeconfig("alice")))
    request.addfinalizer(grant_node_read(api, f"alice-nodes-{ans}", [user("alice")], [testbed.nodes[0].name]))
    body = placement("move", "move-00001", {"app": "victim"}, testbed.nodes[0].name, ["gpu-0"], evict=pod.metadata.name)
    wait_for("victim cached", lambda: "not found in namespace" not in _alice_probe(alice, ans, body), 20)
    with pytest.raises(ApiException) as e:
        alice.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ans, hp.PLURAL, body)
    assert e.value.status == 422
    assert json.loads(e.value.body)["message"].endswith(
        f"denied the request: user alice may not create pods/eviction in namespace {ans}; "
        "hami-place evicts only what the requester could evict"
    )
    # the admin may: the same placement is accepted
    create_placement(api, ans, body)


def _alice_probe(alice, ns, body) -> str:
    try:
        alice.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body, dry_run="All")
        return ""
    except ApiException as e:
        return e.body


@pytest.mark.hami
def test_rejects_a_surge_by_a_user_who_may_not_scale(api, ans, testbed, tmp_kubeconfig, request) -> None:
    """A surge changes the workload's replica count: the requester must be allowed to (the scale
    subresource of its Deployment), on top of evicting."""
    core, apps, rbac = client.CoreV1Api(api), client.AppsV1Api(api), client.RbacAuthorizationV1Api(api)
    apps.create_namespaced_deployment(
        ans, deployment("sv", replicas=1, extra_limits={"nvidia.com/gpumem-percentage": "10"})
    )
    pod = wait_for("sv pod", lambda: core.list_namespaced_pod(ans, label_selector="app=sv").items, 30)[0]
    rules = [*PLACER, {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]
    bind_role(api, ans, "bob", [user("bob")], rules)
    bob = client.CustomObjectsApi(testbed.api_client(tmp_kubeconfig("bob")))
    request.addfinalizer(grant_node_read(api, f"bob-nodes-{ans}", [user("bob")], [testbed.nodes[0].name]))
    body = placement(
        "sv-move", "sv-move-01", {"app": "sv"}, testbed.nodes[0].name, ["gpu-0/10"], evict=pod.metadata.name
    )
    wait_for("sv cached", lambda: "not found in namespace" not in _alice_probe(bob, ans, body), 20)
    assert _alice_probe(bob, ans, body) == ""  # an eviction: allowed
    body["spec"]["strategy"] = "Surge"
    message = json.loads(_alice_probe(bob, ans, body))["message"]
    assert message.endswith(
        f"denied the request: user bob may not patch deployments/scale sv in namespace {ans}; strategy Surge scales it"
    ), message
    rules.append({"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]})
    rbac.patch_namespaced_role("bob", ans, {"rules": rules})
    wait_for("bob may surge", lambda: _alice_probe(bob, ans, body) == "", 20)


def test_a_user_who_may_not_read_a_node_learns_nothing_about_it(api, ans, testbed, tmp_kubeconfig, request) -> None:
    """Forbidden before NotFound: without `get` on a node (or `list nodes`), a placement naming it is
    refused with one answer whether the node exists, has that GPU or has room; with `get` on that
    one node (resourceNames) the same dry run is judged on the node, and other nodes stay closed."""
    bind_role(api, ans, "carol", [user("carol")], PLACER)
    carol = client.CustomObjectsApi(testbed.api_client(tmp_kubeconfig("carol")))
    real, other = testbed.nodes[0].name, testbed.nodes[1].name

    def answer(node: str, gpu: str) -> tuple[int, str]:
        body = placement("probe", "probe-00001", {"app": "probe"}, node, [gpu])
        try:
            carol.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ans, hp.PLURAL, body, dry_run="All")
            return 201, ""
        except ApiException as e:
            return e.status, json.loads(e.body)["message"]

    wait_for("carol may create placements", lambda: answer(real, "gpu-0")[0] == 403, 20)
    for node, gpu in ((real, "gpu-0"), (real, "gpu-999"), ("no-such-node", "gpu-0")):
        status, message = answer(node, gpu)
        assert status == 403, (node, gpu, message)
        assert message.endswith(
            f"denied the request: user carol may not get node {node}; a placement targets a node's GPUs, so its "
            "author must be allowed to read that node"
        ), message
        assert "it has" not in message and "not found" not in message
    request.addfinalizer(grant_node_read(api, f"carol-nodes-{ans}", [user("carol")], [real]))
    wait_for("carol may read one node", lambda: answer(real, "gpu-0")[0] == 201, 20)
    status, message = answer(real, "gpu-999")
    assert status == 422 and "has no GPU with index 999" in message, message
    assert answer(other, "gpu-0")[0] == 403


def test_a_cordoned_node_is_refused_until_uncordoned(api, ans, testbed, request) -> None:
    """kube-scheduler places no new pod on a cordoned node, so a pin there would never land (and a
    move would evict its pod for nothing): refused with the fix, accepted once uncordoned."""
    from testbed.data.gpu_nodes import NodeSpec

    core = client.CoreV1Api(api)
    node = NodeSpec(f"{ans[:50]}-cordon", gpus=2)
    testbed.add_nodes([node])
    request.addfinalizer(lambda: core.delete_node(node.name))
    core.patch_node(node.name, {"spec": {"unschedulable": True}})
    body = placement("cordoned", "cordoned-01", {"app": "nothing-yet"}, node.name, ["gpu-0"])

    def answer() -> tuple[int, str]:
        return dry_run_answer(api, ans, body)

    _, message = wait_for("the cordon seen", lambda: (a := answer())[0] == 422 and a, 20)
    assert message.endswith(
        f"node {node.name} is cordoned (spec.unschedulable): no new pod is scheduled there; "
        f"run kubectl uncordon {node.name} first"
    ), message
    core.patch_node(node.name, {"spec": {"unschedulable": False}})
    wait_for("accepted once uncordoned", lambda: answer()[0] == 201, 20)


@pytest.mark.hami
def test_a_node_the_pods_tolerations_exclude_is_refused_until_the_taint_goes(api, ans, testbed, request) -> None:
    """kube-scheduler's TaintToleration filter: the pin is ANDed into the pod's own constraints, so
    a pin onto a node with a taint the workload's pods do not tolerate would never land (and a move
    would evict its pod for nothing): refused naming the pod and the taint, accepted once it goes."""
    from testbed.data.gpu_nodes import NodeSpec

    core = client.CoreV1Api(api)
    node = NodeSpec(f"{ans[:50]}-taint", gpus=2)
    testbed.add_nodes([node])
    request.addfinalizer(lambda: core.delete_node(node.name))
    core.patch_node(node.name, {"spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}})
    allocator = start_allocator(api, {ans}, choose_gpus=True)  # this pod is not pinned: allocate it anyway
    request.addfinalizer(allocator.stop)
    client.AppsV1Api(api).create_namespaced_deployment(ans, deployment("tol"))
    pod = wait_for(
        "the workload's pod allocated",
        lambda: next(
            (p for p in core.list_namespaced_pod(ans, label_selector="app=tol").items
             if (p.metadata.annotations or {}).get(ann.POD_VGPU_NODE)),
            None,
        ),
        60,
    )  # fmt: skip
    body = placement("tainted", "tainted-01", {"app": "tol"}, node.name, ["gpu-0"])

    def answer() -> tuple[int, str]:
        return dry_run_answer(api, ans, body)

    _, message = wait_for("the taint seen", lambda: (a := answer())[0] == 422 and "taint" in a[1] and a, 30)
    assert message.endswith(
        f"pod {ans}/{pod.metadata.name} cannot run on node {node.name}: "
        "taint dedicated=infer:NoSchedule is not tolerated"
    ), message
    core.patch_node(node.name, {"spec": {"taints": None}})
    wait_for("accepted once the taint is gone", lambda: answer()[0] == 201, 30)
