"""The agent image (`make image`, ./Dockerfile) read back, and run as the chart's agent on the test bed.

The image is built once per run with release/image.py (what `make image` runs). The test-bed test
installs the chart with the test bed's helm (`helm install`, as a user would, scoped to its own
namespaces), then runs one pod of the Deployment helm stored, in podman on the host network
(testbed/agents/podman.py): the chart's env, its TLS Secret and webhook-client-CA ConfigMap as mounts, a
token for the chart's ServiceAccount from the TokenRequest API, its securityContext (non-root,
read-only root filesystem, no capabilities). The API server reaches it through the chart's own
webhook configuration and Service (the ClusterIP on the host's loopback, as kube-proxy would route
it), verifying the chart's generated certificate and presenting its client certificate. The plugin
then pins a Deployment's next pod and moves it, and the events say the container did it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from testbed.agents.podman import PodmanPod, image_config, podman, service_ip
from testbed.controlplane.chart import run_helm
from testbed.controlplane.ci import unavailable
from testbed.controlplane.cluster import WEBHOOK_CLIENT_CN, TestBed
from testbed.controlplane.crd import install_crd
from testbed.controlplane.waiting import wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.placements import placement, placement_status
from testbed.data.workloads import deployment
from testbed.hami.allocation import start_allocator
from toolchain import debian_packages

REPO = Path(__file__).resolve().parents[2]
# Test-only and build-only distributions that must not be in the agent's image.
NOT_IN_IMAGE = {"cryptography", "pytest", "hypothesis", "kubernetes", "mypy", "ruff", "highspy", "numpy", "pip"}
RUNTIME = {"hami-place", "sanic", "aiohttp", "orjson", "prometheus_client", "PyYAML", "click", "tabulate", "urllib3"}


@pytest.fixture(scope="module")
def agent_image() -> str:
    try:
        debian_packages.ensure("image")
    except debian_packages.PackagesMissing as e:
        unavailable(f"cannot build the agent image: {e}")
    proc = subprocess.run(
        [sys.executable, "-m", "release.image", "build"], cwd=REPO, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def _in_image(image: str, code: str) -> str:
    """Run Python in the image as the chart runs it: its user, read-only root, no capabilities."""
    from toolchain.podman_flags import host_flags

    args = ["run", "--rm", *host_flags(), "--read-only", "--cap-drop=ALL", "--network=none"]
    return podman(*args, "--entrypoint", "/opt/venv/bin/python", image, "-c", code).stdout


def test_the_image_runs_the_agent_as_a_numeric_non_root_user(agent_image: str) -> None:
    config = image_config(agent_image)
    assert config["User"] == "65532:65532"  # numeric, so runAsNonRoot can be verified
    assert config["Entrypoint"] == ["/opt/venv/bin/python", "-m", "agent"]
    assert {"8083/tcp", "8085/tcp"} <= set(config.get("ExposedPorts") or {})
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    who = json.loads(_in_image(agent_image, "import os, json; print(json.dumps([os.getuid(), os.getgid()]))"))
    assert who == [65532, 65532]


def test_the_image_holds_the_agents_runtime_dependencies_only(agent_image: str) -> None:
    listing = _in_image(
        agent_image,
        "import json, importlib.metadata as m, os, agent.app;"
        "print(json.dumps({'dists': sorted(d.metadata['Name'] for d in m.distributions()),"
        " 'src': os.path.exists('/src'), 'venv': agent.app.__file__}))",
    )
    got = json.loads(listing)
    names = set(got["dists"])
    assert names >= RUNTIME, RUNTIME - names
    assert not names & NOT_IN_IMAGE, names & NOT_IN_IMAGE
    assert got["src"] is False  # the builder stage's sources stay there
    assert got["venv"].startswith("/opt/venv/lib/python3.11/site-packages/agent/")


def test_the_image_refuses_to_start_outside_a_pod_in_one_line(agent_image: str) -> None:
    from toolchain.podman_flags import host_flags

    proc = podman("run", "--rm", *host_flags(), "--read-only", "--network=none", agent_image, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "hami-place agent: no usable Kubernetes credentials: not in a pod" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- the image as the chart's agent on the test bed ---------------------------------------------


def _helm(testbed: TestBed, *args: str) -> str:
    proc = run_helm(testbed.binary("helm"), "--kubeconfig", str(testbed.kubeconfig), *args, timeout=300)
    assert proc.returncode == 0, f"helm {' '.join(args[:3])}: {proc.stderr}"
    return proc.stdout


def _volume_files(api: Any, ns: str, template: dict[str, Any]) -> dict[str, dict[str, bytes]]:
    """Each Secret/ConfigMap volume's files, read from the API as a kubelet reads them."""
    core = client.CoreV1Api(api)
    out: dict[str, dict[str, bytes]] = {}
    for vol in template["spec"].get("volumes") or []:
        if "secret" in vol:
            data = core.read_namespaced_secret(vol["secret"]["secretName"], ns).data or {}
            out[vol["name"]] = {k: base64.b64decode(v) for k, v in data.items()}
        elif "configMap" in vol:
            data = core.read_namespaced_config_map(vol["configMap"]["name"], ns).data or {}
            out[vol["name"]] = {k: v.encode() for k, v in data.items()}
    return out


def _service_account_files(api: Any, testbed: TestBed, ns: str, name: str) -> dict[str, bytes]:
    """What a kubelet projects for the pod's ServiceAccount: a bound token, the API's CA, the namespace."""
    req = client.CoreV1Api(api).create_namespaced_service_account_token(name, ns, {"spec": {"expirationSeconds": 3600}})
    return {"token": req.status.token.encode(), "ca.crt": testbed.ca_file.read_bytes(), "namespace": ns.encode()}


class ChartAgent:
    """The chart installed by helm into its own namespace, its agent pod run by podman."""

    def __init__(self, testbed: TestBed, api: Any, image: str, workdir: Path) -> None:
        self.testbed, self.api, self.image, self.workdir = testbed, api, image, workdir
        tag = secrets.token_hex(3)
        self.release, self.namespace, self.label = f"img-{tag}", f"hami-place-img-{tag}", f"image-{tag}"
        self.pod: PodmanPod | None = None

    def install(self) -> None:
        repo, version = self.image.rsplit(":", 1)
        ca = self.testbed.webhook_client_ca_file
        _helm(
            self.testbed,
            "install", self.release, str(REPO / "chart"), "-n", self.namespace, "--create-namespace",
            "--set", f"image.repository={repo}", "--set", f"image.tag={version}",
            "--set", "replicaCount=1",
            # podman runs the pod: the scheduler finds no node for the Deployment's own (kwok would fake it).
            "--set-json", 'nodeSelector={"hami-place.test/podman": "runs-this-pod"}',
            "--set-json", f'webhook.namespaceSelector.matchLabels={{"hami-place-agent": "{self.label}"}}',
            "--set", "webhook.clientAuth.enabled=true", "--set-file", f"webhook.clientAuth.caBundle={ca}",
            "--set-json", f'webhook.clientAuth.commonNames=["{WEBHOOK_CLIENT_CN}"]',
        )  # fmt: skip

    def deployment(self) -> Any:
        (dep,) = client.AppsV1Api(self.api).list_namespaced_deployment(self.namespace).items
        return dep

    def service(self) -> Any:
        (svc,) = client.CoreV1Api(self.api).list_namespaced_service(self.namespace).items
        return svc

    def start(self) -> PodmanPod:
        dep = self.deployment()
        template = self.api.sanitize_for_serialization(dep.spec.template)
        sa = template["spec"]["serviceAccountName"]
        self.pod = PodmanPod(
            name=f"{dep.metadata.name}-podman-{secrets.token_hex(2)}",
            namespace=self.namespace,
            template=template,
            image=self.image,
            workdir=self.workdir,
            volumes=_volume_files(self.api, self.namespace, template),
            sa_files=_service_account_files(self.api, self.testbed, self.namespace, sa),
        )
        self.pod.start(self.testbed.api_port)
        self.pod.wait_ready(90)
        return self.pod

    def uninstall(self) -> None:
        if self.pod:
            self.pod.stop()
        with contextlib.suppress(AssertionError):
            _helm(self.testbed, "uninstall", self.release, "-n", self.namespace, "--wait")
        with contextlib.suppress(ApiException):
            client.CoreV1Api(self.api).delete_namespace(self.namespace)


@pytest.fixture
def chart_agent(testbed: TestBed, api: Any, agent_image: str, tmp_path: Path) -> Iterator[ChartAgent]:
    if os.geteuid() != 0:  # the Service's ClusterIP goes on the host's loopback, as kube-proxy would route it
        unavailable("running the image as the chart's agent needs root (ip addr add on lo, rootful podman)")
    install_crd(api)
    agent = ChartAgent(testbed, api, agent_image, tmp_path)
    try:
        agent.install()
        with service_ip(agent.service().spec.cluster_ip):
            agent.start()
            yield agent
    finally:
        if agent.pod:
            print(agent.pod.logs(200))
        agent.uninstall()


def _webhook_answers(api: Any, ns: str, agent: ChartAgent) -> None:
    """Until the API server calls the chart's validating webhook through the Service (a dry-run
    placement onto a node that does not exist is refused by the agent, not by the API server)."""
    custom: Any = client.CustomObjectsApi(api)
    body = placement("probe", "probe-00001", {"app": "probe"}, "no-such-node", ["gpu-0"])
    last = ""

    def refused() -> bool:
        nonlocal last
        try:
            custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL, body, dry_run="All")
            last = "accepted (the webhook is not registered yet)"
        except ApiException as e:
            last = str(e.body)
            return "denied the request" in last and "no-such-node" in last
        return False

    try:
        wait_for("the chart's webhook through its Service", refused, 60)
    except AssertionError as e:
        raise AssertionError(f"{e}; last answer: {last}\n{agent.pod.logs() if agent.pod else ''}") from None


def _cli(testbed: TestBed, agent: ChartAgent, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")}
    env["KUBECONFIG"] = str(testbed.kubeconfig)
    where = ["--agent-namespace", agent.namespace, "--agent-service", agent.service().metadata.name]
    return subprocess.run(
        [sys.executable, "-m", "kubectl_hami_place", *args, *where],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _reporters(api: Any, ns: str, placement_name: str) -> set[str]:
    events = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={placement_name}")
    return {e.reporting_instance for e in events.items}


@pytest.mark.testbed
@pytest.mark.hami
def test_the_image_as_the_charts_agent_pins_and_moves_a_pod(
    testbed: TestBed, api: Any, chart_agent: ChartAgent
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = f"img-work-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": ns, "labels": {"hami-place-agent": chart_agent.label}}})
    targets = [NodeSpec(f"{ns}-t{i}", gpus=4) for i in range(2)]
    testbed.add_nodes(targets)
    allocator = start_allocator(api, {ns})
    try:
        _webhook_answers(api, ns, chart_agent)
        apps.create_namespaced_deployment(ns, deployment("img", replicas=0))

        pinned = _cli(testbed, chart_agent, "pin", "deploy/img", "-n", ns, "--node", targets[0].name,
                      "--gpu", "gpu-1", "--name", "img-pin", "-o", "name")  # fmt: skip
        assert pinned.returncode == 0, pinned.stderr
        assert pinned.stdout.strip() == "hamipodplacement.scheduling.hami.placement.com/img-pin"
        apps.patch_namespaced_deployment_scale("img", ns, {"spec": {"replicas": 1}})
        wait_for("the pin Completed", lambda: placement_status(api, ns, "img-pin").get("phase") == "Completed", 90)
        (pod,) = core.list_namespaced_pod(ns, label_selector="app=img").items
        assert pod.spec.node_name == targets[0].name
        assert pod.metadata.annotations[ann.USE_GPU_UUID] == targets[0].gpu_uuid(1)

        moved = _cli(testbed, chart_agent, "move", pod.metadata.name, "-n", ns, "--node", targets[1].name,
                     "--gpu", "gpu-2", "--evict", "--name", "img-move", "--timeout", "3m")  # fmt: skip
        assert moved.returncode == 0, (moved.stdout, moved.stderr)
        st = placement_status(api, ns, "img-move")
        assert st["phase"] == "Completed" and st["evictedPod"] == pod.metadata.name, json.dumps(st)
        replacement = core.read_namespaced_pod(st["boundPod"], ns)
        assert replacement.spec.node_name == targets[1].name
        assert replacement.metadata.annotations[ann.USE_GPU_UUID] == targets[1].gpu_uuid(2)
        # The container is the only agent serving these namespaces: it reported every step.
        assert chart_agent.pod is not None
        assert _reporters(api, ns, "img-move") == {chart_agent.pod.name}
        assert _reporters(api, ns, "img-pin") == {chart_agent.pod.name}
    finally:
        allocator.stop()
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns, propagation_policy="Background")
        for spec in targets:
            with contextlib.suppress(ApiException):
                core.delete_node(spec.name)
