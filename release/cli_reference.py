"""Generate the command reference in docs/cli.md from the CLI itself (`make docs`).

Everything after the marker line is generated: each command's usage, its help text with the
examples, and a table of every flag. tests/cli/test_docs.py fails CI when the committed file
differs from what this prints, so a new command or flag cannot ship undocumented.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

from kubectl_hami_place.cli import cli

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "cli.md"
MARKER = "<!-- generated below by `make docs` (release/cli_reference.py); do not edit by hand -->"


def _flag_row(p: click.Parameter) -> str:
    assert isinstance(p, click.Option)
    names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    if p.is_flag:
        kind = "flag"
    elif isinstance(p.type, click.Choice):
        kind = "|".join(str(c) for c in p.type.choices)
    else:
        kind = p.metavar or p.type.name.upper()
    simple = isinstance(p.default, str | int | float) and not isinstance(p.default, bool)
    default = f"`{p.default}`" if simple and not p.is_flag else ""
    env = f" (env `{p.envvar}`)" if isinstance(p.envvar, str) else ""
    text = (p.help or "").replace("|", "\\|") + env
    return f"| {names} | {kind} | {default} | {text} |"


def reference() -> str:
    ctx = click.Context(cli, info_name="kubectl hami-place")
    out = [MARKER, ""]
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        out += [f"## `{name}`", "", "```", cmd.get_usage(sub).strip(), "```", ""]
        text = inspect.cleandoc(cmd.help or "").replace("\b\n", "")
        prose, _, examples = text.partition("Examples:")
        out += [prose.strip(), ""]
        if examples.strip():
            out += ["Examples:", "", "```sh", inspect.cleandoc(examples), "```", ""]
        options = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
        if options:
            out += ["| flag | value | default | meaning |", "|---|---|---|---|"]
            out += [_flag_row(p) for p in options]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def render(current: str) -> str:
    head = current.split(MARKER, 1)[0] if MARKER in current else current
    return head + reference()


def main() -> int:
    text = render(DOC.read_text())
    if "--check" in sys.argv:
        if DOC.read_text() != text:
            print("docs/cli.md is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
