"""The move-window algorithm ``Window.state`` replaced (issue 39), kept as the reference that the
unit tests (tests/unit/test_schedule.py) and the benchmark (bench/window_bench.py) compare the
new one with: every firing from the lookback on, one next-firing search (a loop over hours x
minutes per day) at a time. Written against Cron's parsed fields only, not its methods, so it
stays the old algorithm whatever the new one becomes."""

from __future__ import annotations

import datetime as dt

from hami_place_core.schedule import Cron, Window


def _day_matches(c: Cron, day: dt.date) -> bool:
    if day.month not in c.months:
        return False
    in_month = day.day in c.days
    in_week = (day.isoweekday() % 7) in c.weekdays
    if c.days_restricted and c.weekdays_restricted:
        return in_month or in_week
    return in_month and in_week


def old_next_after(c: Cron, after: dt.datetime) -> dt.datetime | None:
    start = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    day = start.date()
    for _ in range(5 * 366):
        if _day_matches(c, day):
            for h in sorted(c.hours):
                for m in sorted(c.minutes):
                    t = dt.datetime.combine(day, dt.time(h, m))
                    if t >= start:
                        return t
        day += dt.timedelta(days=1)
    return None


def old_state(w: Window, now: dt.datetime) -> tuple[bool, dt.datetime | None]:
    def local(t: dt.datetime) -> dt.datetime:
        return t.astimezone(w.tz).replace(tzinfo=None)

    def aware(t: dt.datetime) -> dt.datetime:
        return t.replace(tzinfo=w.tz).astimezone(dt.UTC)

    lookback = now - dt.timedelta(seconds=w.seconds)
    closes: dt.datetime | None = None
    t = old_next_after(w.cron, local(lookback) - dt.timedelta(minutes=1))
    while t is not None and aware(t) <= now:
        end = aware(t) + dt.timedelta(seconds=w.seconds)
        if end > now:
            closes = end if closes is None else max(closes, end)
        t = old_next_after(w.cron, t)
    if closes is not None:
        return True, closes
    return False, None if t is None else aware(t)
