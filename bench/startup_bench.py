"""Benchmark: cold start of the built plugin binary against kubectl, in the same run.

    .venv/bin/python -m bench.startup_bench [--runs 15] [--binary build/dist/kubectl-hami_place/kubectl-hami_place]

Needs the PyInstaller build (``make binary``) and the test-bed binaries (``make testbed-build``).
Starts a small test bed (3 fake GPU nodes with HAMi's register annotations, the CRD, a few
placements), then times each command as a fresh process, interleaved round-robin so machine noise
hits every command alike. "Cold start" is a new process each run with a warm file cache (the
normal case for a CLI typed twice); the first run of each command is reported apart.

Targets (issue: the kubectl plugin): ``--help`` at most 0.3 s; an API command (inspect, status)
at most 0.3 s more than ``kubectl get nodes``. Both are compared inside this one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.controlplane.cluster import TestBed
from toolchain import build

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--binary", type=Path, default=ROOT / "build/dist/kubectl-hami_place/kubectl-hami_place")
    args = ap.parse_args()
    if not args.binary.is_file():
        raise SystemExit(f"no binary at {args.binary}: run `make binary`")
    kubectl = str(build.ensure_binaries()["kubectl"])
    with tempfile.TemporaryDirectory() as tmp:
        bed = TestBed(Path(tmp)).start()
        try:
            env = {**os.environ, "KUBECONFIG": str(bed.kubeconfig)}
            subprocess.run(
                [kubectl, "apply", "-f", str(ROOT / "crds" / "hamipodplacements.scheduling.hami.placement.com.yaml")],
                env=env,
                check=True,
                capture_output=True,
            )
            subprocess.run(
                [kubectl, "wait", "--for=condition=Established", "crd/hamipodplacements.scheduling.hami.placement.com"],
                env=env,
                check=True,
                capture_output=True,
            )
            b = str(args.binary)
            commands = {
                "kubectl version --client": [kubectl, "version", "--client"],
                "kubectl get nodes": [kubectl, "get", "nodes"],
                "kubectl get hamipodplacements -A": [kubectl, "get", "hamipodplacements", "-A"],
                "hami-place --help": [b, "--help"],
                "hami-place version": [b, "version"],
                "hami-place pin --help": [b, "pin", "--help"],
                "hami-place inspect": [b, "inspect"],
                "hami-place status -A": [b, "status", "-A"],
            }
            first = {name: timed(cmd, env) for name, cmd in commands.items()}
            samples: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(args.runs):
                for name, cmd in commands.items():
                    samples[name].append(timed(cmd, env))
        finally:
            bed.stop()
    med = {n: statistics.median(s) for n, s in samples.items()}
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )
    print(f"runs per command: {args.runs} (interleaved), plus one first run\n")
    print("| command | first run | median | p90 |")
    print("|---|---|---|---|")
    for n, s in samples.items():
        p90 = sorted(s)[max(0, int(len(s) * 0.9) - 1)]
        print(f"| `{n}` | {first[n]:.3f} s | {med[n]:.3f} s | {p90:.3f} s |")
    base = med["kubectl get nodes"]
    print()
    print(
        f"- `--help`: {med['hami-place --help']:.3f} s (target ≤ 0.300 s); "
        f"{med['hami-place --help'] / med['kubectl version --client']:.2f}× `kubectl version --client`"
    )
    for n in ("hami-place inspect", "hami-place status -A"):
        print(
            f"- `{n.split()[1]}`: {med[n] - base:+.3f} s over `kubectl get nodes` (target ≤ +0.300 s); "
            f"ratio {med[n] / base:.2f}×"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
