"""Time stamps of placement status fields: the agent's own fixed-width RFC 3339 format.

Status writes themselves live in agent/transitions.py, the only module that writes a status.
"""

from __future__ import annotations

import datetime as dt


def now_rfc3339(offset_seconds: float = 0) -> str:
    t = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def is_past(value: str | None, now: str | None = None) -> bool:
    """Whether an RFC 3339 time is reached. The agent's own "%Y-%m-%dT%H:%M:%SZ" stamps compare as
    strings, so the hot path never parses (strptime dominated a 2,000-placement profile)."""
    if not value:
        return False
    now = now or now_rfc3339()
    if len(value) == 20 and value.endswith("Z"):
        return value <= now
    parsed = parse_rfc3339(value)
    return parsed is not None and dt.datetime.now(dt.UTC) >= parsed


def parse_rfc3339(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
