"""Structured logs: one JSON object per line, whatever the message contains.

Lines about a placement carry its fields as keys of their own (``placement``, ``reqID``, ``node``,
``pod``, ``phase``; ``policy`` for the autopilot), so a log query can follow one move:
``log.info(..., extra=fields(p))``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

# The structured keys a log call may pass in `extra` (anything else stays out of the JSON).
FIELDS = ("placement", "reqID", "node", "pod", "phase", "policy")


def fields(p: Any, **more: str) -> dict[str, str]:
    """A placement's structured log fields (a hami_place_core.placement.Placement), plus `more`."""
    out = {"placement": p.key, "reqID": p.req_id, "node": p.node}
    pod = p.evict_pod or p.status.bound_pod
    if pod:
        out["pod"] = f"{p.namespace}/{pod}"
    return {**out, **more}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            value = record.__dict__.get(key)
            if value:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
