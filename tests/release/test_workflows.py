"""The GitHub workflows, checked here since they cannot run here: actionlint (built once from its
pinned Go module by the test bed's build step, toolchain/tools/actionlint) on every workflow, and the
facts of the release workflow that release/release.py and the docs rely on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from release import release
from testbed.controlplane.ci import unavailable
from tests.scripts import ROOT
from toolchain import build

WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yaml"
# Each platform on a native runner: PyInstaller builds for the OS and arch it runs on.
RUNNERS = {
    "linux/amd64": "ubuntu-24.04",
    "linux/arm64": "ubuntu-24.04-arm",
    "darwin/amd64": "macos-15-intel",
    "darwin/arm64": "macos-14",
}


@pytest.fixture(scope="module")
def actionlint() -> Path:
    try:
        return build.ensure_actionlint(log=lambda _m: None)
    except build.BuildError as e:
        unavailable(f"actionlint could not be built: {e}")


def _workflow(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def _uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def _step(job: dict[str, Any], action: str) -> dict[str, Any]:
    found = [s for s in job["steps"] if s.get("uses", "").startswith(f"{action}@")]
    assert len(found) == 1, f"{action}: {len(found)} steps"
    return found[0]


def test_actionlint_passes_every_workflow(actionlint: Path) -> None:
    """No finding, no output. shellcheck and pyflakes are turned off so the result does not depend
    on what the machine has installed (the run scripts were checked with shellcheck 0.9 too)."""
    files = sorted([*WORKFLOWS.glob("*.yaml"), *WORKFLOWS.glob("*.yml")])
    assert RELEASE in files and len(files) >= 2
    done = subprocess.run(
        [str(actionlint), "-no-color", "-shellcheck=", "-pyflakes=", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done.stdout + done.stderr


def test_actions_are_pinned_to_a_major_version() -> None:
    for path in sorted(WORKFLOWS.glob("*.y*ml")):
        for name, job in _workflow(path)["jobs"].items():
            for uses in _uses(job):
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", uses), f"{path.name} {name}: {uses}"


def test_release_runs_on_version_tags_with_least_privilege() -> None:
    doc = _workflow(RELEASE)
    assert doc["on"] == {"push": {"tags": ["v*"]}}
    assert doc["permissions"] == {}
    jobs = doc["jobs"]
    perms = {name: job.get("permissions") for name, job in jobs.items()}
    assert all(isinstance(p, dict) for p in perms.values()), perms  # every job names its own
    writes = {name: sorted(k for k, v in p.items() if v == "write") for name, p in perms.items()}
    assert writes == {"meta": [], "image": ["packages"], "chart": ["packages"], "plugin": [], "release": ["contents"]}
    assert all(set(p.values()) <= {"read", "write"} and set(p) <= {"contents", "packages"} for p in perms.values())


def test_the_tag_must_match_the_package_version() -> None:
    """meta reads __version__ with sed: the archives are named by it (release.archive_name)."""
    meta = _workflow(RELEASE)["jobs"]["meta"]
    assert "hami_place_core/__init__.py" in _runs(meta) and 'version="${TAG#v}"' in _runs(meta)
    init = (ROOT / "hami_place_core" / "__init__.py").read_text()
    assert re.findall(r'^__version__ = "(.*)"$', init, re.M) == [release.__version__]


def test_agent_image_is_multi_arch_on_ghcr() -> None:
    image = _workflow(RELEASE)["jobs"]["image"]
    assert [u.split("@")[0] for u in _uses(image)] == [
        "actions/checkout",
        "docker/setup-qemu-action",
        "docker/setup-buildx-action",
        "docker/login-action",
        "docker/build-push-action",
    ]
    push = _step(image, "docker/build-push-action")["with"]
    assert push["platforms"] == "linux/amd64,linux/arm64" and push["push"] is True
    assert push["tags"] == "ghcr.io/${{ needs.meta.outputs.owner }}/hami-place-agent:${{ needs.meta.outputs.version }}"
    assert "PYTHON_IMAGE=docker.io/library/python:3.11-slim" in push["build-args"]


def test_chart_is_packaged_by_release_py_and_pushed_as_oci() -> None:
    chart = _workflow(RELEASE)["jobs"]["chart"]
    runs = _runs(chart)
    assert "python -m release.release chart --helm helm" in runs
    assert '--image-repository "ghcr.io/$OWNER/hami-place-agent"' in runs
    assert 'helm push "dist/hami-place-$VERSION.tgz" "oci://ghcr.io/$OWNER/charts"' in runs
    # the name release.py's package_chart gives the package
    assert chart["env"]["VERSION"] == "${{ needs.meta.outputs.version }}"


def test_plugin_matrix_covers_release_py_platforms_on_native_runners() -> None:
    plugin = _workflow(RELEASE)["jobs"]["plugin"]
    include = plugin["strategy"]["matrix"]["include"]
    assert {m["platform"]: m["runner"] for m in include} == RUNNERS
    assert sorted(RUNNERS) == sorted(release.PLATFORMS) and len(include) == len(release.PLATFORMS)
    assert plugin["runs-on"] == "${{ matrix.runner }}"
    runs = _runs(plugin)
    assert "make release" in runs and "python -m release.release archive --full" in runs
    # the check that the archive is this platform's uses release.archive_name's pattern
    assert 'archive="dist/kubectl-hami_place_${VERSION}_${PLATFORM/\\//_}.tar.gz"' in runs
    assert release.archive_name("darwin/arm64", "9.9.9") == "kubectl-hami_place_9.9.9_darwin_arm64.tar.gz"
    upload = _step(plugin, "actions/upload-artifact")["with"]
    assert upload["path"] == "dist/kubectl-hami_place_*.tar.gz" and upload["if-no-files-found"] == "error"


def test_release_job_renders_the_krew_manifest_with_release_py() -> None:
    job = _workflow(RELEASE)["jobs"]["release"]
    assert job["needs"] == ["meta", "image", "chart", "plugin"]
    download = _step(job, "actions/download-artifact")["with"]
    assert download == {"path": "dist", "merge-multiple": True}
    runs = _runs(job)
    assert "python -m release.release manifest" in runs and "--dir dist --out dist/hami-place.yaml" in runs
    assert "releases/download/$TAG" in runs
    assert 'gh release create "$TAG"' in runs
    for asset in ("kubectl-hami_place_*.tar.gz", "hami-place-*.tgz", "hami-place.yaml", "SHA256SUMS"):
        assert asset in runs.split("gh release create", 1)[1], asset
