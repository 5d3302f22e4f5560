"""Untrusted cluster data on the test bed: nodes and pods carrying seeded hostile HAMi annotations
(testbed/data/fuzz.py) go through the real API server, the agent's watch cache and both webhooks; then
the REST API, `inspect`, `plan` and the validating webhook are asked about them.

Acceptance (issue 26): 0 answers of 500, 0 CLI exits of 3, 0 tracebacks in the agent's log; each
bad object is reported on itself, and the rest of the cluster is read as usual. ``FUZZ_SEED=<n>``
replays a seed.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from kubectl_hami_place.cli import cli
from testbed.agents.agent_set import AgentSet
from testbed.agents.tokens import admin_token
from testbed.controlplane.waiting import wait_for
from testbed.data.fuzz import Fuzzer
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.placements import placement

pytestmark = [pytest.mark.testbed]

SEED = int(os.environ.get("FUZZ_SEED", "26"))
NODES = 12
PODS = 2  # per node
TAINT = {"key": "hami-place-fuzz", "value": "true", "effect": "NoSchedule"}  # nothing else lands there


def fuzz_node(name: str, label: str, register: str) -> dict[str, Any]:
    body = NodeSpec(name, gpus=1, labels={"hami-place-fuzz": label}).manifest()
    body["metadata"]["annotations"][ann.NODE_REGISTER] = register
    body.setdefault("spec", {})["taints"] = [TAINT]
    return body


def fuzz_pod(name: str, node: str, allocation: str, selector_value: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"app": "fuzz"},
            "annotations": {
                ann.POD_VGPU_NODE: node,
                ann.POD_DEVICES_ALLOCATED: allocation,
                ann.USE_GPU_UUID: selector_value,  # read by the pod webhook and the model
            },
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{**TAINT, "operator": "Equal"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def _create(call: Any, *args: Any) -> bool:
    """Create; False when the API server itself refuses the object (e.g. annotations over 256 KiB)."""
    try:
        call(*args)
        return True
    except ApiException as e:
        if e.status in (400, 422):
            return False
        raise


@pytest.fixture
def hostile(agents: AgentSet, api: Any, ans: str) -> Any:
    core = client.CoreV1Api(api)
    f = Fuzzer(SEED)
    label = ans[:63]
    names: list[str] = []
    log = agents.agent.proc.log_path if agents.agent.proc else None
    start = log.stat().st_size if log is not None else 0
    try:
        for i in range(NODES):
            case = f.case(PODS)
            name = f"{ans[:50]}-fz{i}"
            if _create(core.create_node, fuzz_node(name, label, case.register)):
                names.append(name)
                for j, allocation in enumerate(case.allocations):
                    value = f.rng.choice((",", " ", case.uuids[0] if case.uuids else "", "GPU-ü,,GPU-x"))
                    _create(core.create_namespaced_pod, ans, fuzz_pod(f"p{i}-{j}", name, allocation, value))
        yield {"label": label, "nodes": names, "log": log, "start": start}
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                core.delete_node(name)


def cli_run(testbed: Any, *args: str) -> Any:
    return CliRunner().invoke(cli, [*args, "--kubeconfig", str(testbed.kubeconfig)])


def test_hostile_annotations_get_no_500_no_exit_3_no_traceback(
    agents: AgentSet, api: Any, ans: str, testbed: Any, hostile: dict[str, Any]
) -> None:
    nodes = hostile["nodes"]
    assert len(nodes) >= NODES // 2, nodes  # most cases are within the API server's own limits
    token = admin_token(api)

    def info() -> dict[str, Any] | None:
        code, body = agents.agent.get("/api/v1/cluster-info", token)
        assert code == 200, (code, body[:500])
        doc = json.loads(body)
        seen = {n["name"] for n in doc["nodes"]}
        return doc if set(nodes) <= seen else None

    doc = wait_for("the agent's cache holds every hostile node", info, 30)
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert any(by_name[n].get("error") for n in nodes), "the seed should carry at least one invalid register"
    assert any(line.startswith(f"pod {ans}/p") for line in doc["problems"]), doc["problems"][:5]  # on the pod
    code, body = agents.agent.get(f"/api/v1/placements?namespace={ans}", token)
    assert code == 200, body[:300]

    for args in (
        ("inspect", "-l", f"hami-place-fuzz={hostile['label']}"),
        ("plan", "-l", f"hami-place-fuzz={hostile['label']}"),
    ):
        for output in ((), ("-o", "json")):
            result = cli_run(testbed, *args, *output)
            assert result.exit_code == 0, (args, output, result.output, result.exception)
            warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
            assert len(warnings) == 1, (args, result.stderr)

    custom = client.CustomObjectsApi(api)
    for i, name in enumerate(nodes):
        body = placement(f"fz{i}", f"fuzz-{i:05d}", {"app": "fuzz"}, name, ["gpu-0"])
        try:
            custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ans, hp.PLURAL, body, dry_run="All")
        except ApiException as e:
            assert e.status in (403, 422), (name, e.status, e.body[:500])
            assert json.loads(e.body)["message"], e.body[:300]
        else:
            assert not by_name[name].get("error"), (name, by_name[name])  # admitted: a consistent inventory

    if hostile["log"] is not None:
        with open(hostile["log"], "rb") as fh:
            fh.seek(hostile["start"])
            new = fh.read().decode(errors="replace")
        assert "Traceback" not in new, new[-3000:]
        assert '"code":500' not in new and " 500 " not in new, new[-3000:]


def test_the_issue_cases_one_by_one(agents: AgentSet, api: Any, ans: str, testbed: Any) -> None:
    """Issue 26's reports, each as it was made: a 400-digit allocation (it made cluster-info answer
    500 and inspect exit 3), a register with devmem 10^400, a register with two GPUs at index 0 (a
    placement for gpu-0 was accepted) and an index in Arabic-Indic digits (accepted as 10)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    label = f"{ans[:50]}-cases"
    gpu = {"count": 10, "devmem": 81920, "devcore": 100, "type": "NVIDIA-A100", "health": True}
    registers = {
        "huge-alloc": json.dumps([{"id": "GPU-case-a", "index": 0, **gpu}]),
        "huge-devmem": json.dumps([{"id": "GPU-case-b", "index": 0, **gpu, "devmem": 10**400}]),
        "dup-index": json.dumps([{"id": f"GPU-case-c{i}", "index": 0, **gpu} for i in range(2)]),
        "arabic-index": "GPU-case-d,10,81920,100,NVIDIA-A100,0,true,١٠,hami-core:",
    }
    names = {case: f"{ans[:40]}-{case}" for case in registers}
    try:
        for case, register in registers.items():
            core.create_node(fuzz_node(names[case], label, register))
        core.create_namespaced_pod(
            ans, fuzz_pod("huge", names["huge-alloc"], "GPU-case-a,NVIDIA," + "9" * 400 + ",100:;", "")
        )
        token = admin_token(api)

        def info() -> dict[str, Any] | None:
            code, body = agents.agent.get("/api/v1/cluster-info", token)
            assert code == 200, (code, body[:300])
            doc = json.loads(body)
            have = {n["name"] for n in doc["nodes"]}
            return doc if set(names.values()) <= have and any("/huge:" in p for p in doc["problems"]) else None

        doc = wait_for("cluster-info with every case", info, 30)
        by_name = {n["name"]: n for n in doc["nodes"]}
        assert "value out of range" in next(p for p in doc["problems"] if f"pod {ans}/huge:" in p)
        assert "does not fit HAMi's int32" in by_name[names["huge-devmem"]]["error"]
        assert "duplicate GPU index [0]" in by_name[names["dup-index"]]["error"]
        assert "parsing '١٠': invalid syntax" in by_name[names["arabic-index"]]["error"]
        result = cli_run(testbed, "inspect", "-l", f"hami-place-fuzz={label}")
        assert result.exit_code == 0 and result.stderr.startswith("warning: 3 nodes and 1 pod"), result.stderr
        for case, expected in (
            ("dup-index", "inventory is inconsistent, so gpu-N is not resolved: duplicate GPU index [0]"),
            ("arabic-index", "has no readable HAMi GPU inventory"),
            ("huge-devmem", "has no readable HAMi GPU inventory"),
        ):
            body = placement(f"c-{case}", f"case-{case}"[:20], {"app": "x"}, names[case], ["gpu-0"])
            with pytest.raises(ApiException) as e:
                custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ans, hp.PLURAL, body, dry_run="All")
            assert e.value.status == 422 and expected in json.loads(e.value.body)["message"], e.value.body
    finally:
        for name in names.values():
            with contextlib.suppress(ApiException):
                core.delete_node(name)
