"""Time ``Window.state`` (hami_place_core/schedule.py) against the walk it replaced (issue 39).

    .venv/bin/python -m bench.window_bench                # about 15 s: the old walk is the slow part
    .venv/bin/python -m bench.window_bench --json /tmp/window.json

The old ``state`` took every firing from the lookback on, one ``next_after`` at a time, each
looping over hours x minutes: ``* * * * *`` with a 168h window is 10,080 firings, all on the
agent's event loop at every evaluation. It is copied below as the reference, and both run in the
same process on the same windows and instants; each figure is the best of ``--repeat`` runs
(``time.perf_counter``), the ratio is old / new, and the two answers must be equal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hami_place_core.schedule import Window
from testbed.reference.window_reference import old_state

UTC = dt.UTC
CASES = (  # schedule, duration, zone, now
    ("* * * * *", "168h", "Europe/Berlin", dt.datetime(2026, 12, 6, 12, 0, 30, tzinfo=UTC)),
    ("* * * * *", "168h", "Europe/Berlin", dt.datetime(2026, 3, 30, 12, 0, tzinfo=UTC)),  # a DST change in the week
    ("*/5 * * * MON-FRI", "24h", "America/New_York", dt.datetime(2026, 12, 9, 12, 0, tzinfo=UTC)),  # a Wednesday
    ("*/5 * * * MON-FRI", "24h", "America/New_York", dt.datetime(2026, 12, 6, 12, 0, tzinfo=UTC)),  # a Sunday
    ("0 2 * * *", "2h", "Europe/Berlin", dt.datetime(2026, 12, 6, 1, 30, tzinfo=UTC)),
    ("0 0 29 2 *", "1h", "UTC", dt.datetime(2026, 12, 6, 12, 0, tzinfo=UTC)),
)


# ---- measuring ----------------------------------------------------------------------------------------
def best_seconds(fn: Callable[[], Any], repeat: int, number: int) -> float:
    """The best of `repeat` runs of `number` calls, per call."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - started) / number)
    return best


def measure(schedule: str, duration: str, zone: str, now: dt.datetime, repeat: int) -> dict[str, Any]:
    w = Window.parse(schedule, duration, zone)
    new_answer, old_answer = w.state(now), old_state(w, now)
    if new_answer != old_answer:
        raise SystemExit(f"{schedule} {duration} {zone} at {now}: new {new_answer} != old {old_answer}")
    new = best_seconds(lambda: w.state(now), repeat, 200)
    old = best_seconds(lambda: old_state(w, now), repeat, 1)
    return {
        "window": f"{schedule} for {duration} ({zone})",
        "now": now.isoformat(),
        "open": new_answer[0],
        "oldMs": round(old * 1e3, 3),
        "newMs": round(new * 1e3, 4),
        "ratio": float(f"{old / new:.3g}"),  # above 1: the new state() is faster
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs (default 3)")
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args(argv)
    rows = [measure(*case, args.repeat) for case in CASES]
    report = {"python": sys.version.split()[0], "repeat": args.repeat, "rows": rows}
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
