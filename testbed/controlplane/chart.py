"""The Helm chart (chart/) rendered with the test bed's own helm binary (`helm template`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
RELEASE = "gpu-descheduler"


def run_helm(helm: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`helm ARGS` with its cache, config and data in a throw-away directory, never the user's."""
    with tempfile.TemporaryDirectory(prefix="hami-place-helm-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        env.update(
            {var: str(Path(home) / var.lower()) for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
        )
        return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def render_chart(helm: Path, namespace: str, *args: str, release: str = RELEASE) -> list[dict[str, Any]]:
    """`helm template` of the chart into `namespace` with extra `args` (--set, --show-only, ...): its
    documents. A client-only render: `lookup` finds nothing, so the chart generates its TLS afresh."""
    proc = run_helm(helm, "template", release, str(CHART), "-n", namespace, *args)
    if proc.returncode != 0:
        raise RuntimeError(f"helm template {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]
