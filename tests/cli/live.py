"""A namespace served by a running agent, and the plugin binary run against it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.agents.agent_set import AgentSet
from testbed.controlplane.cluster import TestBed
from testbed.data.gpu_nodes import NodeSpec


@dataclass
class Live:
    """A namespace served by a running agent that the CLI reaches through the service proxy."""

    testbed: TestBed
    api: Any
    agents: AgentSet
    ns: str
    targets: list[NodeSpec]
    binary: Path

    def run(
        self, *args: str, kubeconfig: Path | None = None, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args],
            env=self.env(kubeconfig),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
        )

    def popen(self, *args: str, kubeconfig: Path | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.binary), *args],
            env=self.env(kubeconfig),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")}
        env["KUBECONFIG"] = str(kubeconfig or self.testbed.kubeconfig)
        return env
