"""Time in policies: Go-style durations, five-field cron expressions, and move windows.

One parser for each, shared by the CLI's flags, the CRD's admission webhook and the autopilot, so a
policy the webhook accepts is one the autopilot reads the same way. Cron follows the classic
(Vixie) cron: minute hour day-of-month month day-of-week, with lists, ranges, steps and names;
when both day fields are restricted, a day matching either one fires (as in cron(8) and
Kubernetes CronJobs). Windows are computed in the policy's IANA time zone, on wall-clock
minutes: a window that starts in a skipped DST hour starts when the clock resumes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class ScheduleError(ValueError):
    """A duration, cron expression or time zone that cannot be used; the message says why."""


def parse_duration(text: str, *, bare_seconds: bool = False) -> float:
    """`90s`, `5m`, `1h30m`, `250ms` as seconds; `bare_seconds` also takes a plain number (`90`)."""
    value = str(text).strip()
    if bare_seconds:
        try:
            seconds = float(value)
        except ValueError:
            pass
        else:
            if seconds < 0:
                raise ScheduleError(f"{text!r} is negative")
            return seconds
    total, num, i = 0.0, "", 0
    while i < len(value):
        ch = value[i]
        if ch.isdigit() or ch == ".":
            num += ch
            i += 1
            continue
        unit = "ms" if value.startswith("ms", i) else ch
        if not num or unit not in _UNITS or num.count(".") > 1:
            raise ScheduleError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
        total += float(num) * _UNITS[unit]
        num, i = "", i + len(unit)
    if num or not value:
        raise ScheduleError(f"{text!r} is not a duration like 30s, 5m or 1h30m (a unit is missing)")
    return total


# ---- cron ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    # 0-7: both 0 and 7 are Sunday, as in cron(5).
    _Field("day-of-week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
# The longest gap between two firings of a satisfiable expression: Feb 29 comes every 4 years,
# or 8 across a skipped leap year (2100); five years of days covers every expression we accept
# within this century, and a bound keeps a search over an impossible one finite.
_SEARCH_DAYS = 5 * 366


def _value(f: _Field, token: str, expr: str) -> int:
    upper = token.upper()
    if upper in f.names:
        return f.low + f.names.index(upper)
    if not token.isdigit():
        raise ScheduleError(f"cron {expr!r}: {f.name} {token!r} is not a number{' or a name' if f.names else ''}")
    n = int(token)
    if not f.low <= n <= f.high:
        raise ScheduleError(f"cron {expr!r}: {f.name} {n} is out of range {f.low}-{f.high}")
    return n


def _parse_field(f: _Field, text: str, expr: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(f"cron {expr!r}: {f.name} step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            lo, hi = f.low, f.high
        elif "-" in base:
            a, _, b = base.partition("-")
            lo, hi = _value(f, a, expr), _value(f, b, expr)
            if lo > hi:
                raise ScheduleError(f"cron {expr!r}: {f.name} range {base!r} runs backwards")
        elif base:
            lo = _value(f, base, expr)
            hi = f.high if step_text else lo  # "5/15" means from 5 to the end, every 15
        else:
            raise ScheduleError(f"cron {expr!r}: {f.name} has an empty entry")
        out.update(range(lo, hi + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class Cron:
    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 folded into 0)
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expr: str) -> Cron:
        fields = str(expr).split()
        if len(fields) != 5:
            raise ScheduleError(
                f"cron {expr!r} has {len(fields)} fields; five are needed: minute hour day-of-month month day-of-week"
            )
        parsed = [_parse_field(f, text, expr) for f, text in zip(_FIELDS, fields, strict=True)]
        cron = cls(
            expr=expr,
            minutes=parsed[0],
            hours=parsed[1],
            days=parsed[2],
            months=parsed[3],
            weekdays=frozenset(d % 7 for d in parsed[4]),
            days_restricted=fields[2] != "*",
            weekdays_restricted=fields[4] != "*",
        )
        if cron.next_after(dt.datetime(2000, 1, 1)) is None:
            raise ScheduleError(f"cron {expr!r} never fires (no such day: check day-of-month against the months)")
        return cron

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    def next_after(self, after: dt.datetime) -> dt.datetime | None:
        """The first firing strictly after `after` (naive wall-clock minutes), or None within the
        search bound (an expression that never fires)."""
        start = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        day = start.date()
        for _ in range(_SEARCH_DAYS):
            if self.day_matches(day):
                for h in sorted(self.hours):
                    for m in sorted(self.minutes):
                        t = dt.datetime.combine(day, dt.time(h, m))
                        if t >= start:
                            return t
            day += dt.timedelta(days=1)
        return None


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ScheduleError(f"unknown time zone {name!r} (an IANA name such as UTC or Europe/Berlin)") from e


# ---- windows ------------------------------------------------------------------------------------
MIN_WINDOW = 60.0
MAX_WINDOW = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Window:
    """Moves are allowed from each firing of `cron` (in `tz`) for `seconds`."""

    cron: Cron
    seconds: float
    tz: ZoneInfo

    @classmethod
    def parse(cls, schedule: str, duration: str, time_zone: str = "UTC") -> Window:
        seconds = parse_duration(duration)
        if not MIN_WINDOW <= seconds <= MAX_WINDOW:
            raise ScheduleError(f"window duration {duration!r} must be between 1m and 168h (7 days)")
        return cls(Cron.parse(schedule), seconds, zone(time_zone))

    def _local(self, t: dt.datetime) -> dt.datetime:
        return t.astimezone(self.tz).replace(tzinfo=None)

    def _aware(self, local: dt.datetime) -> dt.datetime:
        return local.replace(tzinfo=self.tz).astimezone(dt.UTC)

    def state(self, now: dt.datetime) -> tuple[bool, dt.datetime | None]:
        """(open, when it closes) if a window is open at `now` (aware), else (False, when the next
        one opens, or None)."""
        lookback = now - dt.timedelta(seconds=self.seconds)
        closes: dt.datetime | None = None
        t = self.cron.next_after(self._local(lookback) - dt.timedelta(minutes=1))
        while t is not None and self._aware(t) <= now:
            end = self._aware(t) + dt.timedelta(seconds=self.seconds)
            if end > now:
                closes = end if closes is None else max(closes, end)
            t = self.cron.next_after(t)
        if closes is not None:
            return True, closes
        return False, None if t is None else self._aware(t)
