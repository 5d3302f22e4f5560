"""Fixtures that run the real agent (``python -m agent``) against the test bed.

The harness itself (AgentSet, create_placement, install_crd, tokens) is in testbed/."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testbed.agents.agent_set import AgentSet
from testbed.controlplane.cluster import TestBed
from testbed.controlplane.crd import install_crd
from testbed.data.gpu_nodes import NodeSpec
from testbed.hami.allocation import Allocator, start_allocator


@pytest.fixture(scope="session")
def agents(testbed: TestBed, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentSet]:
    install_crd(api)
    s = AgentSet(testbed, api, tmp_path_factory.mktemp("agent"), "single")
    try:
        s.start()
    except Exception:
        s.stop()
        raise
    yield s
    s.stop()


@pytest.fixture
def ans(agents: AgentSet, request: pytest.FixtureRequest, api: Any) -> Iterator[str]:
    """A namespace served by the session's agent."""
    name = agents.namespace(request.node.name)
    yield name
    client.CoreV1Api(api).delete_namespace(name, propagation_policy="Background")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.failed:
        for fixture in ("agents", "agent_pair"):
            s = getattr(item, "funcargs", {}).get(fixture)
            if isinstance(s, AgentSet):
                report.sections.append((f"{fixture} logs", s.logs()))
    return report


@pytest.fixture
def mover_set(testbed, api, tmp_path):
    install_crd(api)
    sets: list[AgentSet] = []
    standins: list[Allocator] = []
    targets: list[NodeSpec] = []

    def make(label: str, env: dict[str, str] | None = None) -> tuple[AgentSet, str]:
        s = AgentSet(testbed, api, tmp_path / label, label, 1, env).start()
        sets.append(s)
        ns = s.namespace(label)
        # Targets are this test's own nodes: what it allocates never leaks into other tests.
        specs = [NodeSpec(f"{ns[:50]}-t{i}", gpus=4) for i in range(2)]
        testbed.add_nodes(specs)
        targets.extend(specs)
        # Real HAMi allocates the pinned replacements; in CI the stand-in writes that allocation.
        standins.append(start_allocator(api, {ns}))
        return s, ns

    make.targets = targets  # type: ignore[attr-defined]
    yield make
    for st in standins:
        st.stop()
    for spec in targets:
        with contextlib.suppress(Exception):
            client.CoreV1Api(api).delete_node(spec.name)
    for s in sets:
        print(s.logs())
        s.stop()
