"""The flags podman needs on the development machines, shared by `make image` (release/image.py)
and the image tests (testbed/agents/podman.py).

This kind of machine is a VM whose root lacks CAP_SYS_RESOURCE, with cgroup v1 and v2 mounted side
by side; on an ordinary host no flag is needed.
"""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

CAP_SYS_RESOURCE = 24


def _has_capability(bit: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def _cgroup_v2_controllers_in_hybrid_mode() -> bool:
    unified = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    return unified.is_file() and bool(unified.read_text().split())


def host_flags() -> list[str]:
    """Flags for `podman run` and `podman build` that this host needs, none on an ordinary one.

    - crun refuses a hybrid cgroup layout with controllers on the v2 side ("cgroups in hybrid mode
      not supported"); runc runs there.
    - Without CAP_SYS_RESOURCE the runtime may not raise an rlimit, and podman asks for its defaults
      (nofile 1048576, and nproc above what conmon passes down): "setrlimit RLIMIT_NOFILE: Operation
      not permitted". Limits no higher than the inherited ones are set instead.
    """
    flags: list[str] = []
    if _cgroup_v2_controllers_in_hybrid_mode() and shutil.which("runc"):
        flags += ["--runtime", "runc"]
    if not _has_capability(CAP_SYS_RESOURCE):
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
        flags += [f"--ulimit=nofile={nofile}:{nofile}", "--ulimit=nproc=4096:4096"]
    return flags
