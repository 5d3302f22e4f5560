"""stdout carries only the requested output (issue 40 item 8): highspy 1.16 prints its banner on
the process's stdout when a model is made, before `plan -o json` prints, so `| jq` broke."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from click.testing import CliRunner

from kubectl_hami_place.quiet import stdout_to_stderr


def test_what_anything_writes_to_stdout_inside_goes_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with stdout_to_stderr():
        os.write(1, b"from C, through fd 1\n")
        print("from Python")
    print("after")
    out, err = capfd.readouterr()
    assert out == "after\n"
    assert "from C, through fd 1" in err and "from Python" in err


def test_a_solver_banner_never_reaches_plan_json(monkeypatch: pytest.MonkeyPatch, capfd: Any) -> None:
    import hami_place_core.planning as planning
    from kubectl_hami_place.cli import cli

    real = planning.plan

    def noisy(*args: Any, **kw: Any) -> Any:  # as highspy 1.16 does when a model is made
        os.write(1, b"Running HiGHS 1.16.0 (git hash: 0000000): Copyright (c) 2025 HiGHS under MIT licence terms\n")
        return real(*args, **kw)

    monkeypatch.setattr(planning, "plan", noisy)
    result = CliRunner().invoke(cli, ["plan", "--snapshot", "example", "--max-moves", "2", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "HamiPlacementPlan"
    out, err = capfd.readouterr()
    assert "Running HiGHS" not in out and "Running HiGHS" in err
