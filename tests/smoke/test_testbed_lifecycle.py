"""The harness itself: clean teardown, and a loud failure in CI when a component cannot start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.controlplane.cluster import STANDIN_SCHEDULER, TestBed
from testbed.data.gpu_nodes import uniform_nodes
from testbed.hami.filter_standin import COMPONENT as FILTER_STANDIN
from testbed.hami.scheduler import scheduler_binary

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]


def _port_free(port: int) -> bool:
    """True when nobody listens on the port (connections in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") == -1
    except FileNotFoundError:
        return False


def test_teardown_leaves_no_process_or_port(testbed, tmp_path) -> None:
    # `testbed` is requested only so this runs after the binaries are known to build.
    bed = TestBed(
        workdir=tmp_path / "second", nodes=uniform_nodes(1, prefix="teardown-node"), binaries=testbed.binaries
    )
    bed.start()
    pids = bed.pids()
    base = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    if scheduler_binary() is None:  # the CI mode's hami-scheduler: a kube-scheduler with the Filter stand-in
        assert set(pids) == base | {FILTER_STANDIN, STANDIN_SCHEDULER}
    else:
        assert set(pids) == base | {"hami-scheduler", "kube-scheduler-hami", "hami-device-plugin-post-bind"}
    port = bed.api_port
    etcd_port = int(bed.etcd_url.rsplit(":", 1)[1])
    assert not _port_free(port)
    bed.stop()
    assert [n for n, pid in pids.items() if _pid_alive(pid)] == []
    assert _port_free(port) and _port_free(etcd_port)


def test_ci_run_fails_not_skips_when_a_component_cannot_start(testbed, tmp_path) -> None:
    broken = tmp_path / "etcd"
    broken.write_text("#!/bin/sh\necho 'etcd: cannot open data dir: boom' >&2\nexit 3\n")
    broken.chmod(0o755)
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        textwrap.dedent("""
        def test_needs_bed(testbed):
            assert testbed
    """)
    )
    env = {**os.environ, "CI": "true", "TEST_ASSET_ETCD": str(broken)}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            str(probe),
            "--rootdir",
            str(REPO),
            "-c",
            str(REPO / "setup.cfg"),
            "--confcutdir",
            str(REPO / "tests"),
            "-o",
            f"testpaths={tmp_path}",
            "-p",
            "tests.conftest",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 error" in out and "skipped" not in out, out
    assert "etcd exited before /health" in out
    assert "cannot open data dir: boom" in out  # the component's own log is shown
