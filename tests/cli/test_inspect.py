"""`kubectl hami-place inspect` against the test bed: fake HAMi nodes, pods annotated as HAMi does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client

from hami_place_core import annotations as ann
from kubectl_hami_place.cli import cli, main
from testbed.controlplane.waiting import wait_for
from testbed.data.gpu_nodes import T4, NodeSpec
from testbed.hami.hami_pods import hami_pod

pytestmark = pytest.mark.testbed


@pytest.fixture
def scenario(testbed, api, ns):
    """Two dedicated nodes (labelled with the test namespace) and three HAMi-placed pods."""
    label = {"hami-place-test": ns}
    a = NodeSpec(f"{ns[:40]}-a", gpus=4, labels=label)
    b = NodeSpec(f"{ns[:40]}-b", gpus=2, model=T4, labels=label, unhealthy_indices=frozenset({1}))
    testbed.add_nodes([a, b])
    core = client.CoreV1Api(api)
    pods = [
        hami_pod("infer-1", ns, a.name, [(a.gpu_uuid(0), 20480, 25)], phase=None),
        hami_pod("infer-2", ns, a.name, [(a.gpu_uuid(0), 20480, 25)], phase=None),
        hami_pod("train", ns, a.name, [(a.gpu_uuid(2), 81920, 100), (a.gpu_uuid(3), 81920, 100)], phase=None),
        hami_pod("small", ns, b.name, [(b.gpu_uuid(0), 3072, 10)], phase=None),
    ]
    for p in pods:
        core.create_namespaced_pod(ns, p)
    wait_for(
        "pods Running",
        lambda: all(core.read_namespaced_pod(p["metadata"]["name"], ns).status.phase == "Running" for p in pods),
        30,
    )
    yield {"a": a, "b": b, "selector": f"hami-place-test={ns}", "kubeconfig": str(testbed.kubeconfig)}
    for n in (a.name, b.name):
        core.delete_node(n)


def run(*args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(cli, list(args), standalone_mode=False, catch_exceptions=True)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code or 0, result.stdout, result.stderr


def test_table_shows_every_gpu_with_memory_cores_slots_and_pods(scenario, ns) -> None:
    code, out, _ = run("inspect", "--kubeconfig", scenario["kubeconfig"], "-l", scenario["selector"])
    assert code == 0
    a, b = scenario["a"], scenario["b"]
    lines = out.splitlines()
    rows = {line.split()[0]: line for line in lines if re.match(r"^\d+\s", line)}
    assert f"NODE {a.name}  Ready  4 GPU  NVIDIA A100-SXM4-80GB" in out
    assert "free 1.50 GPU  whole-free 1  in-use 3  stranded 0.50" in out
    gpu0 = next(line for line in lines if line.startswith("0 ") and "40.0/80.0" in line)
    assert re.search(
        r"40\.0/80\.0\s+50%\s+50/100\s+2/10\s+0\.50\s+ok\s+" + re.escape(f"{ns}/infer-1, {ns}/infer-2"), gpu0
    )
    assert rows  # numbered GPU rows were printed
    # node b: T4 with GPU 1 unhealthy
    assert f"NODE {b.name}  Ready  2 GPU  NVIDIA-Tesla T4" in out
    assert re.search(r"^1\s+NVIDIA-Tesla T4\s+0\.0/15\.0\s+0%\s+0/100\s+0/10\s+0\.00\s+unhealthy", out, re.M)
    assert "whole GPUs free                             1" in out
    assert "GPUs                                        6 (5 healthy)" in out


def test_wide_adds_uuids(scenario) -> None:
    code, out, _ = run("inspect", scenario["a"].name, "--kubeconfig", scenario["kubeconfig"], "-o", "wide")
    assert code == 0
    assert "UUID" in out and scenario["a"].gpu_uuid(3) in out
    assert scenario["b"].name not in out  # only the named node


def test_json_snapshot_round_trips_through_snapshot_flag(scenario, tmp_path) -> None:
    code, out, _ = run("inspect", "--kubeconfig", scenario["kubeconfig"], "-l", scenario["selector"], "-o", "json")
    assert code == 0
    snap = json.loads(out)
    assert snap["apiVersion"] == "hami-place.io/v1alpha1" and snap["kind"] == "ClusterSnapshot"
    assert {n["metadata"]["name"] for n in snap["nodes"]} == {scenario["a"].name, scenario["b"].name}
    node_a = next(n for n in snap["summary"]["nodes"] if n["name"] == scenario["a"].name)
    assert node_a["gpus"][2]["slots"] == {"used": 1, "total": 10}
    assert node_a["metrics"]["wholeFree"] == 1
    path = tmp_path / "snap.json"
    path.write_text(out)
    live = run("inspect", "--kubeconfig", scenario["kubeconfig"], "-l", scenario["selector"])[1]
    offline = run("inspect", "--snapshot", str(path))[1]
    assert offline == live
    code, out, _ = run("inspect", "--snapshot", str(path), "-o", "yaml")
    assert yaml.safe_load(out)["summary"]["cluster"] == snap["summary"]["cluster"]


def test_heatmap(scenario) -> None:
    code, out, _ = run("inspect", "--kubeconfig", scenario["kubeconfig"], "-l", scenario["selector"], "--heatmap")
    assert code == 0
    lines = out.splitlines()
    # the line's label names both nodes (on a line of its own when the names are long)
    assert lines[0].startswith(f"{scenario['a'].name}..{scenario['b'].name}"), lines[0]
    cells = next(line for line in lines if "✗" in line)
    # a: GPU0 half used, GPU1 free, GPU2-3 full; b: GPU0 lightly used, GPU1 unhealthy
    assert cells.endswith("▒·██ ░✗")
    assert "2 nodes, 6 GPUs: 1 whole free" in out


def test_garbage_annotation_is_reported_and_other_nodes_still_work(testbed, api, scenario, ns) -> None:
    broken = NodeSpec(f"{ns[:40]}-broken", labels={"hami-place-test": ns})
    manifest = broken.manifest()
    manifest["metadata"]["annotations"][ann.NODE_REGISTER] = '[{"id": "GPU-1", "index": "zero"}]'
    client.CoreV1Api(api).create_node(manifest)
    try:
        code, out, err = run("inspect", "--kubeconfig", scenario["kubeconfig"], "-l", scenario["selector"])
        assert code == 0
        assert err.startswith("warning: 1 node with HAMi data that cannot be used") and err.count("\n") == 1, err
        assert (
            f"node {broken.name}: 1 unreadable entry, so none of the node's GPUs count: entry 0 (GPU-1): index" in out
        )
        assert f"NODE {scenario['a'].name}" in out and "2 with GPUs, 1 unreadable" in out
    finally:
        client.CoreV1Api(api).delete_node(broken.name)


def test_errors_exit_1_with_one_line_on_stderr(scenario, tmp_path, capsys) -> None:
    code = main(["inspect", "no-such-node", "--kubeconfig", scenario["kubeconfig"]])
    err = capsys.readouterr().err
    assert code == 1 and err == "error: node no-such-node not found\n"

    code = main(["inspect", "--kubeconfig", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: cannot load kubeconfig from") and err.count("\n") == 1

    cfg = yaml.safe_load(Path(scenario["kubeconfig"]).read_text())
    cfg["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(cfg))
    code = main(["inspect", "--kubeconfig", str(dead), "--request-timeout", "2"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: cannot reach the Kubernetes API server at https://127.0.0.1:1")

    code = main(["inspect", "-o", "xml"])
    assert code == 2 and "Invalid value for '-o' / '--output'" in capsys.readouterr().err

    (tmp_path / "bad.json").write_text("{}")
    code = main(["inspect", "--snapshot", str(tmp_path / "bad.json")])
    assert code == 1 and "is not a hami-place snapshot" in capsys.readouterr().err


def test_forbidden_user_gets_exit_1(scenario, tmp_kubeconfig, capsys) -> None:
    nobody = tmp_kubeconfig("nobody")
    code = main(["inspect", "--kubeconfig", str(nobody)])
    err = capsys.readouterr().err
    assert code == 1
    forbidden = 'nodes is forbidden: User "nobody" cannot list resource "nodes" in API group "" at the cluster scope'
    assert err == f"error: {forbidden}\n"
