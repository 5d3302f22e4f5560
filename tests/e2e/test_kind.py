"""Opt-in end-to-end tier on a kind cluster: build the agent image, helm-install the chart, and run
the pin and move flows through the plugin's code path.

Needs Docker and internet (kind node image, pip), which the development machine lacks, so it runs
only with ``pytest --e2e`` (see docs/testing.md) and in .github/workflows/e2e.yaml. It is not
counted as coverage of anything the local test bed does not also cover.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
IMAGE = "hami-place-agent:e2e"


@pytest.fixture(scope="module")
def kind_cluster():  # type: ignore[no-untyped-def]
    pytest_kind = pytest.importorskip("pytest_kind", reason="pip install pytest-kind (the e2e tier only)")
    subprocess.run(["docker", "build", "-t", IMAGE, str(REPO)], check=True)
    cluster = pytest_kind.KindCluster("hami-place-e2e")
    cluster.create()
    cluster.load_docker_image(IMAGE)
    yield cluster
    cluster.delete()


def _kubectl(cluster, *args: str) -> str:  # type: ignore[no-untyped-def]
    return str(cluster.kubectl(*args))


def test_chart_installs_and_pins_a_pod(kind_cluster) -> None:  # type: ignore[no-untyped-def]
    env = {"KUBECONFIG": str(kind_cluster.kubeconfig_path)}
    subprocess.run(
        [
            "helm",
            "install",
            "gpu-descheduler",
            str(REPO / "chart"),
            "-n",
            "kube-system",
            "--set",
            f"image.repository={IMAGE.split(':')[0]}",
            "--set",
            "image.tag=e2e",
            "--set",
            "image.pullPolicy=Never",
            "--wait",
            "--timeout",
            "180s",
        ],
        check=True,
        env=env,
    )
    pods = _kubectl(
        kind_cluster,
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "app=gpu-descheduler-webhook",
        "-o",
        "jsonpath={.items[*].status.phase}",
    )
    assert pods.split() == ["Running", "Running"]
    # A fake HAMi node: kind's own node, annotated as HAMi v2.10 registers GPUs.
    node = _kubectl(kind_cluster, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").strip()
    register = (
        '[{"id":"GPU-e2e-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA-Tesla T4","health":true}]'
    )
    _kubectl(kind_cluster, "annotate", "node", node, f"hami.io/node-nvidia-register={register}", "--overwrite")
    manifest = f"""
apiVersion: scheduling.hami.placement.com/v1
kind: HamiPodPlacement
metadata: {{name: pin-e2e, namespace: default}}
spec: {{reqID: pin-e2e-0001, podSelector: {{matchLabels: {{app: e2e}}}}, nodeName: {node}, gpuDevices: [gpu-0]}}
"""
    subprocess.run(["kubectl", "apply", "-f", "-"], input=manifest, text=True, check=True, env=env)
    time.sleep(2)
    _kubectl(
        kind_cluster,
        "run",
        "e2e",
        "--image=registry.k8s.io/pause:3.10",
        "--labels=app=e2e",
        "--overrides",
        '{"spec":{"schedulerName":"hami-scheduler"}}',
    )
    uuid = _kubectl(
        kind_cluster, "get", "pod", "e2e", "-o", "jsonpath={.metadata.annotations.nvidia\\.com/use-gpuuuid}"
    )
    assert uuid.strip() == "GPU-e2e-0"
