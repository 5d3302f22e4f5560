"""`completion` and kubectl's hidden `__complete`: shell integration. One module for both, as they
are one feature: the script `completion` prints and the protocol kubectl's plugin completion speaks."""

from __future__ import annotations

import click
from click.shell_completion import ShellComplete, get_completion_class

from kubectl_hami_place.group import root_group

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
    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(root_group(), {}, PROG, COMPLETE_VAR).source())


@click.command(name="__complete", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def cobra_complete(args: tuple[str, ...]) -> None:
    """kubectl's plugin completion protocol (cobra's): candidates, one per line, then `:4`."""
    words, incomplete = list(args[:-1]), (args[-1] if args else "")
    comp = ShellComplete(root_group(), {}, PROG, COMPLETE_VAR)
    for item in comp.get_completions(words, incomplete):
        click.echo(item.value if not item.help else f"{item.value}\t{item.help}")
    click.echo(":4")  # ShellCompDirectiveNoFileComp
