"""`completion` and `selftest`: shell integration, and a check that a built binary is whole."""

from __future__ import annotations

import importlib
import io
import time
from contextlib import redirect_stdout

import click

PROG = "kubectl-hami_place"
COMPLETE_VAR = "_KUBECTL_HAMI_PLACE_COMPLETE"


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print a shell completion script (bash, zsh, fish).

    The script completes `kubectl-hami_place`. For `kubectl hami-place <TAB>` (kubectl 1.26+),
    put an executable named `kubectl_complete-hami_place` on your PATH that runs
    `kubectl-hami_place __complete "$@"`; the krew package ships it.

    \b
    Examples:
      source <(kubectl hami-place completion bash)
      kubectl hami-place completion zsh > "${fpath[1]}/_kubectl-hami_place"
      kubectl hami-place completion fish > ~/.config/fish/completions/kubectl-hami_place.fish
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(_root(), {}, PROG, COMPLETE_VAR).source())


@click.command(name="__complete", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def cobra_complete(args: tuple[str, ...]) -> None:
    """kubectl's plugin completion protocol (cobra's): candidates, one per line, then `:4`."""
    from click.shell_completion import ShellComplete

    words, incomplete = list(args[:-1]), (args[-1] if args else "")
    comp = ShellComplete(_root(), {}, PROG, COMPLETE_VAR)
    for item in comp.get_completions(words, incomplete):
        click.echo(item.value if not item.help else f"{item.value}\t{item.help}")
    click.echo(":4")  # ShellCompDirectiveNoFileComp


@click.command()
def selftest() -> None:
    """Check this build offline: every module imports, and a table renders.

    Imports every command and the Kubernetes layer (urllib3), then renders the shipped example snapshot
    (no cluster is contacted). Exit 0 and one summary line when the build is whole.

    \b
    Examples:
      kubectl hami-place selftest
    """
    root = _root()
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


def _root() -> click.Group:
    """The plugin's command group, from the running command's context: these commands serve the
    group (its completion, its self-test) without importing the module that defines it."""
    root = click.get_current_context().find_root().command
    assert isinstance(root, click.Group)
    return root
