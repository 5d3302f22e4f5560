"""Time in policies: Go-style durations, five-field cron expressions, and move windows.

One parser for each, shared by the CLI's flags, the CRD's admission webhook and the autopilot, so a
policy the webhook accepts is one the autopilot reads the same way. Cron follows the classic
(Vixie) cron: minute hour day-of-month month day-of-week, with lists, ranges, steps and names;
when both day fields are restricted, a day matching either one fires (as in cron(8) and
Kubernetes CronJobs). Windows are computed in the policy's IANA time zone, on wall-clock
minutes, each firing read with ``fold=0``: in a repeated hour it is the first occurrence, and in a
skipped one it keeps the offset from before the change (02:30 on a night the clocks jump from
02:00 to 03:00 is 02:30 at the old offset, so the window opens at 03:30 by the new clock).

Everything here reads untrusted text (a policy is written by a user): numbers are ASCII digits
only, every length and value is bounded, and every failure is a :class:`ScheduleError`.
"""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

# str.strip() and str.split() would also take Unicode spaces and the \x1c-\x1f separators.
_ASCII_SPACE = " \t\n\r\f\v"
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
# Go's time.ParseDuration spellings, ASCII digits only ("²h" or "٢h" are no durations): str.isdigit
# and float() accept other scripts' digits, "nan", "inf" and "1e400".
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_PART = re.compile(rf"({_NUMBER})(ms|h|m|s)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ms|h|m|s))+")
_BARE = re.compile(rf"-?{_NUMBER}")
# A year: every duration a policy or a flag means fits, and timedelta/datetime arithmetic on it
# cannot overflow (a 31-digit minInterval used to pass and then fail every evaluation).
MAX_DURATION = 366 * 24 * 3600.0
_MAX_DURATION_TEXT = 64
_MAX_CRON_TEXT = 128  # as the CRD's maxLength for window.schedule


class ScheduleError(ValueError):
    """A duration, cron expression or time zone that cannot be used; the message says why."""


def brief_repr(value: object, limit: int = 64) -> str:
    """repr(value), cut to `limit` characters: messages quote what a user wrote, not megabytes of it."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int beyond str()'s digit limit; a deeply nested list
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_duration(seconds: float) -> str:
    """`8784h`, `5m`, `1.5s`: a bound as a user would write it."""
    if seconds and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def parse_duration(text: str, *, bare_seconds: bool = False, maximum: float = MAX_DURATION) -> float:
    """`90s`, `5m`, `1h30m`, `250ms`, `1.5h` as seconds, at most `maximum`; `bare_seconds` also
    takes a plain number of seconds (`90`, `1.5`)."""
    if not isinstance(text, str):
        raise ScheduleError(f"{brief_repr(text)} is not a duration like 30s, 5m or 1h30m (it must be a string)")
    value = text.strip(_ASCII_SPACE)
    if len(value) > _MAX_DURATION_TEXT:
        raise ScheduleError(f"{brief_repr(text)} is too long for a duration (at most {_MAX_DURATION_TEXT} characters)")
    if bare_seconds and _BARE.fullmatch(value):
        if value.startswith("-"):
            raise ScheduleError(f"{brief_repr(text)} is negative")
        seconds = float(value)
    elif _DURATION.fullmatch(value):
        seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(value))
    else:
        missing = " (a unit is missing)" if not value or (_BARE.fullmatch(value) and value[0] != "-") else ""
        raise ScheduleError(f"{brief_repr(text)} is not a duration like 30s, 5m or 1h30m{missing}")
    if seconds > maximum:
        year = " (a year)" if maximum == MAX_DURATION else ""
        raise ScheduleError(f"{brief_repr(text)} is longer than {format_duration(maximum)}{year}")
    return seconds


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
# ASCII digits, and few of them: "²" passes str.isdigit() but not int(), "٢" passes both, and
# int() refuses numbers longer than 4,300 digits. Three digits spell every value ("007" too).
_CRON_NUMBER = re.compile(r"[0-9]{1,3}")
# ASCII white space separates fields (the CRD's \s); str.split() would also split on Unicode spaces.
_CRON_SPACE = re.compile(f"[{_ASCII_SPACE}]+")
_DAY = dt.timedelta(days=1)
_MINUTE = dt.timedelta(minutes=1)


def _value(f: _Field, token: str, expr: str) -> int:
    if token.isascii() and token.upper() in f.names:  # "frı".upper() is "FRI": ASCII names only
        return f.low + f.names.index(token.upper())
    if not _CRON_NUMBER.fullmatch(token):
        what = "a number or a name" if f.names else "a number"
        raise ScheduleError(f"cron {expr!r}: {f.name} {token!r} is not {what} (numbers are 1 to 3 digits 0-9)")
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
            if not _CRON_NUMBER.fullmatch(step_text) or int(step_text) == 0:
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


def _split_cron(expr: object) -> list[str]:
    if not isinstance(expr, str):
        raise ScheduleError(f"cron {brief_repr(expr)} is not a string")
    if len(expr) > _MAX_CRON_TEXT:
        raise ScheduleError(f"cron {brief_repr(expr)} is longer than {_MAX_CRON_TEXT} characters")
    fields = [f for f in _CRON_SPACE.split(expr.strip(_ASCII_SPACE)) if f]
    if len(fields) != 5:
        raise ScheduleError(
            f"cron {expr!r} has {len(fields)} fields; five are needed: minute hour day-of-month month day-of-week"
        )
    return fields


def _next_month(day: dt.date) -> dt.date:
    if day.year == dt.MAXYEAR and day.month == 12:
        return dt.date.max
    return dt.date(day.year + day.month // 12, day.month % 12 + 1, 1)


def _month_before(day: dt.date) -> dt.date:
    """The last day of the month before `day`'s."""
    first = day.replace(day=1)
    return dt.date.min if first == dt.date.min else first - _DAY


def _days_from(day: dt.date, n: int) -> dt.date:
    try:
        return day + dt.timedelta(days=n)
    except OverflowError:
        return dt.date.max if n > 0 else dt.date.min


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
    # Sorted copies, for bisect: the next (or last) firing of a day is two binary searches.
    _minutes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _hours: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_minutes", tuple(sorted(self.minutes)))
        object.__setattr__(self, "_hours", tuple(sorted(self.hours)))

    @classmethod
    def parse(cls, expr: str) -> Cron:
        fields = _split_cron(expr)
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

    def _first_at_or_after(self, hour: int, minute: int) -> dt.time | None:
        """The day's first firing time at or after hour:minute (on a matching day)."""
        if hour in self.hours:
            i = bisect_left(self._minutes, minute)
            if i < len(self._minutes):
                return dt.time(hour, self._minutes[i])
        j = bisect_right(self._hours, hour)
        return dt.time(self._hours[j], self._minutes[0]) if j < len(self._hours) else None

    def _last_at_or_before(self, hour: int, minute: int) -> dt.time | None:
        """The day's last firing time at or before hour:minute (on a matching day)."""
        if hour in self.hours:
            i = bisect_right(self._minutes, minute)
            if i:
                return dt.time(hour, self._minutes[i - 1])
        j = bisect_left(self._hours, hour)
        return dt.time(self._hours[j - 1], self._minutes[-1]) if j else None

    def next_after(self, after: dt.datetime, before: dt.datetime | None = None) -> dt.datetime | None:
        """The first firing strictly after `after` (naive wall-clock minutes), or None within the
        search bound (an expression that never fires) or, when given, at or after `before`."""
        start = after.replace(second=0, microsecond=0) + _MINUTE
        day, earliest = start.date(), start.time()
        end = _days_from(day, _SEARCH_DAYS)
        while day < end and (before is None or day <= before.date()):
            if day.month not in self.months:  # a whole month skipped at once
                day, earliest = _next_month(day), dt.time()
                continue
            if self.day_matches(day) and (t := self._first_at_or_after(earliest.hour, earliest.minute)):
                found = dt.datetime.combine(day, t)
                return found if before is None or found < before else None
            day, earliest = day + _DAY, dt.time()
        return None

    def prev_at_or_before(self, at: dt.datetime, not_before: dt.datetime | None = None) -> dt.datetime | None:
        """The last firing at or before `at` (naive wall-clock minutes), or None within the search
        bound or, when given, before `not_before`: next_after's mirror."""
        end = at.replace(second=0, microsecond=0)
        day, latest = end.date(), end.time()
        stop = _days_from(day, -_SEARCH_DAYS)
        while day > stop and (not_before is None or day >= not_before.date()):
            if day.month not in self.months:
                day, latest = _month_before(day), dt.time(23, 59)
                continue
            if self.day_matches(day) and (t := self._last_at_or_before(latest.hour, latest.minute)):
                found = dt.datetime.combine(day, t)
                return found if not_before is None or found >= not_before else None
            day, latest = _days_from(day, -1), dt.time(23, 59)
        return None


# IANA names: letters, digits, "_", "+", "-", in "/"-separated parts (Etc/GMT+5, America/Port-au-Prince).
# No "." at all (so no ".."), no leading "/": a name is never a path out of the zone database.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
_MAX_ZONE_NAME = 64


def zone(name: str) -> ZoneInfo:
    unknown = f"unknown time zone {brief_repr(name)} (an IANA name such as UTC or Europe/Berlin)"
    if not isinstance(name, str) or len(name) > _MAX_ZONE_NAME or not _ZONE_NAME.fullmatch(name):
        raise ScheduleError(unknown)
    try:
        return ZoneInfo(name)
    except Exception as e:  # ZoneInfoNotFoundError, ValueError, OSError (ENAMETOOLONG), a corrupt file
        raise ScheduleError(unknown) from e


# ---- windows ------------------------------------------------------------------------------------
MIN_WINDOW = 60.0
MAX_WINDOW = 7 * 24 * 3600.0
# Offsets are probed this far apart to find where a zone's offset changes. The closest two
# transitions in the tz database are 95 hours apart (Africa/Freetown, 1939: measured over every
# zone of this Python's zoneinfo data), so a probe every hour cannot miss a change and its
# reversal; a single change is found to the minute by bisection.
_PROBE = dt.timedelta(hours=1)
_Stretch = tuple[dt.datetime, dt.datetime, dt.timedelta]  # [lo, hi) in wall-clock minutes, and its UTC offset


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
            raise ScheduleError(f"window duration {brief_repr(duration)} must be between 1m and 168h (7 days)")
        return cls(Cron.parse(schedule), seconds, zone(time_zone))

    def _local(self, t: dt.datetime) -> dt.datetime:
        return t.astimezone(self.tz).replace(tzinfo=None)

    def _aware(self, local: dt.datetime) -> dt.datetime:
        return local.replace(tzinfo=self.tz).astimezone(dt.UTC)

    def state(self, now: dt.datetime) -> tuple[bool, dt.datetime | None]:
        """(open, when it closes) if a window is open at `now` (aware), else (False, when the next
        one opens, or None).

        The firings from the lookback on are taken in wall-clock order up to the first that opens
        after `now`; open if the latest opening among them is less than `seconds` ago. Within a
        stretch of constant UTC offset, opening times grow with wall-clock times, so one backward
        and one forward search per stretch replace walking every firing (10,080 for `* * * * *`
        over 168h)."""
        if now.tzinfo is None:
            raise TypeError("Window.state needs an aware datetime")
        lookback = now - dt.timedelta(seconds=self.seconds)
        start = self._local(lookback).replace(second=0, microsecond=0, fold=0)
        now_utc = now.astimezone(dt.UTC).replace(tzinfo=None)
        # A firing at or after `end` opens after now whatever its offset (|utcoffset| < 24h).
        end = max(start, now_utc.replace(second=0, microsecond=0) + _DAY + _MINUTE)
        latest: dt.datetime | None = None  # the latest opening (UTC) at or before now
        # The day the search for the next firing counts its bound from, as it did when firings were
        # walked one by one: the answer near the bound (Feb 29 across 2100) stays the same.
        search_from = start.date()
        for lo, hi, offset in self._stretches(start, end):
            limit = now_utc + offset  # in this stretch, a firing opens at or before now iff it is <= limit
            last = self.cron.prev_at_or_before(min(limit, hi - _MINUTE), not_before=lo)
            if last is not None:
                opened = self._aware(last)
                latest = opened if latest is None else max(latest, opened)
                search_from = (last + _MINUTE).date()
            first = self.cron.next_after(max(limit, lo - _MINUTE), before=hi)
            if first is not None:
                return self._answer(now, latest, first, search_from)
        return self._answer(now, latest, self.cron.next_after(end - _MINUTE), search_from)

    def _answer(
        self, now: dt.datetime, latest: dt.datetime | None, nxt: dt.datetime | None, search_from: dt.date
    ) -> tuple[bool, dt.datetime | None]:
        if latest is not None and latest + dt.timedelta(seconds=self.seconds) > now:
            return True, latest + dt.timedelta(seconds=self.seconds)
        if nxt is None or (nxt.date() - search_from).days >= _SEARCH_DAYS:
            return False, None  # beyond the search bound of the firing before it
        return False, self._aware(nxt)

    def _stretches(self, start: dt.datetime, end: dt.datetime) -> Iterator[_Stretch]:
        """[lo, hi) wall-clock stretches covering [start, end), each with the one UTC offset its
        minutes are read with (fold=0); bounds are whole minutes."""
        lo, offset = start, self._offset(start)
        probe = start
        while probe < end:
            nxt = min(probe + _PROBE, end)
            if self._offset(nxt) == offset:
                probe = nxt
                continue
            change = self._first_change(probe, nxt, offset)
            yield lo, change, offset
            lo, offset, probe = change, self._offset(change), change
        if lo < end:
            yield lo, end, offset

    def _first_change(self, same: dt.datetime, other: dt.datetime, offset: dt.timedelta) -> dt.datetime:
        """The first minute in (same, other] whose offset is not `offset`; `other`'s is not."""
        while other - same > _MINUTE:
            mid = same + _MINUTE * ((other - same) // _MINUTE // 2)
            if self._offset(mid) == offset:
                same = mid
            else:
                other = mid
        return other

    def _offset(self, local: dt.datetime) -> dt.timedelta:
        return self.tz.utcoffset(local) or dt.timedelta()
