"""Issue acceptance for the planner, on the test bed: a cluster of 8 fake nodes x 4 GPUs fragmented
by the scheduler, `plan` proposes moves, `defrag --apply` executes them through real evictions and
placements, and `inspect` shows exactly the planned number of whole GPUs freed.

Who places the pods: HAMi, in both modes of the test bed (docs/testing.md). The scattered layout is
asked for through HAMi's own per-pod means, ``hami.io/node-scheduler-policy: spread`` and
``hami.io/gpu-scheduler-policy: spread`` (HAMi v2.10.0 ``resolveNodeSchedulerPolicy``,
pkg/scheduler/score.go; ``GetGPUSchedulerPolicyByPod``, pkg/util/util.go), never by writing HAMi's
allocation. With real HAMi its Filter chooses node and GPUs; in CI kube-scheduler chooses the node
(a preferred affinity states the same spread) and the labelled stand-in picks the GPUs with the
pod's GPU policy. Either way the choice among equal nodes is not fixed, so the exact "before" count
is computed here from the pods' raw allocation annotations, and the exact "after" count is the one
the dry-run plan predicted.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testbed.controlplane.waiting import running_pods, wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator
from tests.cli.live import Live

pytestmark = [pytest.mark.testbed, pytest.mark.hami]

# HAMi's own per-pod policies (HAMi pkg/util/types.go NodeSchedulerPolicyAnnotationKey and
# GPUSchedulerPolicyAnnotationKey): each pod goes to the least used node and, on it, the least used
# GPU, which is the scattered layout a long-running cluster drifts into.
SPREAD = {"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "spread"}

PODS = 12  # 30% slices: up to 3 fit on one GPU


@pytest.fixture(scope="module")
def fragmented(live: Live) -> Iterator[dict[str, Any]]:
    api, ns = live.api, live.agents.namespace("defrag")
    label = {"defrag-pool": ns}
    nodes = [NodeSpec(f"{ns[:48]}-n{i}", gpus=4, labels={**label, "defrag-slot": str(i)}) for i in range(8)]
    live.testbed.add_nodes(nodes)
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    try:
        for i in range(PODS):
            body = deployment(
                f"slice-{i:02d}",
                replicas=1,
                extra_limits={"nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"},
                pod_annotations=SPREAD,
            )
            body["spec"]["template"]["spec"]["nodeSelector"] = label
            # In CI kube-scheduler picks the node, at random among these equal nodes (some runs
            # came out already packed), and it does not read HAMi's node policy. A *preferred*
            # affinity states the same spread for it (nodes 0-3 get two pods, 4-7 one) and, being
            # only a preference, does not bind the planner. Real HAMi's Filter returns one node,
            # by the pod's own node policy, so there the preference changes nothing.
            body["spec"]["template"]["spec"]["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [{"key": "defrag-slot", "operator": "In", "values": [str(i % 8)]}]
                            },
                        }
                    ]
                }
            }
            apps.create_namespaced_deployment(ns, body)

        def allocated() -> list[Any]:
            pods = [p for p in running_pods(core, ns, "app") if p.spec.node_name]
            done = [p for p in pods if "hami.io/vgpu-devices-allocated" in (p.metadata.annotations or {})]
            return done if len(done) == PODS else []

        wait_for(f"{PODS} pods Running with HAMi allocations", allocated, 120)
        yield {"ns": ns, "selector": f"defrag-pool={ns}", "nodes": nodes}
    finally:
        allocator.stop()
        for spec in nodes:
            with contextlib.suppress(Exception):
                core.delete_node(spec.name)


def whole_free(live: Live, selector: str) -> int:
    r = live.run("inspect", "-l", selector, "-o", "json")
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout)["summary"]["cluster"]["wholeFree"])


def gpus_in_use(live: Live, ns: str) -> int:
    """Distinct GPU UUIDs in the pods' hami.io/vgpu-devices-allocated, read raw (not via the model)."""
    used = set()
    for pod in client.CoreV1Api(live.api).list_namespaced_pod(ns).items:
        value = (pod.metadata.annotations or {}).get("hami.io/vgpu-devices-allocated", "")
        used |= {entry.split(",")[0] for entry in value.replace(";", ":").split(":") if entry.startswith("GPU-")}
    return len(used)


def test_defrag_stops_at_the_first_failure_with_a_summary(live: Live, fragmented: dict[str, Any]) -> None:
    """Runs first (file order): a PDB that allows no disruption fails move 1 past its deadline;
    the run stops there, says why on one stderr line, summarises on stdout, and moves nothing."""
    ns, sel = fragmented["ns"], fragmented["selector"]
    policy = client.PolicyV1Api(live.api)
    before = whole_free(live, sel)
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "freeze"},
            "spec": {"minAvailable": "100%", "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
        },
    )
    try:
        wait_for(
            "the PDB to observe the pods",
            lambda: (policy.read_namespaced_pod_disruption_budget("freeze", ns).status.expected_pods or 0) == PODS,
            30,
        )
        r = live.run("defrag", "-l", sel, "--apply", "--eviction-timeout", "3s", "--timeout", "90s", timeout=180)
        assert r.returncode == 1, (r.stdout, r.stderr)
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: defrag stopped at move 1: placement "), r.stderr
        assert "failed (BlockedByPDB)" in errors[0] and "freeze" in errors[0], r.stderr
        assert "waiting: PDB freeze allows 0 disruptions" in r.stdout
        assert r.stdout.rstrip().splitlines()[-1].startswith(f"done: 0 moves; whole GPUs free {before} -> {before},")
        assert len(running_pods(client.CoreV1Api(live.api), ns, "app")) == PODS
        assert whole_free(live, sel) == before
    finally:
        policy.delete_namespaced_pod_disruption_budget("freeze", ns)
        crd = client.CustomObjectsApi(live.api)
        for p in crd.list_namespaced_custom_object("scheduling.hami.placement.com", "v1", ns, "hamipodplacements")[
            "items"
        ]:
            crd.delete_namespaced_custom_object(
                "scheduling.hami.placement.com", "v1", ns, "hamipodplacements", p["metadata"]["name"]
            )


def test_plan_then_defrag_apply_frees_exactly_the_planned_gpus(live: Live, fragmented: dict[str, Any]) -> None:
    sel = fragmented["selector"]
    before = whole_free(live, sel)
    assert before == 8 * 4 - gpus_in_use(live, fragmented["ns"])
    # scattered over 8 nodes (so at least 8 GPUs in use): far fewer whole GPUs free than packed
    layout = sorted(
        (p.spec.node_name, p.metadata.name) for p in running_pods(client.CoreV1Api(live.api), fragmented["ns"], "app")
    )
    assert before <= 8 * 4 - 8, layout

    dry = live.run("defrag", "-l", sel, "--max-moves", "8")
    assert dry.returncode == 0, dry.stderr
    head = re.fullmatch(
        rf"plan \(free-gpus\): (\d+) moves; whole GPUs free {before} -> (\d+), FGD [\d.]+ -> [\d.]+",
        dry.stdout.splitlines()[0],
    )
    assert head, dry.stdout
    moves, predicted = int(head[1]), int(head[2])
    assert moves >= 1 and predicted > before, dry.stdout
    assert len([line for line in dry.stdout.splitlines() if re.match(r"  \d+\. ", line)]) == moves
    assert "dry run: nothing changed" in dry.stdout and whole_free(live, sel) == before
    # The demand's room before and after (issue 36), read from the live cluster as plan reads it.
    assert re.match(
        r"room for the demand \(the running mix\): completely free nodes \d+ -> \d+; ", dry.stdout.splitlines()[1]
    )
    asked = live.run("defrag", "-l", sel, "--max-moves", "8", "--demand", "4x2")
    assert asked.returncode == 0 and "room for the demand (--demand): " in asked.stdout, asked.stderr
    assert re.search(r"4-GPU pods (\d+) -> (\d+)", asked.stdout), asked.stdout

    applied = live.run("defrag", "-l", sel, "--max-moves", "8", "--apply", timeout=600)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    assert "following the placement object instead" not in applied.stderr
    out = applied.stdout
    # The plan is recomputed from the live cluster after every move; the planner is deterministic,
    # so the executed sequence is the one the dry run printed.
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("move ")] == [
        f"move {i}" for i in range(1, moves + 1)
    ], out
    assert out.count("Completed (Allocated)") == moves, out
    last = out.rstrip().splitlines()[-1]
    assert last.startswith(f"done: {moves} moves; whole GPUs free {before} -> {predicted},"), out

    after = whole_free(live, sel)
    assert after == predicted == 8 * 4 - gpus_in_use(live, fragmented["ns"])
    core = client.CoreV1Api(live.api)
    pods = running_pods(core, fragmented["ns"], "app")
    assert len(pods) == PODS  # every workload still runs: moved, not lost
    placements = client.CustomObjectsApi(live.api).list_namespaced_custom_object(
        "scheduling.hami.placement.com", "v1", fragmented["ns"], "hamipodplacements"
    )["items"]
    assert sorted(p["status"]["phase"] for p in placements) == ["Completed"] * moves
    assert all(p["spec"].get("evictPod") for p in placements)


def _preferring(slot_key: str, slot: str) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {"matchExpressions": [{"key": slot_key, "operator": "In", "values": [slot]}]},
                }
            ]
        }
    }


def test_plan_and_defrag_avoid_a_node_without_cpu(live: Live) -> None:
    """kube-scheduler's NodeResourcesFit, end to end: two one-GPU nodes hold a 20% and a 30% slice.
    The planner empties the lighter GPU into the other, until a CPU hog leaves the other node no
    CPU: then it moves the 30% slice the other way, and defrag executes exactly that move."""
    api, ns = live.api, live.agents.namespace("room")
    label = {"room-pool": ns}
    first, second = (f"{ns[:48]}-{k}" for k in ("n0", "n1"))
    nodes = [NodeSpec(n, gpus=1, labels={**label, "room-slot": n}) for n in (first, second)]
    live.testbed.add_nodes(nodes)
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    sel = f"room-pool={ns}"
    try:

        def placed() -> dict[str, str]:
            done = {
                p.metadata.labels["app"]: p.spec.node_name
                for p in running_pods(core, ns, "app")
                if "hami.io/vgpu-devices-allocated" in (p.metadata.annotations or {})
            }
            return done

        def create(name: str, pct: str, preferred: str) -> None:
            body = deployment(
                name,
                replicas=1,
                extra_limits={"nvidia.com/gpumem-percentage": pct, "nvidia.com/gpucores": pct},
                pod_annotations=SPREAD,  # real HAMi: the least used of the two nodes
            )
            spec = body["spec"]["template"]["spec"]
            spec["nodeSelector"] = label
            spec["affinity"] = _preferring("room-slot", preferred)  # the same for kube-scheduler in CI
            spec["containers"][0]["resources"]["requests"] = {"cpu": "500m"}
            apps.create_namespaced_deployment(ns, body)

        # One after the other: the large slice goes where the small one is not. Which node the
        # small one gets is HAMi's choice among two equal nodes (in CI, the preference's).
        create("small", "20", first)
        light = wait_for("the small slice Running with HAMi's allocation", lambda: placed().get("small"), 120)
        busy = second if light == first else first
        create("large", "30", busy)
        assert wait_for("both slices allocated", lambda: (p := placed()) and len(p) == 2 and p, 120) == {
            "small": light,
            "large": busy,
        }
        assert whole_free(live, sel) == 0

        def planned() -> list[tuple[str, str, str, list[str]]]:
            r = live.run("plan", "-l", sel, "-o", "json")
            assert r.returncode == 0, r.stderr
            return [
                (m["pod"].split("/")[1].split("-")[0], m["from"]["node"], m["to"]["node"], m["frees"])
                for m in json.loads(r.stdout)["moves"]
            ]

        assert planned() == [("small", light, busy, [f"{light}/gpu-0"])]
        # The node has 64 CPUs; the large slice requests 0.5 of them: the hog takes the rest.
        hog = {
            "metadata": {"name": "cpu-hog"},
            "spec": {
                "nodeName": busy,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "63500m"}}}
                ],
            },
        }
        core.create_namespaced_pod(ns, hog)
        assert planned() == [("large", busy, light, [f"{busy}/gpu-0"])]

        applied = live.run("defrag", "-l", sel, "--apply", "--timeout", "120s", timeout=300)
        assert applied.returncode == 0, (applied.stdout, applied.stderr)
        assert applied.stdout.rstrip().splitlines()[-1].startswith("done: 1 move; whole GPUs free 0 -> 1,")
        assert wait_for("the large slice moved", lambda: (p := placed()) and p.get("large") == light and p, 60) == {
            "small": light,
            "large": light,
        }
        assert whole_free(live, sel) == 1
    finally:
        allocator.stop()
        for spec in nodes:
            with contextlib.suppress(Exception):
                core.delete_node(spec.name)


def test_defrag_with_strategy_auto_moves_where_a_pdb_blocks_every_eviction(live: Live) -> None:
    """defrag --strategy auto: two 1-replica slices on two GPUs of one node, a PDB that allows no
    eviction; evicting would stop at move 1, auto surges the move and frees the GPU."""
    api, ns = live.api, live.agents.namespace("surgedefrag")
    label = {"surge-pool": ns}
    node = NodeSpec(f"{ns[:48]}-n0", gpus=2, labels=label)
    live.testbed.add_nodes([node])
    allocator = start_allocator(api, {ns}, choose_gpus=True)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    sel = f"surge-pool={ns}"
    try:
        for name in ("a", "b"):
            body = deployment(
                name,
                replicas=1,
                extra_limits={"nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"},
                pod_annotations=SPREAD,  # the least used GPU: one slice on each
            )
            body["spec"]["template"]["spec"]["nodeSelector"] = label
            apps.create_namespaced_deployment(ns, body)
            wait_for(
                f"{name} allocated",
                lambda name=name: [
                    p
                    for p in running_pods(core, ns, f"app={name}")
                    if "hami.io/vgpu-devices-allocated" in (p.metadata.annotations or {})
                ],
                120,
            )
        assert whole_free(live, sel) == 0
        pdb = {
            "metadata": {"name": "freeze"},
            "spec": {"minAvailable": "100%", "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
        }
        client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(ns, pdb)
        applied = live.run("defrag", "-l", sel, "--apply", "--strategy", "auto", "--timeout", "120s", timeout=300)
        assert applied.returncode == 0, (applied.stdout, applied.stderr)
        assert "ScalingUp" in applied.stdout and "ScalingDown" in applied.stdout, applied.stdout
        assert applied.stdout.rstrip().splitlines()[-1].startswith("done: 1 move; whole GPUs free 0 -> 1,")
        made = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "scheduling.hami.placement.com", "v1", ns, "hamipodplacements"
        )["items"]
        assert [(p["spec"]["strategy"], p["status"]["strategy"], p["status"]["phase"]) for p in made] == [
            ("Auto", "Surge", "Completed")
        ]
        assert [apps.read_namespaced_deployment(n, ns).spec.replicas for n in ("a", "b")] == [1, 1]
        wait_for("one whole GPU free", lambda: whole_free(live, sel) == 1, 60)
    finally:
        allocator.stop()
        with contextlib.suppress(Exception):
            core.delete_node(node.name)
