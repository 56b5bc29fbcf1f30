"""The cron walk against cronsim: ``*/5 * * * *`` over 35 days (10,080 ticks), in UTC and
in Europe/London (a DST change inside), the walk's caches cleared before each of five
repeats, the best of them.

    python -m bench.cron_walk

Not part of ``make bench`` (no database, a second's work): it is why scheduling/cron.py
does not delegate to cronsim. It prints both figures, the ratio, and whether the ticks
are the same; it exits 1 if they are not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

from scheduling import cron

EXPRESSION = "*/5 * * * *"
START = datetime(2026, 10, 1, tzinfo=UTC)
END = START + timedelta(days=35)


def walk(zone: str) -> list[datetime]:
    # Cold: nothing parsed or DST answer remembered from a previous repeat (the zone
    # itself stays loaded, as ZoneInfo keeps it for cronsim).
    for name in set(dir(cron)) - {"zone", "_zone_names"}:
        clear = getattr(getattr(cron, name), "cache_clear", None)
        if clear is not None:
            clear()
    return cron.ticks_between(EXPRESSION, zone, START, END)


def reference(zone: str) -> list[datetime]:
    ticks: list[datetime] = []
    for tick in CronSim(EXPRESSION, START.astimezone(ZoneInfo(zone))):
        if tick.astimezone(UTC) > END:
            return ticks
        ticks.append(tick.astimezone(UTC))
    return ticks


def best(fn: Callable[[str], list[datetime]], zone: str) -> tuple[float, list[datetime]]:
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        ticks = fn(zone)
        timings.append(time.perf_counter() - started)
    return min(timings), ticks


def main() -> int:
    same = True
    for zone in ("UTC", "Europe/London"):
        ours, ticks = best(walk, zone)
        theirs, expected = best(reference, zone)
        same = same and ticks == expected
        print(
            f"{zone:<14} {len(ticks):,} ticks: scheduling.cron {ours * 1000:.1f} ms, "
            f"cronsim {theirs * 1000:.1f} ms, ratio {theirs / ours:.0f} x, same ticks: {ticks == expected}"
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
