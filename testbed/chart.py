"""The Helm chart (chart/) rendered with the test bed's own helm binary (`helm template`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "chart"
RELEASE = "gpu-descheduler"


def render_chart(helm: Path, namespace: str, *args: str, release: str = RELEASE) -> list[dict[str, Any]]:
    """`helm template` of the chart into `namespace` with extra `args` (--set, --show-only, ...): its
    documents. A client-only render: `lookup` finds nothing, so the chart generates its TLS afresh."""
    with tempfile.TemporaryDirectory(prefix="hami-place-helm-") as home:
        # helm's own cache/config/data go to a throw-away directory, never the user's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        env.update(
            {var: str(Path(home) / var.lower()) for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
        )
        proc = subprocess.run(
            [str(helm), "template", release, str(CHART), "-n", namespace, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"helm template {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]
