"""Release packaging: the binary's archive, the krew manifest rendered from its template, the chart.

    python -m release.release archive [--dist build/dist] [--out dist] [--full]
    python -m release.release manifest --uri-base URL (--dir dist | --archive linux/amd64=dist/x.tar.gz ...) \
        [--partial] [--out krew/hami-place.yaml]
    python -m release.release chart [--image-repository REPO] [--helm PATH] [--out dist]
    python -m release.release local [--out dist]      # `make release-all`

`archive` packs the PyInstaller onedir build with LICENSE and the kubectl completion helper into
`kubectl-hami_place_<version>_<os>_<arch>.tar.gz` (flat: the binary at the top); the default build
has no HiGHS (the exact planner), and `--full` packs a build made with HAMI_PLACE_EXACT=1 as
`..._<os>_<arch>-full.tar.gz`. `manifest` fills in krew/hami-place.yaml.tmpl with each platform's
uri and sha256; every platform of PLATFORMS must be given, so a manifest never ships with a hole
(`--partial`, for a local build, leaves out the platforms not built and says so in the file).
`chart` packages chart/ at this version with the agent image's tag set to it. `local` is what a
release holds that this machine can build (docs/release.md); .github/workflows/release.yaml builds
the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from string import Template

from hami_place_core import __version__

ROOT = Path(__file__).resolve().parent.parent

PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
BIN = "kubectl-hami_place"
HOMEPAGE = "https://github.com/hami-place/hami-place"


def host_platform() -> str:
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{sys.platform}/{arch}"


def archive_name(plat: str, version: str = __version__, full: bool = False) -> str:
    os_, arch = plat.split("/")
    return f"{BIN}_{version}_{os_}_{arch}{'-full' if full else ''}.tar.gz"


# What the default build leaves out (release/kubectl-hami_place.spec): the exact planner's HiGHS.
EXACT_MODULES = ("highspy", "numpy")


def carries_exact(onedir: Path) -> bool:
    """Whether a PyInstaller onedir build bundles HiGHS (built with HAMI_PLACE_EXACT=1)."""
    return any((onedir / "_internal" / m).is_dir() for m in EXACT_MODULES)


def make_archive(dist: Path, out: Path, plat: str, full: bool = False) -> Path:
    onedir = dist / BIN
    if not (onedir / BIN).is_file():
        raise SystemExit(f"no PyInstaller build at {onedir}; run `make binary` first")
    if carries_exact(onedir) != full:
        raise SystemExit(
            f"{onedir} carries HiGHS (built with HAMI_PLACE_EXACT=1): pack it with --full"
            if not full
            else f"--full: {onedir} has no HiGHS; build it with HAMI_PLACE_EXACT=1 make binary"
        )
    out.mkdir(parents=True, exist_ok=True)
    target = out / archive_name(plat, full=full)

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        # reproducible archives: no owner names or build-time mtimes
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, name in _members(onedir):
            tar.add(path, arcname=name, recursive=False, filter=clean)
        tar.add(ROOT / "LICENSE", arcname="LICENSE", filter=clean)
        tar.add(ROOT / "release" / "kubectl_complete-hami_place", arcname="kubectl_complete-hami_place", filter=clean)
    return target


def _members(onedir: Path) -> list[tuple[Path, str]]:
    """(file on disk, name in the archive), symlinks replaced by what they point to: PyInstaller
    links bundled shared libraries (numpy's OpenBLAS, HiGHS) into _internal/, and krew cannot
    extract symlinks ("unable to handle file type 50")."""
    out: list[tuple[Path, str]] = []

    def walk(directory: Path, prefix: str) -> None:
        for path in sorted(directory.iterdir()):
            name = f"{prefix}{path.name}"
            real = path.resolve() if path.is_symlink() else path
            if real.is_dir():
                out.append((real, name))
                walk(real, f"{name}/")
            else:
                out.append((real, name))

    walk(onedir, "")
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


PLATFORM_ENTRY = """\
  - selector:
      matchLabels:
        os: {os}
        arch: {arch}
    uri: {uri}
    sha256: {sha}
    files:
    - from: "*"
      to: .
    bin: {bin}
"""


def render_manifest(version: str, archives: dict[str, tuple[str, str]], partial: bool = False) -> str:
    """archives: platform -> (uri, sha256). With `partial` (a local build), the platforms not given
    are left out and the file says so; a published manifest must cover every platform."""
    missing = [p for p in PLATFORMS if p not in archives]
    if missing and not partial:
        raise SystemExit(f"missing archives for {', '.join(missing)}: a krew manifest must cover every platform")
    if not archives:
        raise SystemExit("no archives: a krew manifest needs at least one platform")
    entries = []
    for plat in PLATFORMS:
        if plat not in archives:
            continue
        os_, arch = plat.split("/")
        uri, sha = archives[plat]
        entries.append(PLATFORM_ENTRY.format(os=os_, arch=arch, uri=uri, sha=sha, bin=BIN))
    template = Template((ROOT / "krew" / "hami-place.yaml.tmpl").read_text())
    text = template.substitute(version=f"v{version}", homepage=HOMEPAGE, platforms="".join(entries).rstrip("\n"))
    if missing:
        text = (
            f"# LOCAL BUILD, not for publishing: only {', '.join(p for p in PLATFORMS if p in archives)}. "
            f"{', '.join(missing)} are built by .github/workflows/release.yaml.\n" + text
        )
    return text


def archives_in(directory: Path, version: str = __version__) -> dict[str, Path]:
    """platform -> its default archive in `directory` (named by archive_name), for those present."""
    found = {p: directory / archive_name(p, version) for p in PLATFORMS}
    return {p: path for p, path in found.items() if path.is_file()}


def helm_env(home: Path) -> dict[str, str]:
    """helm's cache, config and data in a throw-away directory, never the user's (as testbed/controlplane/chart.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update({var: str(home / var.lower()) for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")})
    return env


def set_chart_image(values: str, repository: str | None, tag: str) -> str:
    """values.yaml with image.repository (when given) and image.tag set, comments kept. Checked by
    parsing the result: a values.yaml whose image block moved fails here, not in a cluster."""
    import yaml

    found = re.search(r"^image:\n", values, re.M)
    if not found:
        raise SystemExit("chart/values.yaml has no top-level `image:` block")
    start = end = found.end()
    while end < len(values) and (values[end] in " \n"):
        end = values.index("\n", end) + 1
    block = values[start:end]  # the indented lines (and blank ones) under `image:`
    if repository:
        block = re.sub(r"^  repository: .*$", f"  repository: {repository}", block, count=1, flags=re.M)
    block = re.sub(r"^  tag: .*$", f'  tag: "{tag}"', block, count=1, flags=re.M)
    out = values[:start] + block + values[end:]
    image = yaml.safe_load(out)["image"]
    want = {"tag": tag, **({"repository": repository} if repository else {})}
    if any(image.get(k) != v for k, v in want.items()):
        raise SystemExit(f"chart/values.yaml: could not set image {want} (got {image})")
    return out


def package_chart(helm: str, out: Path, version: str = __version__, repository: str | None = None) -> Path:
    """`helm package` of chart/ at `version` (chart version and appVersion), the agent image's tag
    set to it (and its repository, for a registry of another owner). Returns the .tgz."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hami-place-chart-") as tmp:
        chart = Path(tmp) / "hami-place"
        shutil.copytree(ROOT / "chart", chart)
        values = chart / "values.yaml"
        values.write_text(set_chart_image(values.read_text(), repository, version))
        cmd = [helm, "package", str(chart), "--version", version, "--app-version", version, "-d", str(out.resolve())]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=helm_env(Path(tmp) / "home"), check=False)
    if proc.returncode != 0:
        raise SystemExit(f"helm package failed ({proc.returncode}):\n{proc.stderr}")
    return out / f"hami-place-{version}.tgz"


def find_helm(log: Callable[[str], object] = print) -> str:
    """The test bed's helm (built from its pinned module, toolchain/tools/helm), else helm on PATH;
    built (helm alone, about 80 s once) when neither is there and Go is."""
    from toolchain import build

    found = build.locate("helm", build.cache_bin_dir())
    if found is not None:
        return str(found)
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    build.build(build.cache_bin_dir(), ["helm"], log)
    return str(build.cache_bin_dir() / "helm")


def _cmd_archive(args: argparse.Namespace) -> int:
    path = make_archive(args.dist, args.out, args.platform, full=args.full)
    print(f"{path}  sha256 {sha256(path)}  {path.stat().st_size / 2**20:.1f} MiB")
    return 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    paths: dict[str, Path] = archives_in(args.dir) if args.dir else {}
    for spec in args.archive:
        plat, _, path = spec.partition("=")
        if plat not in PLATFORMS or not path:
            raise SystemExit(f"--archive {spec!r}: expected one of {', '.join(PLATFORMS)}=PATH")
        paths[plat] = Path(path)
    archives = {plat: (f"{args.uri_base.rstrip('/')}/{p.name}", sha256(p)) for plat, p in paths.items()}
    text = render_manifest(__version__, archives, partial=args.partial)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(args.out)
    return 0


def _cmd_chart(args: argparse.Namespace) -> int:
    path = package_chart(args.helm or find_helm(), args.out, repository=args.image_repository)
    print(path)
    return 0


def _make_image(out: Path) -> tuple[bool, str]:
    """`make image` (the agent image, with podman), when the Makefile has it and podman is here;
    then release/image.py's `save` writes it into `out` as an OCI archive, where that exists."""
    if not re.search(r"^image:", (ROOT / "Makefile").read_text(), re.M):
        return False, "the Makefile has no `image` target"
    if not shutil.which("podman"):
        return False, "podman is not installed (make image builds with it)"
    proc = subprocess.run(["make", "image"], cwd=ROOT, check=False)
    if proc.returncode != 0:
        return False, f"`make image` failed (exit {proc.returncode}; its output is above)"
    how = "`make image` (podman, this machine's architecture only)"
    saver = ROOT / "release" / "image.py"
    if not saver.is_file():
        return True, f"{how}, in podman's image store (no release/image.py to save it into {out})"
    saved = subprocess.run(
        [sys.executable, "-m", "release.image", "save", "--out", str(out)],
        cwd=ROOT,  # where `release` is importable
        capture_output=True,
        text=True,
        check=False,
    )
    if saved.returncode != 0:
        return True, f"{how}, in podman's image store; saving it into {out} failed: {saved.stderr.strip()}"
    return True, f"{how}: {saved.stdout.strip().splitlines()[-1]}"


def _cmd_local(args: argparse.Namespace) -> int:
    """`make release-all` (after `make release`): everything a release holds that this machine can
    build, into `args.out`, then what was built and what was not, and why."""
    out: Path = args.out
    plat = host_platform()
    built: list[str] = []
    skipped: list[str] = []
    archive = out / archive_name(plat)
    if not archive.is_file():
        raise SystemExit(f"{archive} is missing: run `make release` first (make release-all does)")
    built.append(
        f"plugin archive {plat}: {archive} ({archive.stat().st_size / 2**20:.1f} MiB, sha256 {sha256(archive)})"
    )
    others = [p for p in PLATFORMS if p != plat]
    skipped.append(
        f"plugin archives {', '.join(others)}: PyInstaller builds for its own OS/arch only; "
        "built on native runners by .github/workflows/release.yaml"
    )
    chart = package_chart(find_helm(log=lambda m: print(m, file=sys.stderr)), out)
    built.append(f"chart: {chart} (version and appVersion {__version__}, image tag {__version__})")
    manifest = out / "hami-place.yaml"
    manifest.write_text(
        render_manifest(__version__, {plat: (f"file://{archive.resolve()}", sha256(archive))}, partial=True)
    )
    built.append(
        f"krew manifest: {manifest} ({plat} only, with the archive's sha256; install it with "
        f"kubectl krew install --manifest={manifest} --archive={archive})"
    )
    ok, how = _make_image(out)
    (built if ok else skipped).append(f"agent image: {how}")
    skipped.append(
        "multi-arch agent image (linux/amd64 + linux/arm64), image and chart pushes to ghcr.io, the GitHub "
        "release and its full krew manifest: need Docker buildx, a registry and a tag; done by the release workflow"
    )
    print(f"\nrelease-all, hami-place {__version__}, into {out}/:")
    for line in built:
        print(f"  built:     {line}")
    for line in skipped:
        print(f"  not built: {line}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("archive", help="pack the onedir build into a release archive")
    a.add_argument("--dist", type=Path, default=ROOT / "build" / "dist")
    a.add_argument("--out", type=Path, default=ROOT / "dist")
    a.add_argument("--platform", default=host_platform(), help="os/arch of this build (default: the host)")
    a.add_argument("--full", action="store_true", help="the build carries HiGHS (HAMI_PLACE_EXACT=1): ...-full.tar.gz")
    m = sub.add_parser("manifest", help="render the krew manifest")
    m.add_argument("--uri-base", required=True, help="where the archives are published (a URL prefix, or file://)")
    m.add_argument("--archive", action="append", default=[], metavar="OS/ARCH=PATH")
    m.add_argument("--dir", type=Path, help="take each platform's archive from this directory, by its release name")
    m.add_argument("--partial", action="store_true", help="a local build: leave out the platforms not given")
    m.add_argument("--out", type=Path, default=ROOT / "krew" / "hami-place.yaml")
    c = sub.add_parser("chart", help="helm package the chart at this version, its image tag set to it")
    c.add_argument("--image-repository", help="the agent image's repository (default: chart/values.yaml's)")
    c.add_argument("--helm", help="helm binary (default: the test bed's, else helm on PATH)")
    c.add_argument("--out", type=Path, default=ROOT / "dist")
    loc = sub.add_parser("local", help="make release-all: all that this machine can build, into --out")
    loc.add_argument("--out", type=Path, default=ROOT / "dist")
    args = ap.parse_args(argv)
    commands = {"archive": _cmd_archive, "manifest": _cmd_manifest, "chart": _cmd_chart, "local": _cmd_local}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
