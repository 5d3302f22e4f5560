"""Child-process handling for the test bed: free ports, logged processes, readiness polling."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StartupError(RuntimeError):
    """A component did not become ready; carries the tail of its log."""


class Process:
    """One component: started detached in its own process group, output appended to a log."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.start_with_env(None)

    def start_with_env(self, env: dict[str, str] | None, cwd: Path | None = None) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        log.write(("$ " + " ".join(self.argv) + "\n").encode())
        log.flush()
        # A new session means a kill of the group never reaches pytest, and a Ctrl-C in the
        # terminal never reaches the component half-way through teardown.
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )
        log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if not self.proc or self.proc.poll() is not None:
            return
        stop_pid(self.proc.pid, timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it lingers."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):  # reap our child, so killpg(…, 0) stops seeing a zombie
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def wait_until(what: str, check: Callable[[], bool], proc: Process, timeout: float) -> float:
    """Poll check() until it is true; fail early if the process died. Returns seconds waited."""
    t0 = time.monotonic()
    while True:
        if not proc.alive():
            raise StartupError(f"{proc.name} exited before {what}:\n{proc.log_tail()}")
        try:
            if check():
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001, S110 - any failure just means "not ready yet"
            pass
        if time.monotonic() - t0 > timeout:
            raise StartupError(f"{proc.name}: {what} not reached in {timeout:.0f}s:\n{proc.log_tail()}")
        time.sleep(0.1)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310
            return int(resp.status) == 200
    except urllib.error.URLError:
        return False
