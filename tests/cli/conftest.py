"""Fixtures for the plugin's end-to-end tests: the built binary (tests/cli/plugin_binary.py), and a
test bed with the agent that the binary reaches (tests/cli/live.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.agents.agent_process import expose_agent_service
from testbed.agents.agent_set import AgentSet
from testbed.controlplane.cluster import TestBed
from testbed.controlplane.crd import install_crd
from testbed.data.gpu_nodes import NodeSpec
from testbed.hami.allocation import Allocator, start_allocator
from tests.cli.live import Live
from tests.cli.plugin_binary import build_binary

AGENT_NS, AGENT_SVC = "kube-system", "gpu-descheduler-webhook"


@pytest.fixture(scope="session")
def binary() -> Path:
    return build_binary()


@pytest.fixture(scope="module")
def live(testbed: TestBed, api: Any, binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    install_crd(api)
    agents = AgentSet(testbed, api, tmp_path_factory.mktemp("cli-agent"), "cli", host="0.0.0.0")  # noqa: S104
    standin: Allocator | None = None
    targets: list[NodeSpec] = []
    try:
        agents.start()
        expose_agent_service(api, agents.agent, AGENT_NS, AGENT_SVC)
        ns = agents.namespace("cli")
        targets = [NodeSpec(f"{ns[:50]}-t{i}", gpus=4) for i in range(3)]
        testbed.add_nodes(targets)
        # Real HAMi allocates pinned pods; in CI the stand-in writes that allocation.
        standin = start_allocator(api, {ns})
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
