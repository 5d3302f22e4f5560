"""Fixtures for the plugin's end-to-end tests: the built binary, and a test bed with the agent.

The binary is the PyInstaller build `make binary` produces (built once per source change: its
inputs' digest is kept next to it), so these tests exercise what users install, not CliRunner.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.agent_process import expose_agent_service
from testbed.allocation_standin import AllocationStandIn
from testbed.cluster import TestBed
from testbed.gpu_nodes import NodeSpec
from tests.agent.conftest import AgentSet, install_crd

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "build" / "dist"
BINARY = DIST / "kubectl-hami_place" / "kubectl-hami_place"
AGENT_NS, AGENT_SVC = "kube-system", "gpu-descheduler-webhook"


def _source_digest() -> str:
    h = hashlib.sha256()
    for base in ("kubectl_hami_place", "hami_place_core", "release"):
        for path in sorted((ROOT / base).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def build_binary() -> Path:
    """`make binary`'s build, skipped when the sources are unchanged since the last one."""
    stamp = DIST / "kubectl-hami_place.source-sha256"
    digest = _source_digest()
    if BINARY.is_file() and stamp.is_file() and stamp.read_text() == digest:
        return BINARY
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level=WARN",
        "--distpath",
        str(DIST),
        "--workpath",
        str(ROOT / "build" / "work"),
        str(ROOT / "release" / "kubectl-hami_place.spec"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"PyInstaller failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    stamp.write_text(digest)
    return BINARY


@pytest.fixture(scope="session")
def binary() -> Path:
    return build_binary()


@dataclass
class Live:
    """A namespace served by a running agent that the CLI reaches through the service proxy."""

    testbed: TestBed
    api: Any
    agents: AgentSet
    ns: str
    targets: list[NodeSpec]
    binary: Path

    def run(
        self, *args: str, kubeconfig: Path | None = None, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args],
            env=self.env(kubeconfig),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
        )

    def popen(self, *args: str, kubeconfig: Path | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.binary), *args],
            env=self.env(kubeconfig),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")}
        env["KUBECONFIG"] = str(kubeconfig or self.testbed.kubeconfig)
        return env


@pytest.fixture(scope="module")
def live(testbed: TestBed, api: Any, binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    install_crd(api)
    agents = AgentSet(testbed, api, tmp_path_factory.mktemp("cli-agent"), "cli", host="0.0.0.0")  # noqa: S104
    standin: AllocationStandIn | None = None
    targets: list[NodeSpec] = []
    try:
        agents.start()
        expose_agent_service(api, agents.agent, AGENT_NS, AGENT_SVC)
        ns = agents.namespace("cli")
        targets = [NodeSpec(f"{ns[:50]}-t{i}", gpus=4) for i in range(3)]
        testbed.add_nodes(targets)
        # Until the real HAMi scheduler can run here, this writes HAMi's allocation for pinned pods.
        standin = AllocationStandIn(api, {ns}).start()
        yield Live(testbed, api, agents, ns, targets, binary)
    finally:
        if standin is not None:
            standin.stop()
        core = client.CoreV1Api(api)
        for spec in targets:
            with contextlib.suppress(Exception):
                core.delete_node(spec.name)
        for delete, what in (
            (core.delete_namespaced_service, AGENT_SVC),
            (core.delete_namespaced_endpoints, AGENT_SVC),
            (core.delete_namespaced_pod, f"{AGENT_SVC}-local"),
        ):
            with contextlib.suppress(Exception):
                delete(what, AGENT_NS)
        print(agents.logs())
        agents.stop()
