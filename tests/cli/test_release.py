"""Release packaging: the archive, the krew manifest's structure, and a real `krew install` of the
local build (krew built from its pinned Go module by the test bed's build step)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from release import release
from tests.cli.plugin_binary import ROOT, build_binary
from toolchain import build


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_binary()
    return Path(release.make_archive(ROOT / "build" / "dist", tmp_path_factory.mktemp("dist"), "linux/amd64"))


def test_archive_is_flat_with_license_and_completion_helper(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        assert {"kubectl-hami_place", "LICENSE", "kubectl_complete-hami_place"} <= names
        assert any(n.startswith("_internal/") for n in names)  # onedir layout, not onefile
        # krew extracts regular files and directories only (PyInstaller links bundled libraries).
        assert all(m.isfile() or m.isdir() for m in tar.getmembers())
        member = tar.getmember("kubectl-hami_place")
        assert member.mode & 0o111 and member.mtime == 0 and member.uname == ""
    assert archive.name == f"kubectl-hami_place_{release.__version__}_linux_amd64.tar.gz"


def _subset_snapshot(tmp_path: Path) -> Path:
    """16 nodes of the example: small enough for the exact stage (auto runs it where HiGHS is)."""
    import json

    from hami_place_core.fragmentation import cluster_metrics, mix_from_state
    from hami_place_core.snapshot import make_snapshot
    from hami_place_core.state import build_state
    from tests.planner_fixtures import subset_raw

    nodes, pods = subset_raw()
    state = build_state(nodes, pods)
    snap = tmp_path / "subset.json"
    snap.write_text(json.dumps(make_snapshot(nodes, pods, state, cluster_metrics(state, mix_from_state(state)), "t")))
    return snap


def test_the_default_archive_leaves_out_the_exact_planner(archive: Path) -> None:
    """HiGHS (highspy) and numpy with its OpenBLAS were 48 MB of the 101 MB build: the default
    archive goes without them (docs/release.md); HAMI_PLACE_EXACT=1 + `archive --full` keeps them."""
    with tarfile.open(archive) as tar:
        tops = {n.split("/")[1] for n in tar.getnames() if n.startswith("_internal/") and n.count("/") >= 1}
    carried = sorted(t for t in tops if t.split(".")[0].split("-")[0] in ("highspy", "numpy"))
    assert carried == [], carried
    size = archive.stat().st_size
    print(f"\ndefault archive {archive.name}: {size / 2**20:.1f} MiB ({size:,} bytes)")
    assert size < 35 * 2**20, f"{archive.name} is {size / 2**20:.1f} MiB; it was 22.7 MiB without HiGHS"
    with pytest.raises(SystemExit, match="has no HiGHS"):
        release.make_archive(ROOT / "build" / "dist", archive.parent / "full", "linux/amd64", full=True)


def test_the_binary_says_the_exact_stage_is_absent(archive: Path, tmp_path: Path) -> None:
    """`--solver exact` is a user error (exit 1) naming the way to get it; `auto` plans greedily and
    its note says why."""
    import json

    snap = _subset_snapshot(tmp_path)
    binary = ROOT / "build" / "dist" / "kubectl-hami_place" / "kubectl-hami_place"
    exact = subprocess.run(
        [str(binary), "plan", "--snapshot", str(snap), "--solver", "exact", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exact.returncode == 1 and exact.stdout == "", exact.stderr
    assert exact.stderr.startswith("error: --solver exact: exact stage not in this build"), exact.stderr
    assert "pip install 'hami-place[exact]'" in exact.stderr and "-full.tar.gz" in exact.stderr
    auto = subprocess.run(
        [str(binary), "plan", "--snapshot", str(snap), "-o", "json"], capture_output=True, text=True, timeout=300
    )
    assert auto.returncode == 0, auto.stderr
    out = json.loads(auto.stdout)
    assert out["solver"] == "greedy" and out["solverNote"].startswith("exact stage not in this build"), out
    table = subprocess.run([str(binary), "plan", "--snapshot", str(snap)], capture_output=True, text=True, timeout=300)
    assert "by the greedy planner (exact stage not in this build" in table.stdout, table.stdout[-600:]


def test_manifest_structure(archive: Path, tmp_path: Path) -> None:
    text = release.render_manifest(
        "1.2.3", {p: (f"https://example.invalid/{p}.tar.gz", release.sha256(archive)) for p in release.PLATFORMS}
    )
    doc = yaml.safe_load(text)
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and doc["kind"] == "Plugin"
    assert doc["metadata"]["name"] == "hami-place" and doc["spec"]["version"] == "v1.2.3"
    assert doc["spec"]["shortDescription"] and doc["spec"]["homepage"].startswith("https://")
    platforms = doc["spec"]["platforms"]
    assert [(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]) for p in platforms] == [
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
    ]
    for p in platforms:
        assert len(p["sha256"]) == 64 and p["bin"] == "kubectl-hami_place"
        assert p["files"] == [{"from": "*", "to": "."}]
    with pytest.raises(SystemExit, match="missing archives for darwin/arm64"):
        release.render_manifest("1.2.3", {p: ("u", "0" * 64) for p in release.PLATFORMS[:3]})


def test_krew_installs_the_local_build_and_the_plugin_runs(archive: Path, tmp_path: Path) -> None:
    krew = build.ensure_krew()
    manifest = tmp_path / "hami-place.yaml"
    manifest.write_text(
        release.render_manifest(
            release.__version__, {p: (f"file://{archive}", release.sha256(archive)) for p in release.PLATFORMS}
        )
    )
    env = {**os.environ, "KREW_ROOT": str(tmp_path / "krew"), "KREW_NO_UPGRADE_CHECK": "1"}
    done = subprocess.run(
        [str(krew), "install", f"--manifest={manifest}", f"--archive={archive}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    plugin = tmp_path / "krew" / "bin" / "kubectl-hami_place"
    assert plugin.is_symlink()
    version = subprocess.run([str(plugin), "version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"kubectl-hami_place {release.__version__}"
    selftest = subprocess.run([str(plugin), "selftest"], capture_output=True, text=True, timeout=120)
    assert selftest.returncode == 0 and selftest.stdout.startswith("selftest ok:"), selftest.stderr
    receipt = yaml.safe_load((tmp_path / "krew" / "receipts" / "hami-place.yaml").read_text())
    assert receipt["metadata"]["name"] == "hami-place" and receipt["spec"]["version"] == f"v{release.__version__}"
