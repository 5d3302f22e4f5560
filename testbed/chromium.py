"""Headless Chromium for the tests that render `plan --report` (tests/cli/test_plan_report.py).

Installing it is toolchain/debian_packages.py's job (its `browser` group, run by `make test` as
root on a fresh Debian machine; docs/testing.md). This module only finds it and runs it; without
one the tests fail under CI=true and skip elsewhere, saying what to install.

``render()`` runs it with every background connection off: on a closed network Chromium's own
requests are refused, and a test must depend on nothing but the file it renders.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ENV = "CHROMIUM"  # a Chromium or Chrome binary to use instead of the one on PATH
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HINT = (
    f"run `python -m toolchain.debian_packages browser` as root (Debian's chromium), or set {ENV} to a Chromium binary"
)

FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root, where the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",  # one screenshot pixel per CSS pixel
)


def find() -> Path | None:
    """$CHROMIUM, else the first Chromium or Chrome on PATH."""
    named = os.environ.get(ENV)
    if named:
        return Path(named) if os.access(named, os.X_OK) else None
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def render(binary: Path, url: str, profile: Path, *args: str, timeout: float = 120) -> str:
    """Chromium's stdout for `url` with these extra flags (e.g. --dump-dom); raises on failure."""
    cmd = [str(binary), *FLAGS, f"--user-data-dir={profile}", *args, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout
