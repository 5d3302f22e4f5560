"""The progress line on stderr (kubectl_hami_place/ops/progress.py): only on a terminal, only after
the delay, erased at the end. Pure (a fake terminal stream)."""

from __future__ import annotations

import io
import time

import pytest

from kubectl_hami_place.ops import progress
from kubectl_hami_place.ops.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY", 0.05)
    monkeypatch.setattr(progress, "INTERVAL", 0.01)


def test_a_slow_step_on_a_terminal_shows_a_spinner_and_erases_it(fast: None) -> None:
    tty = Terminal()
    with Progress("reading", stream=tty) as p:
        time.sleep(0.15)
        p.label = "planning"
        time.sleep(0.1)
    out = tty.getvalue()
    assert "reading 0s" in out and "planning 0s" in out
    assert any(f"\r{c} planning" in out for c in progress.SPINNER)
    last = out.rsplit("\r", 2)
    assert last[-1] == "" and last[-2].strip() == "", repr(out[-40:])  # the line is blanked, cursor at its start
    assert "\x1b" not in out  # no escape codes: also right on TERM=dumb


def test_nothing_before_the_delay_nor_off_a_terminal(fast: None) -> None:
    tty = Terminal()
    with Progress("quick", stream=tty):
        pass
    assert tty.getvalue() == ""
    pipe = io.StringIO()
    with Progress("slow", stream=pipe):
        time.sleep(0.15)
    assert pipe.getvalue() == ""


def test_a_deferred_line_starts_only_when_told_and_an_error_still_erases_it(fast: None) -> None:
    tty = Terminal()
    with pytest.raises(RuntimeError), Progress("reading", stream=tty, started=False) as p:
        time.sleep(0.1)
        assert tty.getvalue() == ""  # e.g. an exec plugin may still be asking for a login
        p.start()
        time.sleep(0.1)
        raise RuntimeError("boom")
    out = tty.getvalue()
    assert "reading" in out and out.endswith("\r") and out.rsplit("\r", 2)[-2].strip() == ""
