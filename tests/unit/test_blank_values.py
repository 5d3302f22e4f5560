"""An empty or whitespace value never widens what a command does (issue 40, item 1).

`defrag --for "$POD" --apply` with POD unset ran a cluster-wide defrag; `plan --for-request ""`
printed the whole cluster's plan. Every text option and argument of every command now refuses a
blank value as a usage error (exit 2) before the command runs; this walks all of them, so an option
added later is covered without a new test.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from kubectl_hami_place.cli import COMMANDS, cli


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    return [(name, cli.get_command(ctx, name)) for name in cli.list_commands(ctx)]  # type: ignore[misc]


def _value_params() -> list[Any]:
    """(command, the argv that gives this parameter alone a blank value, its name) for every
    parameter that takes a value."""
    out = []
    for name, cmd in _commands():
        for param in cmd.params:
            if isinstance(param, click.Option) and (param.is_flag or param.count or param.hidden):
                continue
            if isinstance(param, click.Option):
                argv = [param.opts[-1]]
            elif isinstance(param, click.Argument):
                # An argument is reached only after the ones before it: give those a real-looking value.
                before = [p for p in cmd.params if isinstance(p, click.Argument)]
                argv = ["x"] * before.index(param)
            else:
                continue
            out.append(pytest.param(name, argv, param.name, id=f"{name}-{param.name}"))
    return out


PARAMS = _value_params()


def test_the_walk_covers_the_options_of_the_bug() -> None:
    ids = {p.id for p in PARAMS}
    assert {"plan-for_pod", "plan-for_request", "defrag-for_pod", "inspect-namespace", "status-name"} <= ids
    assert {name for name, *_ in (p.values for p in PARAMS)} >= set(COMMANDS) - {"selftest"}


@pytest.mark.parametrize("blank", ["", " ", "\t"])
@pytest.mark.parametrize(("command", "argv", "param"), PARAMS)
def test_a_blank_value_is_a_usage_error(command: str, argv: list[str], param: str, blank: str) -> None:
    result = CliRunner().invoke(cli, [command, *argv, blank], catch_exceptions=False)
    assert result.exit_code == 2, (param, result.output)
    assert result.stdout == ""  # nothing was planned, listed or changed


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--snapshot", "example", "--for-request", ""],
        ["plan", "--snapshot", "example", "--for", "", "--max-moves", "1"],
        ["defrag", "--for", "", "--apply"],
        ["defrag", "--for", "  ", "--apply", "--max-moves", "1"],
        ["inspect", "--snapshot", "example", "-n", ""],
        ["plan", "--snapshot", "example", "--exclude-namespace", ""],
        ["status", "-l", " "],
    ],
)
def test_the_reported_commands_refuse_and_name_the_option(argv: list[str]) -> None:
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "must not be empty or whitespace" in result.output
    assert result.stdout == ""


def test_a_real_value_still_works() -> None:
    result = CliRunner().invoke(cli, ["plan", "--snapshot", "example", "--for-request", "gpus=1", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert '"kind": "HamiRoomPlan"' in result.stdout


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["plan", "--for", ""], "error: Invalid value for '--for': must not be empty or whitespace"),
        (["plan", "--no-such-flag"], "error: No such option '--no-such-flag'"),
        (["no-such-command"], "error: No such command 'no-such-command'"),
        (["pin", "deploy/x", "--node", "n", "--gpu", "gpu-x"], "error: Invalid value for '--gpu'"),
    ],
)
def test_a_usage_error_is_one_line_on_stderr(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's promise: errors are one line (usage errors took four: Usage, Try, blank, Error)."""
    from kubectl_hami_place.cli import main

    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(line) and err.rstrip().endswith("--help')"), err
