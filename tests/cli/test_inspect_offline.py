"""inspect on the shipped example snapshot: no cluster, 1,213 real nodes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kubectl_hami_place.cli import cli


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False, terminal_width=120)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_heatmap_of_1213_nodes_fits_on_a_screen_or_two(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    lines = run("inspect", "--snapshot", "example", "--heatmap").splitlines()
    body = lines[: lines.index("")]
    assert 40 <= len(body) <= 100  # one line per ~16 nodes at 120 columns
    assert max(len(line) for line in body) <= 120
    assert lines[-1].startswith("1213 nodes, 6212 GPUs: 736 whole free")


def test_table_of_the_example_cluster() -> None:
    out = run("inspect", "--snapshot", "example", "openb-node-0050")
    assert out.startswith("NODE openb-node-0050  Ready")
    assert "GPU    MODEL" in out and "CLUSTER" in out


def test_a_namespace_shows_the_nodes_its_pods_run_on() -> None:
    """Issue 40: `inspect -n nosuchns -o summary` printed all 1,213 nodes (-n accepted, ignored)."""
    result = CliRunner().invoke(cli, ["inspect", "--snapshot", "example", "-n", "nosuchns", "-o", "summary"])
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr.strip() == "no GPU node runs a pod of namespace nosuchns"
    every = run("inspect", "--snapshot", "example", "-o", "summary", "--no-headers").splitlines()
    openb = run("inspect", "--snapshot", "example", "-n", "openb", "-o", "summary", "--no-headers").splitlines()
    assert 0 < len(openb) < len(every)  # the nodes with an openb pod, not the idle ones
    assert run("inspect", "--snapshot", "example", "-A", "-o", "summary", "--no-headers").splitlines() == every


@pytest.mark.parametrize("output", ["json", "yaml", "wide", "summary", "jsonpath={.summary}"])
def test_the_heatmap_is_not_combined_with_another_view(output: str) -> None:
    """Issue 40: `inspect --heatmap -o json` ignored --heatmap."""
    result = CliRunner().invoke(cli, ["inspect", "--snapshot", "example", "--heatmap", "-o", output])
    assert result.exit_code == 2 and "two views of the cluster" in result.output and result.stdout == ""


def test_cancel_refuses_all_namespaces() -> None:
    """Issue 40: `cancel -A` was accepted (and ignored)."""
    result = CliRunner().invoke(cli, ["cancel", "some-placement", "-A"])
    assert result.exit_code == 2 and "name its namespace with -n, not -A" in result.output
