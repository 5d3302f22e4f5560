"""Fixtures that run the real agent (``python -m agent``) against the test bed.

The harness itself (AgentSet, create_placement, install_crd, tokens) is in testbed/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testbed.agent_set import AgentSet
from testbed.cluster import TestBed
from testbed.crd import install_crd


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
