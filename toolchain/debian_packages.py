"""Debian packages some test tiers and `make image` run, installed once when missing.

The machines this project is developed and tested on are Debian bookworm, as root, with Debian's
archive reachable but nothing else preinstalled: podman/buildah (and runc) to build and run the agent image
without a Docker engine, debootstrap to make its base image from Debian's own packages, umoci and
skopeo to read an image back, and chromium to render `plan --report` files. One place installs
them (`make testbed-build`, `make image`), so a fresh machine gets the same tools as CI.

    python -m toolchain.debian_packages image browser     # install what is missing, say what was done
    python -m toolchain.debian_packages --strict image    # and exit 1 if that cannot be done

Without --strict (`make testbed-build`) a machine that cannot install them (not root) only warns:
the tests that need a tool then say which (and fail under CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# group -> (package, the command it provides: how we tell it is installed)
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "image": (
        ("podman", "podman"),
        ("buildah", "buildah"),
        ("crun", "crun"),
        ("runc", "runc"),  # where crun refuses the cgroup layout (testbed/agents/podman.py host_flags)
        ("debootstrap", "debootstrap"),
        ("umoci", "umoci"),
        ("skopeo", "skopeo"),
    ),
    "browser": (("chromium", "chromium"),),
}


class PackagesMissing(RuntimeError):
    """A package is missing and cannot be installed here (not root, or apt failed)."""


def missing(*groups: str) -> list[str]:
    return [pkg for g in groups for pkg, cmd in GROUPS[g] if shutil.which(cmd) is None]


def ensure(*groups: str) -> list[str]:
    """Install the groups' missing packages with apt-get; return what was installed."""
    todo = missing(*groups)
    if not todo:
        return []
    apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *todo]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PackagesMissing(f"missing {', '.join(todo)}: run as root on Debian: {' '.join(apt)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # A fresh machine may never have fetched the package lists.
    for cmd in (["apt-get", "update", "-q"], apt):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
        if proc.returncode != 0:
            raise PackagesMissing(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    still = missing(*groups)
    if still:
        raise PackagesMissing(f"installed {', '.join(todo)} but {', '.join(still)} is still not on PATH")
    return todo


def main(argv: list[str]) -> int:
    strict = "--strict" in argv
    groups = [a for a in argv if a != "--strict"] or sorted(GROUPS)
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        print(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(sorted(GROUPS))}", file=sys.stderr)
        return 2
    try:
        done = ensure(*groups)
    except PackagesMissing as e:
        print(f"debian packages: {'' if strict else 'warning: '}{e}", file=sys.stderr)
        return 1 if strict else 0
    print(f"debian packages: installed {', '.join(done)}" if done else "debian packages: all present")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
