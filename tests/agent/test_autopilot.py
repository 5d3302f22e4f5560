"""The autopilot (issue 23) end to end: HamiDefragPolicies acted on by the real agent.

Each test gets its own nodes (labelled for the policy's nodeSelector) and namespace; the agent
set evaluates only policies labelled for it (HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR), so nothing
here acts on another test's pods. The layout is asked for through HAMi's own per-pod GPU policy
(spread: each pod on the least used GPU), never by writing HAMi's allocation: with real HAMi its
Filter allocates, in CI the labelled stand-in does (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp
from kubectl_hami_place.printers import counted
from testbed.agents.agent_set import AgentSet
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import running_pods, wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator

pytestmark = [pytest.mark.testbed, pytest.mark.hami]

LABEL = "autopilot"
ENV = {
    "HAMI_PLACE_AUTOPILOT_ENABLED": "true",
    "HAMI_PLACE_AUTOPILOT_INTERVAL_SECONDS": "0.5",
    "HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR": f"hami-place-agent={LABEL}",
    "HAMI_PLACE_EVICTION_TIMEOUT_SECONDS": "6",
}
SPREAD = {"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "spread"}


@pytest.fixture(scope="module")
def pilot(testbed: Any, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSet]:
    install_crd(api)
    s = AgentSet(testbed, api, tmp_path_factory.mktemp("autopilot"), LABEL, 1, ENV).start()
    yield s
    s.stop()


@pytest.fixture
def pool(pilot: AgentSet, testbed: Any, api: Any, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A namespace with three 30% pods spread over one 4-GPU node of its own: one GPU free."""
    ns = pilot.namespace(request.node.name)
    node = NodeSpec(f"{ns[:50]}-n0", gpus=4, labels={"pilot-pool": ns})
    testbed.add_nodes([node])
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    try:
        for i in range(3):
            body = deployment(
                f"slice-{i}",
                extra_limits={"nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"},
                pod_annotations=SPREAD,
            )
            body["spec"]["template"]["spec"]["nodeSelector"] = {"pilot-pool": ns}
            apps.create_namespaced_deployment(ns, body)
            # One at a time: each sees the GPUs the earlier ones took, so spread puts it on a free one.
            wait_for(f"slice-{i} allocated", lambda i=i: allocated(core, ns, f"app=slice-{i}"), 60)
        assert whole_free(core, ns, node) == 1
        # Rolled out too, as `kubectl rollout status` says: a surge refuses a Deployment whose status
        # has not caught up ("mid-rollout"), and under load the Deployment controller lags the pods.
        wait_for("the Deployments rolled out", lambda: all(rolled_out(apps, ns, f"slice-{i}") for i in range(3)), 60)
        yield {"ns": ns, "node": node, "api": api}
    finally:
        allocator.stop()
        for name in [p["metadata"]["name"] for p in list_policies(api)]:
            with contextlib.suppress(ApiException):
                delete_policy(api, name)
        with contextlib.suppress(ApiException):
            core.delete_node(node.name)


# ---- helpers ----------------------------------------------------------------------------------------
def rolled_out(apps: Any, ns: str, name: str) -> bool:
    d = apps.read_namespaced_deployment(name, ns)
    st, want = d.status, d.spec.replicas
    return bool(
        (st.observed_generation or 0) >= (d.metadata.generation or 0)
        and (st.updated_replicas or 0) == want
        and (st.replicas or 0) == want
        and (st.available_replicas or 0) == want
    )


def allocated(core: Any, ns: str, selector: str) -> list[Any]:
    return [
        p
        for p in running_pods(core, ns, selector)
        if p.spec.node_name and "hami.io/vgpu-devices-allocated" in (p.metadata.annotations or {})
    ]


def gpus_used(core: Any, ns: str) -> set[str]:
    """GPU UUIDs in the running pods' raw hami.io/vgpu-devices-allocated (not read through the model)."""
    used: set[str] = set()
    for pod in running_pods(core, ns, "app"):
        value = (pod.metadata.annotations or {}).get("hami.io/vgpu-devices-allocated", "")
        used |= {e.split(",")[0] for e in value.replace(";", ":").split(":") if e.startswith("GPU-")}
    return used


def whole_free(core: Any, ns: str, node: NodeSpec) -> int:
    return node.gpus - len(gpus_used(core, ns))


def policy(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": dp.API_VERSION,
        "kind": dp.KIND,
        "metadata": {"name": name, "labels": {"hami-place-agent": LABEL}},
        "spec": {
            "triggers": {"freeGPUs": {"below": 3}},
            "selector": {"namespaces": [ns]},
            "nodeSelector": {"matchLabels": {"pilot-pool": ns}},
            "minInterval": "0s",
            **spec,
        },
    }
    return body


def custom(api: Any) -> Any:
    return client.CustomObjectsApi(api)


def create_policy(api: Any, body: dict[str, Any]) -> dict[str, Any]:
    return dict(custom(api).create_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, body))


def get_policy(api: Any, name: str) -> dict[str, Any]:
    return dict(custom(api).get_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name))


def patch_policy(api: Any, name: str, spec: dict[str, Any]) -> None:
    custom(api).patch_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name, {"spec": spec})


def delete_policy(api: Any, name: str) -> None:
    custom(api).delete_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL, name)


def list_policies(api: Any) -> list[dict[str, Any]]:
    items = custom(api).list_cluster_custom_object(dp.GROUP, dp.VERSION, dp.PLURAL)["items"]
    return [p for p in items if (p["metadata"].get("labels") or {}).get("hami-place-agent") == LABEL]


def status_when(api: Any, name: str, what: str, check: Any, timeout: float = 60) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        st = get_policy(api, name).get("status") or {}
        return st if check(st) else None

    try:
        return wait_for(what, probe, timeout, 0.2)
    except AssertionError as e:
        raise AssertionError(
            f"{e}\nstatus: {json.dumps(get_policy(api, name).get('status'), indent=1)[:3000]}"
        ) from None


def placements_of(api: Any, ns: str, name: str) -> list[dict[str, Any]]:
    items = custom(api).list_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL)["items"]
    return [p for p in items if (p["metadata"].get("labels") or {}).get(dp.POLICY_LABEL) == name]


def policy_events(api: Any, name: str) -> list[Any]:
    """The policy's Events, one entry per occurrence: a repeat the recorder aggregated into one
    Event (its count) is listed as often as it happened, so counting entries counts occurrences."""
    events = client.CoreV1Api(api).list_namespaced_event("default").items
    mine = [e for e in events if e.involved_object.kind == dp.KIND and e.involved_object.name == name]
    return [e for e in mine for _ in range(e.count or 1)]


# ---- tests ------------------------------------------------------------------------------------------
def test_dry_run_records_the_plan_and_apply_executes_it(pool: dict[str, Any]) -> None:
    api, ns, node = pool["api"], pool["ns"], pool["node"]
    core = client.CoreV1Api(api)
    create_policy(api, policy("pack", ns))
    st = status_when(api, "pack", "a DryRun plan", lambda s: s.get("state") == "Planned")
    plan = st["plan"]
    assert st["trigger"] == "1 whole GPUs free (below 3)"
    assert plan["gpusFreed"] == 2 and len(plan["moves"]) == 2, plan
    # The demand's room before and after (issue 36): the status says it, as the plan does.
    room = plan["room"]
    assert room["source"] == "the running mix" and room["pods"], room
    assert room["pods"][0]["after"] >= room["pods"][0]["before"], room
    assert all(m["to"].startswith(node.name + "/") for m in plan["moves"])
    assert "DryRun" in st["message"] and st["conditions"][0]["status"] == "True"
    wait_for("the Planned event", lambda: [e for e in policy_events(api, "pack") if e.reason == "Planned"], 30)
    time.sleep(2)  # several evaluations: still nothing moves
    assert placements_of(api, ns, "pack") == [] and whole_free(core, ns, node) == 1

    patch_policy(api, "pack", {"mode": "Apply"})
    st = status_when(
        api, "pack", "two moves done and Idle", lambda s: s.get("movesSucceeded") == 2 and s.get("state") == "Idle", 150
    )
    assert st.get("movesFailed", 0) == 0 and not st.get("inFlight")
    assert [m["result"] for m in st["recentMoves"]] == ["Succeeded", "Succeeded"]
    wait_for(
        "three whole GPUs free", lambda: whole_free(core, ns, node) == 3 and len(allocated(core, ns, "app")) == 3, 60
    )
    done = placements_of(api, ns, "pack")
    assert len(done) == 2 and all(p["status"]["phase"] == hp.COMPLETED for p in done)
    reasons = [e.reason for e in policy_events(api, "pack")]
    assert reasons.count("MoveStarted") == 2 and reasons.count("MoveSucceeded") == 2


def test_outside_the_window_nothing_moves(pool: dict[str, Any]) -> None:
    api, ns, node = pool["api"], pool["ns"], pool["node"]
    hour = (time.gmtime().tm_hour + 12) % 24  # twelve hours away: closed now
    create_policy(api, policy("closed", ns, mode="Apply", window={"schedule": f"0 {hour} * * *", "duration": "1h"}))
    st = status_when(api, "closed", "waiting for the window", lambda s: s.get("state") == "WaitingForWindow")
    assert "outside the window" in st["message"] and len(st["plan"]["moves"]) == 2
    time.sleep(2)
    assert placements_of(api, ns, "closed") == [] and whole_free(client.CoreV1Api(api), ns, node) == 1


def test_per_hour_budget_holds(pool: dict[str, Any]) -> None:
    api, ns = pool["api"], pool["ns"]
    create_policy(api, policy("one-an-hour", ns, mode="Apply", budgets={"movesPerHour": 1}))
    st = status_when(
        api,
        "one-an-hour",
        "one move, then waiting for the budget",
        lambda s: s.get("movesSucceeded") == 1 and s.get("state") == "WaitingForBudget",
        120,
    )
    assert "1 moves in the last hour (movesPerHour 1)" in st["message"]
    time.sleep(3)
    assert len(placements_of(api, ns, "one-an-hour")) == 1
    assert [e.reason for e in policy_events(api, "one-an-hour")].count("MoveStarted") == 1


def test_minimum_interval_holds(pool: dict[str, Any]) -> None:
    api, ns = pool["api"], pool["ns"]
    create_policy(api, policy("spaced", ns, mode="Apply", minInterval="1h"))
    st = status_when(
        api,
        "spaced",
        "one move, then waiting for the interval",
        lambda s: s.get("movesSucceeded") == 1 and s.get("state") == "WaitingForBudget",
        120,
    )
    assert "(minInterval 3600s)" in st["message"] and len(st["plan"]["moves"]) == 1  # the next move is planned
    time.sleep(3)
    assert [e.reason for e in policy_events(api, "spaced")].count("MoveStarted") == 1


def test_metrics_count_evaluations_and_moves(pilot: AgentSet, pool: dict[str, Any]) -> None:
    api, ns = pool["api"], pool["ns"]
    create_policy(api, policy("counted", ns, mode="Apply", budgets={"movesPerHour": 1}))
    status_when(api, "counted", "one move done", lambda s: s.get("movesSucceeded") == 1, 120)

    def metric(name: str, **labels: str) -> float:
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in pilot.agent.get("/metrics")[1].decode().splitlines():
            if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.split()[-1])
        raise AssertionError(f"no {name}{{{want}}}")

    assert metric("hami_place_autopilot_moves_total", policy="counted", result="started") == 1
    wait_for(
        "the success counted",
        lambda: metric("hami_place_autopilot_moves_total", policy="counted", result="succeeded") == 1,
        30,
    )
    assert metric("hami_place_autopilot_evaluations_total", policy="counted", result="planned") >= 2
    assert metric("hami_place_autopilot_plan_moves", policy="counted") == 1  # the next move, waiting


def test_deleting_the_policy_stops_it(pool: dict[str, Any]) -> None:
    api, ns = pool["api"], pool["ns"]
    create_policy(api, policy("gone", ns, mode="Apply", minInterval="1h"))
    status_when(api, "gone", "the first move done", lambda s: s.get("movesSucceeded") == 1, 120)
    delete_policy(api, "gone")
    time.sleep(3)
    assert len(placements_of(api, ns, "gone")) == 1  # no second move after the deletion


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"window": {"schedule": "0 0 30 2 *", "duration": "1h"}}, "cron '0 0 30 2 *' never fires"),
        ({"window": {"schedule": "0 2 * * *", "duration": "1h", "timeZone": "Mars/Olympus"}}, "unknown time zone"),
        ({"selector": {}}, "an empty selector would let the autopilot move any pod"),
        ({"budgets": {"movesPerHour": -1}}, "spec.budgets.movesPerHour"),
        ({"window": {"schedule": "0 2 * *", "duration": "1h"}}, "schedule must have five fields"),
    ],
)
def test_bad_policies_are_refused_at_admission(pilot: AgentSet, api: Any, spec: dict[str, Any], message: str) -> None:
    body = policy("bad", "default", **spec)
    with pytest.raises(ApiException) as e:
        create_policy(api, body)
    assert e.value.status in (403, 422) and message in json.loads(e.value.body)["message"], e.value.body


def test_a_pdb_blocked_move_is_recorded_and_another_plan_runs(pool: dict[str, Any]) -> None:
    api, ns, node = pool["api"], pool["ns"], pool["node"]
    core = client.CoreV1Api(api)
    create_policy(api, policy("blocked", ns))
    first = status_when(api, "blocked", "a DryRun plan", lambda s: s.get("state") == "Planned")["plan"]["moves"][0]
    victim = first["pod"].split("/", 1)[1]
    app = core.read_namespaced_pod(victim, ns).metadata.labels["app"]
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        ns, {"metadata": {"name": "freeze"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}}
    )
    patch_policy(api, "blocked", {"mode": "Apply"})
    st = status_when(
        api,
        "blocked",
        "the blocked move failed and the others ran",
        lambda s: s.get("movesFailed") == 1 and s.get("movesSucceeded") == 2 and s.get("state") == "Idle",
        180,
    )
    assert [f["pod"] for f in st["failedPods"]] == [first["pod"]]
    assert "PodDisruptionBudget" in st["failedPods"][0]["reason"] or "disruption" in st["failedPods"][0]["reason"]
    started = [e.message for e in policy_events(api, "blocked") if e.reason == "MoveStarted"]
    assert sum(f"moving {first['pod']} " in m for m in started) == 1, started  # not retried in a loop
    wait_for("three whole GPUs free", lambda: whole_free(core, ns, node) == 3, 60)


def test_move_strategy_auto_surges_where_a_pdb_blocks_every_eviction(pool: dict[str, Any]) -> None:
    """spec.moveStrategy: with a PDB that allows no eviction at all, an evicting policy could not
    move anything; Auto surges each 1-replica Deployment instead, and no replica count changes."""
    api, ns, node = pool["api"], pool["ns"], pool["node"]
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    pdb = {
        "metadata": {"name": "all"},
        "spec": {"minAvailable": "100%", "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
    }
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(ns, pdb)
    create_policy(api, policy("surging", ns, mode="Apply", moveStrategy="Auto"))
    st = status_when(
        api, "surging", "two moves done", lambda s: s.get("movesSucceeded") == 2 and s.get("state") == "Idle", 180
    )
    made = placements_of(api, ns, "surging")
    assert st.get("movesFailed", 0) == 0, json.dumps(
        {"failedPods": st.get("failedPods"), "placements": [p.get("status") for p in made]}, indent=1
    )
    assert [(p["spec"]["strategy"], p["status"]["strategy"], p["status"]["phase"]) for p in made] == [
        ("Auto", "Surge", hp.COMPLETED)
    ] * 2, [p["status"] for p in made]
    assert all(p["status"].get("surgeOutcome") == hp.COMPLETED for p in made), [p["status"] for p in made]
    assert [apps.read_namespaced_deployment(f"slice-{i}", ns).spec.replicas for i in range(3)] == [1, 1, 1]
    wait_for(
        "three whole GPUs free", lambda: whole_free(core, ns, node) == 3 and len(allocated(core, ns, "app")) == 3, 60
    )


def test_leader_failover_in_the_middle_of_a_move_evicts_no_pod_twice(testbed: Any, api: Any, tmp_path: Any) -> None:
    label = "autopilot-ha"
    env = {
        **ENV,
        "HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR": f"hami-place-agent={label}",
        "HAMI_PLACE_LEADER_ELECTION": "true",
        "HAMI_PLACE_LEASE_DURATION_SECONDS": "3",
        "HAMI_PLACE_LEASE_NAME": f"hami-place-pilot-{int(time.time())}",
        "HAMI_PLACE_NAMESPACE": "default",
    }
    install_crd(api)
    s = AgentSet(testbed, api, tmp_path / "ha", label, 2, env).start()
    ns = s.namespace("pilot-ha")
    node = NodeSpec(f"{ns[:50]}-n0", gpus=4, labels={"pilot-pool": ns})
    testbed.add_nodes([node])
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    try:
        for i in range(3):
            body = deployment(
                f"slice-{i}",
                extra_limits={"nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"},
                pod_annotations=SPREAD,
            )
            body["spec"]["template"]["spec"]["nodeSelector"] = {"pilot-pool": ns}
            apps.create_namespaced_deployment(ns, body)
            wait_for(f"slice-{i} allocated", lambda i=i: allocated(core, ns, f"app=slice-{i}"), 60)
        body = policy("ha", ns, mode="Apply")
        body["metadata"]["labels"]["hami-place-agent"] = label
        create_policy(api, body)
        flight = status_when(api, "ha", "a move in flight", lambda st: st.get("inFlight"), 60)["inFlight"]

        def leaders() -> list[Any]:
            out = []
            for a in s.agents:
                with contextlib.suppress(Exception):
                    code, raw = a.get("/readyz")
                    if code == 200 and json.loads(raw)["checks"]["leader"]["leader"]:
                        out.append(a)
            return out

        leader = wait_for("one leader", lambda: (ls := leaders()) and len(ls) == 1 and ls, 20)[0]
        # The event follows the intent's status write and is best effort: wait for it, or a kill
        # between the two would lose it and the count below would say nothing about re-starts.
        wait_for(
            "the in-flight move's MoveStarted event",
            lambda: any(
                e.reason == "MoveStarted" and f"moving {flight['pod']} " in e.message for e in policy_events(api, "ha")
            ),
            30,
        )
        leader.kill()
        st = status_when(api, "ha", "both moves done by the new leader", lambda x: x.get("movesSucceeded") == 2, 180)
        made = placements_of(api, ns, "ha")
        # The one loss a kill may cause: the killed replica was answering the in-flight move's
        # replacement admission (the Service stand-in spreads webhook calls over both replicas, as a
        # Service does). The pod webhook's failurePolicy is Ignore, so pod creation is never
        # blocked: the replacement runs unpinned, the adopted move ends ReplacementNotPinned, and
        # the autopilot plans again from the cluster as it is. Anything else failing is a defect.
        failed = [p for p in made if (p.get("status") or {}).get("phase") == hp.FAILED]
        lost = [p for p in failed if p["status"].get("reason") == "ReplacementNotPinned"]
        if failed != lost or len(lost) > 1:
            print(json.dumps({"recentMoves": st.get("recentMoves"), "failedPods": st.get("failedPods")}, indent=1))
            for p in made:
                print(json.dumps(p.get("status"), indent=1))
            print(s.logs())  # shown in full under "Captured stdout call"
        assert failed == lost and len(lost) <= 1, [p["status"].get("reason") for p in failed]
        assert all(p["metadata"]["name"] == flight["placement"].split("/", 1)[1] for p in lost)
        assert st.get("movesFailed", 0) == len(lost)
        pods = [p["spec"]["evictPod"] for p in made]
        assert len(made) == 2 + len(lost) and len(set(pods)) == len(made), pods  # one eviction per pod
        assert any(p["metadata"]["name"] == flight["placement"].split("/", 1)[1] for p in made)
        started = [e.message for e in policy_events(api, "ha") if e.reason == "MoveStarted"]
        assert len(started) == len(made), started
        assert sum(f"moving {flight['pod']} " in m for m in started) == 1, started  # adopted, not re-started
    finally:
        allocator.stop()
        with contextlib.suppress(ApiException):
            delete_policy(api, "ha")
        s.stop()
        with contextlib.suppress(ApiException):
            core.delete_node(node.name)


def plan_for(testbed: Any, ns: str, pod: str) -> dict[str, Any]:
    """`kubectl hami-place plan --for POD -o json` against the test bed (the CLI in-process)."""
    from click.testing import CliRunner

    from kubectl_hami_place.cli import cli

    result = CliRunner().invoke(
        cli, ["plan", "--for", pod, "-n", ns, "--kubeconfig", str(testbed.kubeconfig), "-o", "json"]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    return dict(json.loads(result.stdout))


def test_a_pending_two_gpu_pod_gets_room_made_and_runs_on_the_named_gpus(pool: dict[str, Any], testbed: Any) -> None:
    """The issue's acceptance: free GPU capacity scattered (three 30% pods on three GPUs, one GPU
    whole), a pod asking 2 whole GPUs stays Pending; `plan --for` names the moves, a DryRun policy
    writes the same plan and evicts nothing, Apply makes the pod Running on the named GPUs."""
    api, ns, node = pool["api"], pool["ns"], pool["node"]
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    big = deployment("big", gpu=2)
    big["spec"]["template"]["spec"]["nodeSelector"] = {"pilot-pool": ns}
    apps.create_namespaced_deployment(ns, big)

    def unschedulable() -> Any:
        for p in core.list_namespaced_pod(ns, label_selector="app=big").items:
            cond = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
            if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
                return p
        return None

    pending = wait_for("the 2-GPU pod Unschedulable", unschedulable, 60)
    planned = plan_for(testbed, ns, pending.metadata.name)
    assert planned["fits"] and planned["node"] == node.name and len(planned["moves"]) == 1, planned
    gpus = [f"gpu-{i}" for i in planned["gpus"]]

    create_policy(api, policy("room", ns, triggers={"pendingPods": {"after": "1s"}}))
    st = status_when(api, "room", "a DryRun plan for the pod", lambda s: (s.get("plan") or {}).get("forPod"))
    assert st["plan"]["forPod"] == f"{ns}/{pending.metadata.name}" and st["state"] == "Planned"
    assert st["plan"]["node"] == node.name and st["plan"]["gpus"] == gpus
    assert [m["pod"] for m in st["plan"]["moves"]] == [m["pod"] for m in planned["moves"]]
    wait_for("the Planned event", lambda: [e for e in policy_events(api, "room") if e.reason == "Planned"], 30)
    time.sleep(2)
    assert placements_of(api, ns, "room") == []

    patch_policy(api, "room", {"mode": "Apply"})

    def running_on_target() -> Any:
        for p in allocated(core, ns, "app=big"):
            value = p.metadata.annotations["hami.io/vgpu-devices-allocated"]
            got = sorted({e.split(",")[0] for e in value.replace(";", ":").split(":") if e.startswith("GPU-")})
            return p if got == sorted(node.gpu_uuid(i) for i in planned["gpus"]) else None
        return None

    wait_for("the 2-GPU pod Running on the named GPUs", running_on_target, 180)
    made = placements_of(api, ns, "room")
    moved = [p["spec"]["evictPod"] for p in made if not p["spec"]["evictPod"].startswith("big-")]
    assert len(moved) == len(planned["moves"]), made  # within that many moves (plus the pending pod's own pin)
    st = status_when(api, "room", "idle again", lambda s: s.get("state") == "Idle", 60)
    assert st.get("movesFailed", 0) == 0, json.dumps(st, indent=1)


def test_a_policy_author_must_be_allowed_to_evict_where_it_moves(pilot: AgentSet, api: Any, testbed: Any) -> None:
    """Nobody can evict through the autopilot a pod they could not evict themselves: creating a
    policy is refused unless its author may create pods/eviction in every namespace it selects."""
    from testbed.agents.tokens import bind_role, sa_token

    ns = pilot.namespace("policy-author")
    other = pilot.namespace("policy-victim")
    evict_only = pilot.namespace("policy-evict-only")
    rbac = client.RbacAuthorizationV1Api(api)
    role = {
        "metadata": {"name": f"policy-author-{ns}"},
        "rules": [{"apiGroups": [dp.GROUP], "resources": [dp.PLURAL], "verbs": ["create", "get", "delete"]}],
    }
    rbac.create_cluster_role(role)
    subject = [{"kind": "ServiceAccount", "name": "author", "namespace": ns}]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role["metadata"]["name"]},
            "roleRef": {**ref, "name": role["metadata"]["name"]},
            "subjects": subject,
        }
    )
    # Eviction rights in its own namespace only (the built-in edit role includes pods/eviction).
    rbac.create_namespaced_role_binding(
        ns, {"metadata": {"name": "author-edit"}, "roleRef": {**ref, "name": "edit"}, "subjects": subject}
    )
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = api.configuration.host, api.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {sa_token(api, ns, 'author')}"}
    author = client.ApiClient(cfg)
    try:
        with pytest.raises(ApiException) as e:
            create_policy(author, policy("not-mine", other))
        assert e.value.status == 403, e.value.body
        assert f"may not create pods/eviction in namespace {other}" in json.loads(e.value.body)["message"]
        with pytest.raises(ApiException) as e:
            create_policy(
                author,
                policy("everywhere", other) | {"spec": {**policy("x", other)["spec"], "selector": {"maxPriority": 0}}},
            )
        assert "every namespace (the policy names none)" in json.loads(e.value.body)["message"]
        create_policy(author, policy("mine", ns))  # its own namespace: allowed
        create_policy(author, policy("mine-surge", ns, moveStrategy="Surge"))  # edit may patch */scale
        # Where it may evict but not scale: an evicting policy is allowed, a surging one is not.
        bind_role(
            api,
            evict_only,
            "evict",
            subject,
            [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}],
        )
        wait_for("the evict-only role in effect", lambda: _creates(author, policy("evicts", evict_only)), 20)
        with pytest.raises(ApiException) as e:
            create_policy(author, policy("surges", evict_only, moveStrategy="Auto"))
        assert e.value.status == 403, e.value.body
        assert json.loads(e.value.body)["message"].endswith(
            f"policy surges: system:serviceaccount:{ns}:author may not patch deployments/scale in namespace "
            f"{evict_only}, so may not have the autopilot surge workloads there (moveStrategy Auto)"
        ), e.value.body
    finally:
        for name in ("mine", "mine-surge", "evicts"):
            with contextlib.suppress(ApiException):
                delete_policy(api, name)
        rbac.delete_cluster_role_binding(role["metadata"]["name"])
        rbac.delete_cluster_role(role["metadata"]["name"])


def _creates(api: Any, body: dict[str, Any]) -> bool:
    try:
        create_policy(api, body)
        return True
    except ApiException as e:
        if e.status == 403:
            return False
        raise


def test_defrag_for_a_pending_pod_makes_room_and_places_it(pool: dict[str, Any], testbed: Any) -> None:
    """`kubectl hami-place defrag --for POD --apply`: the moves of `plan --for`, then the pending pod
    recreated by its controller, pinned on the room made."""
    from click.testing import CliRunner

    from kubectl_hami_place.cli import cli

    api, ns, node = pool["api"], pool["ns"], pool["node"]
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    big = deployment("big", gpu=2)
    big["spec"]["template"]["spec"]["nodeSelector"] = {"pilot-pool": ns}
    apps.create_namespaced_deployment(ns, big)

    def unschedulable() -> Any:
        for p in core.list_namespaced_pod(ns, label_selector="app=big").items:
            cond = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
            if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
                return p
        return None

    pending = wait_for("the 2-GPU pod Unschedulable", unschedulable, 60)
    planned = plan_for(testbed, ns, pending.metadata.name)
    args = ["defrag", "--for", pending.metadata.name, "-n", ns, "--kubeconfig", str(testbed.kubeconfig)]
    dry = CliRunner().invoke(cli, args)
    assert dry.exit_code == 0 and "dry run: nothing changed" in dry.stdout, dry.output
    applied = CliRunner().invoke(cli, [*args, "--apply", "--timeout", "120s"])
    assert applied.exit_code == 0, (applied.output, applied.exception)
    assert f"room made after {counted(len(planned['moves']), 'move')}" in applied.stdout, applied.stdout
    # Either the scheduler placed it on its next try, or defrag recreated it pinned there.
    assert f"on node {node.name}" in applied.stdout or "recreated by its controller on " + node.name in applied.stdout

    def running_on_target() -> Any:
        for p in allocated(core, ns, "app=big"):
            value = p.metadata.annotations["hami.io/vgpu-devices-allocated"]
            got = sorted({e.split(",")[0] for e in value.replace(";", ":").split(":") if e.startswith("GPU-")})
            return p if got == sorted(node.gpu_uuid(i) for i in planned["gpus"]) else None
        return None

    wait_for("the 2-GPU pod Running on the named GPUs", running_on_target, 120)


def _status_writer(api: Any, ns: str, name: str) -> Any:
    """A client for ServiceAccount ns/name that may read policies and write their status, and
    nothing else (in particular, no pods/eviction anywhere)."""
    from testbed.agents.tokens import sa_token

    rbac = client.RbacAuthorizationV1Api(api)
    rules = [
        {"apiGroups": [dp.GROUP], "resources": [dp.PLURAL], "verbs": ["get", "list"]},
        {"apiGroups": [dp.GROUP], "resources": [f"{dp.PLURAL}/status"], "verbs": ["get", "update", "patch"]},
    ]
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    subjects = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "roleRef": ref, "subjects": subjects})
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = api.configuration.host, api.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {sa_token(api, ns, name)}"}
    return client.ApiClient(cfg)


@pytest.mark.parametrize("mode", ["DryRun", "Apply"])
def test_a_forged_in_flight_evicts_nothing(pilot: AgentSet, pool: dict[str, Any], mode: str) -> None:
    """Issue 39, defect 1: a user who may write hamidefragpolicies/status but may not evict in the
    victim's namespace writes a status.inFlight naming a pod there, with the placement name and
    reqID the autopilot itself would derive. On a DryRun policy that selects another namespace,
    and on an Apply policy that selects the victim's (idle: its trigger does not fire), the
    autopilot creates no placement, evicts nothing, and says why (Event IntentRefused)."""
    from agent.move_placements import move_placement_name

    api, victim = pool["api"], pool["ns"]
    core = client.CoreV1Api(api)
    writer_ns = pilot.namespace(f"forger-{mode.lower()}")
    mallory = _status_writer(api, writer_ns, f"forger-{writer_ns}")
    name = f"decoy-{mode.lower()}"
    scope = writer_ns if mode == "DryRun" else victim
    create_policy(api, policy(name, scope, mode=mode, triggers={"freeGPUs": {"below": 1}}))
    status_when(api, name, "the policy evaluated", lambda st: st.get("state") in ("Idle", "Planned", "Blocked"), 30)
    target = allocated(core, victim, "app=slice-0")[0]
    uid, started = target.metadata.uid, dp.format_time(dt.datetime.now(dt.UTC))
    placement_name, req_id = move_placement_name(name, uid, started)
    forged = {
        "placement": f"{victim}/{placement_name}",
        "pod": f"{victim}/{target.metadata.name}",
        "podUID": uid,
        "startedAt": started,
        "node": pool["node"].name,
        "gpus": ["gpu-3"],
        "reqID": req_id,
        "signature": "0" * 64,
    }
    try:
        wait_for("the forged status written", lambda: _write_in_flight(mallory, name, forged), 20)
        st = status_when(api, name, "the forged intent refused", lambda s: not s.get("inFlight"), 30)
        refused = [e.message for e in policy_events(api, name) if e.reason == "IntentRefused"]
        assert refused and "without the agent's signature" in refused[0], refused
        assert st.get("movesFailed") == 1 and not st.get("failedPods"), st  # recorded; the pod not sheltered
        assert placements_of(api, victim, name) == []
        items = custom(api).list_namespaced_custom_object(hp.GROUP, hp.VERSION, victim, hp.PLURAL)["items"]
        assert placement_name not in [p["metadata"]["name"] for p in items]
        assert core.read_namespaced_pod(target.metadata.name, victim).metadata.uid == uid  # not evicted
    finally:
        rbac = client.RbacAuthorizationV1Api(api)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(f"forger-{writer_ns}")
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(f"forger-{writer_ns}")


def _write_in_flight(api: Any, name: str, flight: dict[str, Any]) -> bool:
    """Replace the policy's status with one that has `flight` in flight; False on a conflict with
    the autopilot's own write (try again)."""
    obj = get_policy(api, name)
    obj["status"] = {**(obj.get("status") or {}), "inFlight": flight}
    try:
        custom(api).replace_cluster_custom_object_status(dp.GROUP, dp.VERSION, dp.PLURAL, name, obj)
    except ApiException as e:
        if e.status == 409:
            return False
        raise
    return True
