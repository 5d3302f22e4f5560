"""release/release.py beyond the archive (tests/cli/test_release.py): the krew manifest from a
directory of archives (the release workflow's way), a local build's partial manifest, the chart
packaged at the version with the image tag set, and `make release-all`'s summary."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import yaml

from release import release
from testbed.controlplane.ci import unavailable
from tests.scripts import ROOT
from toolchain import build


def _fake_archives(directory: Path, platforms: tuple[str, ...]) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for p in platforms:
        path = directory / release.archive_name(p)
        path.write_bytes(f"archive of {p}".encode())
        out[p] = path
    return out


@pytest.fixture(scope="module")
def helm() -> str:
    found = build.locate("helm", build.cache_bin_dir())
    if found is None:
        msg = "the test bed's helm is not built (make testbed-build)"
        unavailable(msg)
    return str(found)


def test_manifest_from_a_directory_covers_every_platform(tmp_path: Path) -> None:
    archives = _fake_archives(tmp_path / "dist", release.PLATFORMS)
    (tmp_path / "dist" / release.archive_name("linux/amd64", full=True)).write_bytes(b"full")  # not krew's
    out = tmp_path / "hami-place.yaml"
    base = "https://github.com/o/r/releases/download/v1"
    assert release.main(["manifest", "--uri-base", base, "--dir", str(tmp_path / "dist"), "--out", str(out)]) == 0
    text = out.read_text()
    assert not text.startswith("# LOCAL BUILD")
    entries = {
        f"{p['selector']['matchLabels']['os']}/{p['selector']['matchLabels']['arch']}": p
        for p in yaml.safe_load(text)["spec"]["platforms"]
    }
    assert list(entries) == list(release.PLATFORMS)
    for plat, path in archives.items():
        assert entries[plat]["uri"] == f"{base}/{path.name}" and entries[plat]["sha256"] == release.sha256(path)
    # one missing: refused, unless --partial
    archives["darwin/arm64"].unlink()
    with pytest.raises(SystemExit, match="missing archives for darwin/arm64"):
        release.main(["manifest", "--uri-base", base, "--dir", str(tmp_path / "dist"), "--out", str(out)])


def test_partial_manifest_says_it_is_local(tmp_path: Path) -> None:
    archives = _fake_archives(tmp_path, ("linux/amd64",))
    text = release.render_manifest(
        "1.2.3", {"linux/amd64": ("file:///x", release.sha256(archives["linux/amd64"]))}, True
    )
    first = text.splitlines()[0]
    assert first.startswith("# LOCAL BUILD, not for publishing: only linux/amd64.")
    assert "linux/arm64, darwin/amd64, darwin/arm64 are built by .github/workflows/release.yaml" in first
    platforms = yaml.safe_load(text)["spec"]["platforms"]
    assert [p["selector"]["matchLabels"] for p in platforms] == [{"os": "linux", "arch": "amd64"}]


def test_chart_image_tag_is_set_and_comments_kept() -> None:
    values = (ROOT / "chart" / "values.yaml").read_text()
    out = release.set_chart_image(values, "ghcr.io/someone/hami-place-agent", "9.9.9")
    image = yaml.safe_load(out)["image"]
    assert image == {
        **yaml.safe_load(values)["image"],
        "repository": "ghcr.io/someone/hami-place-agent",
        "tag": "9.9.9",
    }
    assert [a for a in values.splitlines() if a.lstrip().startswith("#")] == [
        b for b in out.splitlines() if b.lstrip().startswith("#")
    ]
    assert (
        yaml.safe_load(release.set_chart_image(values, None, "9.9.9"))["image"]["repository"]
        == (yaml.safe_load(values)["image"]["repository"])
    )


def test_chart_package_carries_the_version(helm: str, tmp_path: Path) -> None:
    tgz = release.package_chart(helm, tmp_path, version="9.9.9", repository="ghcr.io/someone/hami-place-agent")
    assert tgz.name == "hami-place-9.9.9.tgz"
    with tarfile.open(tgz) as tar:
        chart = yaml.safe_load(tar.extractfile("hami-place/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(tar.extractfile("hami-place/values.yaml").read())  # type: ignore[union-attr]
    assert (chart["version"], chart["appVersion"]) == ("9.9.9", "9.9.9")
    assert values["image"]["tag"] == "9.9.9" and values["image"]["repository"] == "ghcr.io/someone/hami-place-agent"
    assert (ROOT / "chart" / "values.yaml").read_text().count('tag: ""') == 1  # chart/ itself untouched


def test_release_all_builds_what_it_can_and_says_what_not(
    helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`release.py local` (make release-all, after make release): here the archive is a stand-in and
    `make image` is not run (tests/cli/test_release.py checks the real archive)."""
    plat = release.host_platform()
    archive = _fake_archives(tmp_path, (plat,))[plat]
    monkeypatch.setattr(release, "find_helm", lambda log=print: helm)
    monkeypatch.setattr(
        release, "_make_image", lambda out: (False, "podman is not installed (make image builds with it)")
    )
    assert release.main(["local", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"built:     plugin archive {plat}: {archive}" in out
    assert f"built:     chart: {tmp_path / f'hami-place-{release.__version__}.tgz'}" in out
    assert f"built:     krew manifest: {tmp_path / 'hami-place.yaml'} ({plat} only" in out
    assert "not built: agent image: podman is not installed" in out
    others = ", ".join(p for p in release.PLATFORMS if p != plat)
    assert f"not built: plugin archives {others}: " in out and "release.yaml" in out
    manifest = yaml.safe_load((tmp_path / "hami-place.yaml").read_text())
    [entry] = manifest["spec"]["platforms"]
    assert entry["sha256"] == release.sha256(archive) and entry["uri"] == f"file://{archive.resolve()}"


def test_release_all_needs_the_archive(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="run `make release` first"):
        release.main(["local", "--out", str(tmp_path)])
