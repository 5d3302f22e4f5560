"""The plugin binary the end-to-end tests run: the PyInstaller build `make binary` produces (built
once per source change: its inputs' digest is kept next to it), so these tests exercise what users
install, not CliRunner."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "build" / "dist"
BINARY = DIST / "kubectl-hami_place" / "kubectl-hami_place"


def _source_digest() -> str:
    h = hashlib.sha256()
    for base in ("kubectl_hami_place", "hami_place_core", "release"):
        for path in sorted((ROOT / base).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def build_binary() -> Path:
    """`make binary`'s build, skipped when the sources are unchanged since the last one."""
    stamp = DIST / "kubectl-hami_place.source-sha256"
    digest = _source_digest()
    # A build with HiGHS (HAMI_PLACE_EXACT=1 make binary) is not the default one these tests check.
    full = (DIST / "kubectl-hami_place" / "_internal" / "highspy").exists()
    if BINARY.is_file() and stamp.is_file() and stamp.read_text() == digest and not full:
        return BINARY
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level=WARN",
        "--distpath",
        str(DIST),
        "--workpath",
        str(ROOT / "build" / "work"),
        str(ROOT / "release" / "kubectl-hami_place.spec"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "HAMI_PLACE_EXACT"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"PyInstaller failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    stamp.write_text(digest)
    return BINARY
