"""The docs check: every command and flag is in docs/cli.md, every command has examples, and the
README names every command. Pure (no cluster)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from kubectl_hami_place.cli import cli
from release import cli_reference

ROOT = Path(__file__).resolve().parents[2]


CTX = click.Context(cli, info_name="kubectl hami-place")
COMMANDS = [n for n in cli.list_commands(CTX) if not cli.get_command(CTX, n).hidden]  # type: ignore[union-attr]


def test_cli_reference_is_generated_from_the_current_cli() -> None:
    current = (ROOT / "docs" / "cli.md").read_text()
    assert current == cli_reference.render(current), "docs/cli.md is stale: run `make docs`"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_and_flag_is_in_the_reference(name: str) -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    section = doc.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
    cmd = cli.get_command(CTX, name)
    assert cmd is not None
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden:
            assert f"`{p.opts[-1]}`" in section, f"{name}: {p.opts} missing from docs/cli.md"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_help_has_examples(name: str) -> None:
    cmd = cli.get_command(CTX, name)
    assert cmd is not None and "Examples:" in (cmd.help or ""), f"`{name} --help` has no examples"
    examples = (cmd.help or "").split("Examples:", 1)[1]
    assert re.search(rf"kubectl hami-place {name}\b", examples), f"{name}: its examples never run it"


def test_readme_names_every_command_and_links_the_reference() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [n for n in COMMANDS if f"kubectl hami-place {n}" not in readme]
    assert not missing, f"README.md never shows: {missing}"
    assert "docs/cli.md" in readme


def test_the_readme_for_request_examples_run_on_the_shipped_example() -> None:
    """Issue 40: the README's own `--for-request gpus=4,type=A100` failed on the example (no A100
    there). Each request the README shows is planned on the example, and finds room."""
    from click.testing import CliRunner

    specs = re.findall(r"--for-request ([^`\s]+)", (ROOT / "README.md").read_text())
    assert specs
    for spec in specs:
        result = CliRunner().invoke(cli, ["plan", "--snapshot", "example", "--for-request", spec, "-o", "json"])
        assert result.exit_code == 0, (spec, result.output)
        assert '"fits": true' in result.stdout or '"node": "' in result.stdout, (spec, result.stdout[:300])
