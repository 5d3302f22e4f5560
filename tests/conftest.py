"""Shared fixtures: one real control plane per session, one namespace per test.

Tests marked ``testbed`` (or using the ``testbed`` fixture) run against real etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok processes. If the test bed
cannot start, they FAIL under CI=true (with the component logs) and are skipped elsewhere,
with the reason, so a laptop without Go can still run the unit tests.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane.ci import unavailable
from testbed.controlplane.cluster import TestBed
from testbed.controlplane.processes import StartupError
from testbed.data.gpu_nodes import uniform_nodes
from testbed.hami.scheduler import mode_banner, scheduler_binary
from toolchain.build import BuildError


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--e2e", action="store_true", help="run the opt-in kind e2e tier (needs Docker and internet)")


def pytest_report_header(config: pytest.Config) -> str:
    return mode_banner()


def _deselect(config: pytest.Config, items: list[pytest.Item], marker: str) -> None:
    dropped = [item for item in items if marker in item.keywords]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if marker not in item.keywords]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Deselected, not skipped: a tier that does not apply is not part of this run at all
    # (docs/testing.md), so it never shows up as a skipped test that could be read as coverage.
    if not config.getoption("--e2e"):
        _deselect(config, items, "e2e")
    if scheduler_binary() is None:
        _deselect(config, items, "hami_only")  # needs the real HAMi scheduler: make test-hami
    else:
        _deselect(config, items, "standin_only")  # writes HAMi's annotations by hand: races HAMi


_bed: TestBed | None = None


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestBed]:
    global _bed
    workdir = tmp_path_factory.mktemp("testbed")
    bed = TestBed(workdir=workdir, nodes=uniform_nodes(4, gpus=4))
    try:
        bed.start()
    except (BuildError, StartupError, OSError) as e:
        msg = f"test bed could not start: {e}\n{bed.logs(80)}"
        unavailable(msg)
    _bed = bed
    print(f"\ntest bed up in {bed.timings['total']:.1f}s ({bed.server}); logs in {bed.log_dir}")
    yield bed
    _bed = None
    bed.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    # Show each component's log tail under a failed test that used the test bed.
    if report.failed and _bed is not None and "testbed" in getattr(item, "fixturenames", ()):
        report.sections.append(("test bed component logs", _bed.logs(40)))
    return report


@pytest.fixture(scope="session")
def api(testbed: TestBed):  # type: ignore[no-untyped-def]
    return testbed.api_client()


@pytest.fixture
def ns(api, request: pytest.FixtureRequest) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A fresh namespace per test, with its default ServiceAccount ready; deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name, "labels": {"hami-place-test": "true"}}})
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def tmp_kubeconfig(testbed: TestBed, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Factory: a kubeconfig for an arbitrary (non-admin) user, to exercise RBAC."""

    def make(user: str, groups: tuple[str, ...] = ()) -> Path:
        return testbed.write_kubeconfig(tmp_path / f"{user}.kubeconfig", user, groups)

    return make
