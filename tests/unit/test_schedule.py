"""Durations, cron expressions and move windows (hami_place_core/schedule.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from hami_place_core.schedule import Cron, ScheduleError, Window, parse_duration

UTC = dt.UTC


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25), ("1.5h", 5400.0), ("0s", 0.0)],
)
def test_durations_read_as_go_spells_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "m5", "1.2.3s", "h"])
def test_bad_durations_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(ScheduleError, match="not a duration"):
        parse_duration(text)


def test_bare_seconds_only_where_asked_and_never_negative() -> None:
    assert parse_duration("90", bare_seconds=True) == 90.0
    with pytest.raises(ScheduleError, match="negative"):
        parse_duration("-5", bare_seconds=True)


def test_cron_fields_lists_ranges_steps_and_names() -> None:
    c = Cron.parse("*/15 2-4 * JAN,mar MON-FRI")
    assert c.minutes == {0, 15, 30, 45} and c.hours == {2, 3, 4} and c.months == {1, 3}
    assert c.weekdays == {1, 2, 3, 4, 5}
    assert Cron.parse("5/20 * * * 7").minutes == {5, 25, 45}
    assert Cron.parse("0 0 * * 7").weekdays == {0}  # 7 is Sunday, as 0


def test_next_firing() -> None:
    c = Cron.parse("30 2 * * *")
    assert c.next_after(dt.datetime(2026, 12, 6, 1, 0)) == dt.datetime(2026, 12, 6, 2, 30)
    assert c.next_after(dt.datetime(2026, 12, 6, 2, 30)) == dt.datetime(2026, 12, 7, 2, 30)  # strictly after


def test_both_day_fields_restricted_fire_on_either_as_cron_does() -> None:
    c = Cron.parse("0 0 1 * MON")  # the 1st of the month, and every Monday
    assert c.day_matches(dt.date(2026, 12, 1))  # a Tuesday, the 1st
    assert c.day_matches(dt.date(2026, 12, 7))  # a Monday
    assert not c.day_matches(dt.date(2026, 12, 8))


def test_feb_29_fires_in_leap_years_only() -> None:
    c = Cron.parse("0 0 29 2 *")
    assert c.next_after(dt.datetime(2026, 12, 6)) == dt.datetime(2028, 2, 29)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6 *", "never fires"),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * FUN", "day-of-week 'FUN' is not a number or a name"),
        ("0 0 5-1 * *", "runs backwards"),
        ("*/0 * * * *", "step '0' must be a positive number"),
        ("0 0 * *", "has 4 fields; five are needed"),
        ("0 0 1,,2 * *", "empty entry"),
    ],
)
def test_bad_cron_expressions_are_refused_precisely(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        Cron.parse(expr)


def test_window_open_and_closed_in_its_time_zone() -> None:
    w = Window.parse("0 2 * * *", "2h", "Europe/Berlin")  # 02:00-04:00 Berlin = 01:00-03:00 UTC in winter
    is_open, closes = w.state(dt.datetime(2026, 12, 6, 1, 30, tzinfo=UTC))
    assert is_open and closes == dt.datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
    is_open, opens = w.state(dt.datetime(2026, 12, 6, 3, 0, tzinfo=UTC))
    assert not is_open and opens == dt.datetime(2026, 12, 7, 1, 0, tzinfo=UTC)
    is_open, opens = w.state(dt.datetime(2026, 12, 6, 0, 59, tzinfo=UTC))
    assert not is_open and opens == dt.datetime(2026, 12, 6, 1, 0, tzinfo=UTC)


def test_window_across_midnight_and_overlapping_firings() -> None:
    w = Window.parse("0 23 * * *", "3h")
    assert w.state(dt.datetime(2026, 12, 7, 1, 0, tzinfo=UTC)) == (True, dt.datetime(2026, 12, 7, 2, 0, tzinfo=UTC))
    every = Window.parse("*/10 * * * *", "15m")  # windows overlap: open all the time
    assert every.state(dt.datetime(2026, 12, 7, 1, 7, tzinfo=UTC))[0]


@pytest.mark.parametrize(
    ("schedule", "duration", "zone", "message"),
    [
        ("0 2 * * *", "30s", "UTC", "between 1m and 168h"),
        ("0 2 * * *", "200h", "UTC", "between 1m and 168h"),
        ("0 2 * * *", "2h", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("0 2 30 2 *", "2h", "UTC", "never fires"),
    ],
)
def test_bad_windows_are_refused(schedule: str, duration: str, zone: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        Window.parse(schedule, duration, zone)
