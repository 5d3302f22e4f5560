"""The agent image, built with podman/buildah from ./Dockerfile without a Docker engine: `make image`.

    python -m release.image build [--base IMAGE] [--tag REF]   # the image (base: see below)
    python -m release.image base [--rebuild]                   # only the Debian base image
    python -m release.image save [--out dist]                  # the built image as an OCI archive

The Dockerfile's base (PYTHON_IMAGE) is, unless --base names another, a Debian bookworm made here
with debootstrap from Debian's own packages (python3, python3-venv, ca-certificates), imported as
localhost/hami-place-base:bookworm: machines of this kind reach Debian's archive and PyPI but no
image registry. The image is tagged as the chart's default reference (chart/values.yaml
image.repository, tag = the chart's appVersion), so `helm install` uses it as it is. Missing tools
(podman, buildah, debootstrap, ...) are installed from Debian when running as root
(toolchain/debian_packages.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from toolchain import debian_packages
from toolchain.podman_flags import host_flags

REPO = Path(__file__).resolve().parents[1]

BASE_IMAGE = "localhost/hami-place-base:bookworm"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
# A TLS-intercepting network's CA is in the host's store: pip in the build trusts what the host does.
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def default_ref() -> str:
    values = yaml.safe_load((REPO / "chart" / "values.yaml").read_text())
    chart = yaml.safe_load((REPO / "chart" / "Chart.yaml").read_text())
    return f"{values['image']['repository']}:{values['image'].get('tag') or chart['appVersion']}"


def run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def image_id(ref: str) -> str:
    """The local image's ID, "" when there is none."""
    proc = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def build_base(rebuild: bool = False) -> str:
    """Debian bookworm with Python, from debootstrap, as a local image (about 50 s and 180 MB)."""
    if image_id(BASE_IMAGE) and not rebuild:
        return BASE_IMAGE
    with tempfile.TemporaryDirectory(prefix="hami-place-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(rootfs), DEBIAN_MIRROR])
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):  # no package caches in the image
            for p in (rootfs / cache).glob("*"):
                if p.is_file():
                    p.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        run(["podman", "import", "--change", 'CMD ["python3"]', "-", BASE_IMAGE], stdin=tar.stdout)
        if tar.wait() != 0:
            raise SystemExit("tar of the debootstrap root failed")
    return BASE_IMAGE


def build(base: str | None, ref: str) -> str:
    python_image = base or build_base()
    before = image_id(ref)
    version = ref.rsplit(":", 1)[-1]
    cmd = ["podman", "build", *host_flags(), "--network", "host", "--build-arg", f"PYTHON_IMAGE={python_image}"]
    cmd += ["--build-arg", f"VERSION={version}"]
    if HOST_CA.is_file():
        cmd += ["--secret", f"id=ca,src={HOST_CA}"]
    run([*cmd, "-t", ref, "-f", str(REPO / "Dockerfile"), str(REPO)])
    # The builder stage's images (the Dockerfile labels them) would pile up with every build.
    run(["podman", "image", "prune", "-f", "--filter", "label=io.hami-place.stage=builder"])
    if before and before != image_id(ref):  # the previous build of this reference, now untagged
        subprocess.run(["podman", "rmi", before], capture_output=True, check=False)
    return ref


def save(ref: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    name = ref.rsplit("/", 1)[-1].replace(":", "_")
    archive = out / f"{name}_linux_{_arch()}.oci.tar"
    archive.unlink(missing_ok=True)
    run(["podman", "save", "--format", "oci-archive", "-o", str(archive), ref])
    return archive


def _arch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m release.image", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the agent image")
    b.add_argument("--base", help="the Python base image (default: a debootstrap-made Debian bookworm)")
    b.add_argument("--tag", default=None, help="the image reference (default: the chart's)")
    sub.add_parser("base", help="build only the Debian base image").add_argument("--rebuild", action="store_true")
    s = sub.add_parser("save", help="write the built image as an OCI archive")
    s.add_argument("--out", type=Path, default=REPO / "dist")
    s.add_argument("--tag", default=None)
    args = ap.parse_args(argv)
    try:
        debian_packages.ensure("image")
    except debian_packages.PackagesMissing as e:
        print(f"image: {e}", file=sys.stderr)
        return 1
    ref = getattr(args, "tag", None) or default_ref()
    try:
        if args.cmd == "base":
            print(build_base(args.rebuild))
        elif args.cmd == "build":
            print(build(args.base, ref))
        else:
            print(save(ref, args.out))
    except subprocess.CalledProcessError as e:
        print(f"image: {' '.join(map(str, e.cmd[:3]))} ... failed with exit code {e.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
