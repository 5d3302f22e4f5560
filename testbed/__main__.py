"""Human entry point: ``python -m testbed build|up|down|env|status``.

``up`` starts the control plane detached and prints the kubeconfig path; the processes keep
running after this command returns, until ``down``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from testbed.controlplane.cluster import TestBed, down, load_state, save_state
from testbed.controlplane.processes import StartupError
from testbed.data.gpu_nodes import MODELS, uniform_nodes
from toolchain import build


def default_dir() -> Path:
    return build.cache_root() / "testbed-run"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir", type=Path, default=default_dir(), help="state and log directory (default: %(default)s)"
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build or locate the binaries and print their paths")
    up = sub.add_parser("up", help="start the test bed in the background")
    up.add_argument("--nodes", type=int, default=3, help="fake GPU nodes (default: %(default)s)")
    up.add_argument("--gpus", type=int, default=4, help="GPUs per node (default: %(default)s)")
    up.add_argument("--model", choices=sorted(MODELS), default="a100", help="GPU model (default: %(default)s)")
    sub.add_parser("down", help="stop the test bed and delete its state")
    sub.add_parser("env", help="print 'export KUBECONFIG=…' for a running test bed")
    sub.add_parser("status", help="print the running test bed's state as JSON")
    args = parser.parse_args(argv)

    try:
        if args.cmd == "build":
            for name, path in build.ensure_binaries(log=lambda m: print(m, file=sys.stderr)).items():
                print(f"{name}\t{path}")
            return 0
        if args.cmd == "up":
            if load_state(args.dir):
                print(f"a test bed is already running (state in {args.dir}); run 'down' first", file=sys.stderr)
                return 1
            shutil.rmtree(args.dir, ignore_errors=True)  # leftovers of a failed start: fresh etcd, fresh logs
            t0 = time.monotonic()
            bed = TestBed(workdir=args.dir, nodes=uniform_nodes(args.nodes, args.gpus, MODELS[args.model]))
            bed.start()
            save_state(bed)
            print(f"test bed up in {time.monotonic() - t0:.1f}s; logs in {bed.log_dir}", file=sys.stderr)
            print(bed.kubeconfig)
            return 0
        if args.cmd == "down":
            if not down(args.dir):
                print(f"no test bed state in {args.dir}", file=sys.stderr)
                return 1
            return 0
        state = load_state(args.dir)
        if not state:
            print(f"no test bed running (no state in {args.dir}); run 'up' first", file=sys.stderr)
            return 1
        if args.cmd == "env":
            print(f"export KUBECONFIG={state['kubeconfig']}")
        else:
            print(json.dumps(state, indent=2))
        return 0
    except (build.BuildError, StartupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
