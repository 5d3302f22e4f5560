"""The plugin's command group as the running command sees it, from click's context: `completion`
and `selftest` serve the group (its completion, its self-test) without importing cli.py, which
imports them (the CLI has no import cycle: .importlinter)."""

from __future__ import annotations

import click


def root_group() -> click.Group:
    root = click.get_current_context().find_root().command
    assert isinstance(root, click.Group)
    return root
