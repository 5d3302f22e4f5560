"""`make demo` end to end: `python -m testbed.demo` in its own state directory (its own test bed,
agent and stand-in), then `--down`.

It proves what the demo claims on screen: the inspect table, the trainer's `pin -w` and the
`move --evict` reaching Completed with progress streamed by the agent (never the watch fallback),
the moved pod's replacement on the target GPU, one more whole GPU free, processes that outlive the
command, a second run that only reports the running demo, and a `--down` that leaves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami_place_core import annotations as ann
from testbed import demo
from testbed.controlplane.ci import unavailable
from testbed.data.gpu_nodes import NodeSpec
from toolchain import build

# hami: the demo runs in both modes (with HAMI_SCHEDULER_BIN the real HAMi allocates its pinned pods)
pytestmark = [pytest.mark.testbed, pytest.mark.hami]

REPO = Path(__file__).resolve().parents[2]
RULE = "=" * 100


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    try:
        return build.ensure_binaries(log=lambda _m: None)
    except build.BuildError as e:
        unavailable(f"test-bed binaries unavailable: {e}")


def _run_demo(state: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")}
    return subprocess.run(
        [sys.executable, "-m", "testbed.demo", "--state-dir", str(state), *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _alive(pid: int) -> bool:
    return demo.pid_alive(pid)


def _sections(out: str) -> dict[str, str]:
    """The demo's output by step banner ("1/6" ... "6/6")."""
    parts = out.split(RULE)
    found: dict[str, str] = {}
    for title, body in zip(parts[1::2], parts[2::2], strict=False):
        found[title.split()[0]] = body
    return found


@pytest.fixture
def demo_dir(binaries: dict[str, Path], tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "demo"
    yield state
    if state.exists():  # whatever happened, stop what the demo left running
        _run_demo(state, "--down", timeout=120)


def test_make_demo_end_to_end_and_down(demo_dir: Path) -> None:
    t0 = time.monotonic()
    result = _run_demo(demo_dir)
    elapsed = time.monotonic() - t0
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    assert demo.FALLBACK_NOTE not in out, out  # progress came from the agent, through the service proxy
    assert "Traceback" not in out, out
    steps = _sections(result.stdout)
    assert list(steps) == ["1/6", "2/6", "3/6", "4/6", "5/6", "6/6", "demo"], list(steps)

    # inspect: the heatmap and the per-GPU table with the cluster summary
    assert "legend:" in steps["3/6"] and "48 GPUs: 34 whole free" in steps["3/6"], steps["3/6"]
    assert "GPU    MODEL" in steps["3/6"] and "whole GPUs free" in steps["3/6"], steps["3/6"]
    # pin -w of the trainer and move --evict each end Completed, streamed as timestamped lines
    for step in ("4/6", "5/6"):
        phases = [line.split()[1] for line in steps[step].splitlines() if line[:4].isdigit() and "T" in line[:11]]
        assert phases and phases[-1] == "Completed", steps[step]
    # the eviction itself can finish before the stream opens, so only later states are certain
    assert "Bound" in steps["4/6"] and "evicts pod" in steps["5/6"], steps["4/6"] + steps["5/6"]
    assert "following the placement object instead" not in result.stderr + result.stdout
    assert "export KUBECONFIG=" in result.stdout and "make demo-down" in result.stdout

    state = json.loads((demo_dir / demo.STATE_FILE).read_text())
    bed = json.loads((demo_dir / "testbed.json").read_text())
    kubeconfig = Path(bed["kubeconfig"])

    # one more whole GPU free after the move (the demo keeps `inspect -o json` before and after it)
    before = json.loads((demo_dir / "before-move.json").read_text())["summary"]["cluster"]["wholeFree"]
    after = json.loads((demo_dir / "after-move.json").read_text())["summary"]["cluster"]["wholeFree"]
    assert after >= before + 1, (before, after)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    live = subprocess.run(
        [str(demo.cli_path()), "inspect", "-o", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["summary"]["cluster"]["wholeFree"] == after

    # the moved pod's replacement runs on the target node and GPU; the source node is empty
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    core: Any = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(demo.NAMESPACE, label_selector=f"app={demo.MOVE_FROM}").items
    running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    assert len(running) == 1 and running[0].metadata.name != state["moved_pod"], [p.metadata.name for p in pods]
    target_gpu = int(demo.MOVE_GPU.split("-")[1])
    assert running[0].spec.node_name == demo.MOVE_NODE
    assert running[0].metadata.annotations[ann.USE_GPU_UUID] == NodeSpec(demo.MOVE_NODE).gpu_uuid(target_gpu)
    on_source = core.list_namespaced_pod(demo.NAMESPACE, field_selector=f"spec.nodeName={state['move_source']}")
    assert [p.metadata.name for p in on_source.items if not p.metadata.deletion_timestamp] == []

    # everything it started outlives the command ...
    # with real HAMi (HAMI_SCHEDULER_BIN) no stand-in process starts and the demo records pid 0
    standin = [int(state["standin_pid"])] if int(state["standin_pid"]) else []
    pids = [int(p) for p in bed["pids"].values()] + [int(state["agent_pid"]), *standin]
    assert all(_alive(p) for p in pids), {p: _alive(p) for p in pids}
    # ... and a second run only reports it
    again = _run_demo(demo_dir, timeout=60)
    assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
    assert f"export KUBECONFIG={kubeconfig}" in again.stdout

    down = _run_demo(demo_dir, "--down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert [p for p in pids if _alive(p)] == []
    assert not demo_dir.exists()
    assert elapsed < 150, f"the demo took {elapsed:.0f}s"
