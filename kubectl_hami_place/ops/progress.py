"""A progress line on stderr for work that may take a while (`plan` on a large cluster).

Nothing is drawn unless stderr is a terminal, and nothing before DELAY seconds: a quick command,
a pipe, a log file or CI never see it. The line is redrawn in place (a spinner, what is being
done, the seconds so far) by a daemon thread, and erased when the work ends, also on an error or
Ctrl-C, so that what the command prints next starts on a clean line. Stdout is never touched, so
`-o json` and `-o yaml` stay clean even on a terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

DELAY = 1.0  # seconds of silence before the line appears
INTERVAL = 0.1  # seconds between redraws
SPINNER = "-\\|/"  # ASCII: safe on any terminal encoding


def interactive(stream: TextIO) -> bool:
    """A terminal a person watches (a pipe, a file and CI's captured stderr are not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


class Progress:
    """``with Progress("planning") as p: ...``; ``p.label = "..."`` says what is being done now.

    ``started=False`` defers the line until ``start()``: for work that may first need the
    terminal itself (an interactive kubeconfig exec plugin asking for a login)."""

    def __init__(self, label: str, stream: TextIO | None = None, started: bool = True) -> None:
        self.label = label
        self._stream = stream
        self._autostart = started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._drawn = 0  # width of the line on screen now

    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        if self._autostart:
            self.start()
        return self

    def start(self) -> None:
        """Begin (once): after DELAY seconds of the work, the line appears."""
        if self._thread is not None:
            return
        stream = self._stream if self._stream is not None else sys.stderr
        if stream is None or not interactive(stream):
            return
        self._stream = stream
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = max(0.0, DELAY - (time.monotonic() - self._t0))
        if self._stop.wait(wait):
            return
        frame = 0
        while True:
            self._draw(f"{SPINNER[frame % len(SPINNER)]} {self.label} {time.monotonic() - self._t0:.0f}s")
            frame += 1
            if self._stop.wait(INTERVAL):
                return

    def _draw(self, text: str) -> None:
        assert self._stream is not None
        pad = " " * max(0, self._drawn - len(text))  # no escape codes: also right on TERM=dumb
        self._stream.write(f"\r{text}{pad}")
        self._stream.flush()
        self._drawn = len(text)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if self._drawn and self._stream is not None:
                self._stream.write("\r" + " " * self._drawn + "\r")
                self._stream.flush()
                self._drawn = 0
