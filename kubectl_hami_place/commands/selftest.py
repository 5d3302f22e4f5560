"""`selftest`: a check that a built binary is whole, offline."""

from __future__ import annotations

import importlib
import io
import time
from contextlib import redirect_stdout

import click

from kubectl_hami_place.group import root_group


@click.command()
def selftest() -> None:
    """Check this build offline: every module imports, and a table renders.

    Imports every command and the Kubernetes layer (urllib3), then renders the shipped example snapshot
    (no cluster is contacted). Exit 0 and one summary line when the build is whole.

    \b
    Examples:
      kubectl hami-place selftest
    """
    root = root_group()
    started = time.perf_counter()
    libraries = {"hami_place_core.kube.config", "urllib3", "yaml", "tabulate"}
    ctx = click.Context(root)
    # Loading each command imports its module (the group loads them lazily, as the binary does).
    commands = [root.get_command(ctx, name) for name in root.list_commands(ctx)]
    modules = sorted({c.callback.__module__ for c in commands if c is not None and c.callback} | libraries)
    for name in modules:
        importlib.import_module(name)
    buf = io.StringIO()
    with redirect_stdout(buf):
        root.main(["inspect", "--snapshot", "example"], standalone_mode=False)
    text = buf.getvalue()
    if "NODE" not in text or "FGD" not in text:
        raise click.ClickException("selftest: the example table did not render as expected")
    nodes = sum(1 for line in text.splitlines() if line.startswith("NODE "))
    took = time.perf_counter() - started
    click.echo(
        f"selftest ok: {len(modules)} modules imported, example rendered ({len(text.splitlines())} lines"
        f"{f', {nodes} nodes' if nodes else ''}) in {took:.2f}s"
    )
