"""Release packaging: the binary's archive, and the krew manifest rendered from its template.

    python release/release.py archive [--dist build/dist] [--out dist]
    python release/release.py manifest --uri-base URL --archive linux/amd64=dist/x.tar.gz ... \
        [--out krew/hami-place.yaml]

`archive` packs the PyInstaller onedir build with LICENSE and the kubectl completion helper into
`kubectl-hami_place_<version>_<os>_<arch>.tar.gz` (flat: the binary at the top). `manifest`
fills in krew/hami-place.yaml.tmpl with each platform's uri and sha256; every platform of
PLATFORMS must be given, so a manifest never ships with a hole.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import tarfile
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hami_place_core import __version__  # noqa: E402

PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
BIN = "kubectl-hami_place"
HOMEPAGE = "https://github.com/hami-place/hami-place"


def host_platform() -> str:
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{sys.platform}/{arch}"


def archive_name(plat: str, version: str = __version__) -> str:
    os_, arch = plat.split("/")
    return f"{BIN}_{version}_{os_}_{arch}.tar.gz"


def make_archive(dist: Path, out: Path, plat: str) -> Path:
    onedir = dist / BIN
    if not (onedir / BIN).is_file():
        raise SystemExit(f"no PyInstaller build at {onedir}; run `make binary` first")
    out.mkdir(parents=True, exist_ok=True)
    target = out / archive_name(plat)

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


def render_manifest(version: str, archives: dict[str, tuple[str, str]]) -> str:
    """archives: platform -> (uri, sha256)."""
    missing = [p for p in PLATFORMS if p not in archives]
    if missing:
        raise SystemExit(f"missing archives for {', '.join(missing)}: a krew manifest must cover every platform")
    entries = []
    for plat in PLATFORMS:
        os_, arch = plat.split("/")
        uri, sha = archives[plat]
        entries.append(PLATFORM_ENTRY.format(os=os_, arch=arch, uri=uri, sha=sha, bin=BIN))
    template = Template((ROOT / "krew" / "hami-place.yaml.tmpl").read_text())
    return template.substitute(version=f"v{version}", homepage=HOMEPAGE, platforms="".join(entries).rstrip("\n"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("archive", help="pack the onedir build into a release archive")
    a.add_argument("--dist", type=Path, default=ROOT / "build" / "dist")
    a.add_argument("--out", type=Path, default=ROOT / "dist")
    a.add_argument("--platform", default=host_platform(), help="os/arch of this build (default: the host)")
    m = sub.add_parser("manifest", help="render the krew manifest")
    m.add_argument("--uri-base", required=True, help="where the archives are published (a URL prefix, or file://)")
    m.add_argument("--archive", action="append", default=[], metavar="OS/ARCH=PATH")
    m.add_argument("--out", type=Path, default=ROOT / "krew" / "hami-place.yaml")
    args = ap.parse_args(argv)
    if args.cmd == "archive":
        path = make_archive(args.dist, args.out, args.platform)
        print(f"{path}  sha256 {sha256(path)}")
        return 0
    archives: dict[str, tuple[str, str]] = {}
    for spec in args.archive:
        plat, _, path = spec.partition("=")
        if plat not in PLATFORMS or not path:
            raise SystemExit(f"--archive {spec!r}: expected one of {', '.join(PLATFORMS)}=PATH")
        p = Path(path)
        archives[plat] = (f"{args.uri_base.rstrip('/')}/{p.name}", sha256(p))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_manifest(__version__, archives))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
