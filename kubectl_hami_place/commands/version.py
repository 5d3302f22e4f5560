"""`version`: the plugin's version. The group adds it eagerly (cli.py): it needs nothing but click."""

from __future__ import annotations

import click

from hami_place_core import __version__


@click.command()
def version() -> None:
    """Print the plugin version.

    \b
    Examples:
      kubectl hami-place version
    """
    click.echo(f"kubectl-hami_place {__version__}")
