"""inspect on the shipped example snapshot: no cluster, 1,213 real nodes."""

from __future__ import annotations

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
