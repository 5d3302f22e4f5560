"""The test bed's HAMi mode without HAMi: how a binary is refused, and what is registered.

The mode itself runs under `make test-hami`; these checks hold in every run, so a broken
HAMI_SCHEDULER_BIN is reported with its exact cause and the registration stays the chart's.
"""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from testbed.controlplane.processes import StartupError
from testbed.hami import scheduler as hami
from testbed.hami.allocation import HamiAllocates, real_hami, start_allocator


def _script(tmp_path: Path, body: str, mode: int = 0o755) -> Path:
    path = tmp_path / "scheduler"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


def test_missing_binary_names_the_variable_and_path(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"HAMI_SCHEDULER_BIN=.*/nope: no such file"):
        hami.check_runnable(tmp_path / "nope")


def test_not_executable_is_refused(tmp_path: Path) -> None:
    path = _script(tmp_path, "exit 0", mode=stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(StartupError, match="not executable"):
        hami.check_runnable(path)


def test_a_binary_that_fails_reports_its_exit_code_and_output(tmp_path: Path) -> None:
    path = _script(tmp_path, "echo 'exec format error' >&2; exit 126")
    with pytest.raises(StartupError, match=r"version exited 126: exec format error"):
        hami.check_runnable(path)


def test_version_and_revision_are_read_from_hamis_version_command(tmp_path: Path) -> None:
    # The layout of HAMi's pkg/version/version.go output.
    path = _script(
        tmp_path,
        "printf 'version:          v2.10.0\\nrevision:         4707fb02c91c545bc7343ce26dba4c32919f9a3e\\n'",
    )
    assert hami.check_runnable(path) == "v2.10.0 (4707fb02)"


def test_version_printed_on_stderr_is_read(tmp_path: Path) -> None:
    # v2.10.0's scheduler prints its version through cobra's cmd.Print, i.e. on stderr.
    path = _script(tmp_path, "printf 'version:          v2.10.0\\nrevision:         4707fb02c9\\n' >&2")
    assert hami.check_runnable(path) == "v2.10.0 (4707fb02)"


def test_mode_follows_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hami.ENV, raising=False)
    assert hami.scheduler_binary() is None and not real_hami()
    assert "stand-in" in hami.mode_banner()
    monkeypatch.setenv(hami.ENV, "/opt/hami/scheduler")
    assert hami.scheduler_binary() == Path("/opt/hami/scheduler") and real_hami()
    assert "real scheduler /opt/hami/scheduler" in hami.mode_banner()
    # With real HAMi nothing is started for a test: HAMi allocates, the post-bind component binds.
    assert isinstance(start_allocator(api=None, namespaces={"ns"}), HamiAllocates)


def test_extender_is_registered_as_hamis_chart_does() -> None:
    ext = hami.extender_config("https://127.0.0.1:1234")
    assert ext["urlPrefix"] == "https://127.0.0.1:1234"
    assert (ext["filterVerb"], ext["bindVerb"], ext["nodeCacheCapable"], ext["httpTimeout"]) == (
        "filter",
        "bind",
        True,
        "30s",
    )
    assert ext["enableHTTPS"] and ext["tlsConfig"] == {"insecure": True}
    names = [r["name"] for r in ext["managedResources"]]
    assert names[:5] == [
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpucores",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/priority",
    ]
    assert all(r["ignoredByScheduler"] for r in ext["managedResources"])


def test_webhook_is_hamis_vgpu_webhook() -> None:
    cfg = hami.webhook_configuration("https://127.0.0.1:1234", b"PEM")
    (hook,) = cfg["webhooks"]
    assert hook["name"] == "vgpu.hami.io"
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:1234/webhook",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert (hook["failurePolicy"], hook["reinvocationPolicy"], hook["admissionReviewVersions"]) == (
        "Ignore",
        "Never",
        ["v1beta1"],
    )
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["rules"][0]["resources"] == ["pods"]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert hook["namespaceSelector"]["matchExpressions"] == [ignore]
    assert hook["objectSelector"]["matchExpressions"] == [ignore]


def test_node_lock_owner_is_hamis_suffix() -> None:
    # HAMi pkg/util/nodelock/nodelock.go: "<RFC3339>,<namespace>,<pod>"
    assert "2026-12-05T14:04:15Z,default,p1".endswith(hami.nodelock_owner("default", "p1"))
    assert not "2026-12-05T14:04:15Z,default,p10".endswith(hami.nodelock_owner("default", "p1"))
