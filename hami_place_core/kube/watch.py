"""The one watch-stream decoder: bytes as they arrive -> lines -> events.

The API server sends one JSON event per line, but a transport hands over chunks that may end in
the middle of a line (or hold several). :class:`Lines` keeps the partial tail between chunks.
:func:`decode_event` turns a line into an event; an ``ERROR`` event carries a ``Status`` and is
raised as the typed error for its code, so a ``410`` becomes :class:`~.errors.Gone` whether it
came as the response's status or as an event inside a stream that started fine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from hami_place_core.kube import errors


class Lines:
    """Split a byte stream into lines; a chunk may end mid-line. Used for watches and for SSE."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines completed by this chunk (without their ``\\n``)."""
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        return lines

    def rest(self) -> list[bytes]:
        """The last line when the stream ended without a newline, if any."""
        rest, self._pending = self._pending, b""
        return [rest] if rest else []


def lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    buf = Lines()
    for chunk in chunks:
        yield from buf.feed(chunk)
    yield from buf.rest()


def decode_event(line: bytes | str) -> dict[str, Any] | None:
    """One watch event, or None for a blank (keep-alive) line.

    Raises the typed error of an ``ERROR`` event (``Gone`` for 410: list again), and ValueError
    for a line that is not a JSON object."""
    if not line.strip():
        return None
    event = json.loads(line)
    if not isinstance(event, dict):
        raise ValueError(f"not a watch event: {str(line)[: errors.TEXT_MAX]}")
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise errors.from_status(int(status.get("code") or 500), json.dumps(status), "watch failed")
    return event


def events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The events of a watch stream given as raw chunks (the sync transports' shape)."""
    for line in lines(chunks):
        event = decode_event(line)
        if event is not None:
            yield event
