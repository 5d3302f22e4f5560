"""Decoding the fields of a HamiDefragPolicy: the error every policy check raises and the typed
readers the policy parser (defrag_policy.py) and each trigger module (triggers/) share, so a field
reads the same way wherever it is declared. Strict and bounded: nothing a crafted object holds
reaches arithmetic as a huge number or leaves as anything but a PolicyError."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_place_core.schedule import ScheduleError, brief_repr, parse_duration

INT32 = (-(2**31), 2**31 - 1)  # maxPriority: Kubernetes pod priorities are int32


class PolicyError(ValueError):
    """A policy the autopilot cannot follow; the message names the field and the problem."""


def mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where} must be an object")
    return value


def integer(value: object, where: str, default: int, low: int = 0, high: int = INT32[1]) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(f"{where} must be an integer, got {brief_repr(value)}")
    # brief_repr, not str(): str() refuses an int of more than 4,300 digits
    if value < low:
        raise PolicyError(f"{where} must be at least {low}, got {brief_repr(value)}")
    if value > high:
        raise PolicyError(f"{where} must be at most {high}, got {brief_repr(value)}")
    return value


def duration(value: object, where: str, default: float | None) -> float | None:
    if value is None:
        return default
    if not isinstance(value, str):
        raise PolicyError(f"{where} must be a duration such as 90s, 5m or 1h30m, got {brief_repr(value)}")
    try:
        return parse_duration(value)
    except ScheduleError as e:
        raise PolicyError(f"{where}: {e}") from None
