"""Business weeks: Monday 00:00 to the next Monday 00:00 in a restaurant's own zone.

Each week is converted to UTC bounds once, here, and every query compares stored UTC
instants with those bounds. A week in which the zone changes its clocks therefore lasts
167 or 169 hours, and an order delivered in a shifted or repeated hour falls in exactly
one week. The bounds are computed per zone (there are few zones and many restaurants),
so a payout run needs one list of weeks per zone, not one per restaurant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class BusinessWeek:
    timezone: str
    week_start_local: date  # the local Monday
    period_start: datetime  # UTC, inclusive
    period_end: datetime  # UTC, exclusive

    @property
    def hours(self) -> float:
        return (self.period_end - self.period_start).total_seconds() / 3600


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The first instant of local ``day``, in UTC.

    In a zone whose clocks jump forward at midnight, 00:00 does not exist; fold=0 reads
    it with the offset before the jump, which is the instant the day begins. In a zone
    that repeats midnight, fold=0 is its first occurrence. Either way a week's end is
    computed exactly as the next week's start, so weeks never overlap or leave a gap.
    """
    return datetime.combine(day, time(), tzinfo=zone).astimezone(UTC)


def week_of(moment: datetime, timezone: str) -> BusinessWeek:
    """The business week of ``timezone`` that contains ``moment``."""
    zone = ZoneInfo(timezone)
    local_day = moment.astimezone(zone).date()
    return week_starting(local_day - timedelta(days=local_day.weekday()), timezone)


def week_starting(monday: date, timezone: str) -> BusinessWeek:
    if monday.weekday() != 0:
        raise ValueError(f"{monday.isoformat()} is not a Monday")
    zone = ZoneInfo(timezone)
    return BusinessWeek(
        timezone=timezone,
        week_start_local=monday,
        period_start=local_midnight(monday, zone),
        period_end=local_midnight(monday + timedelta(days=7), zone),
    )


def weeks_finished(
    *, timezone: str, since: datetime, as_of: datetime, settlement_delay: timedelta
) -> list[BusinessWeek]:
    """The weeks of ``timezone`` from the one containing ``since`` to the last one
    finished as of ``as_of``: a week is finished when its end plus ``settlement_delay``
    is at or before ``as_of``.

    Every one of them, however many: a payout pass pays what this lists, and a list cut
    short would end the pass with finished weeks unpaid and nothing said. What bounds it
    is the input: onboarding instants are in a fixed range (``orders.models``).
    """
    weeks: list[BusinessWeek] = []
    week = week_of(since, timezone)
    while week.period_end + settlement_delay <= as_of:
        weeks.append(week)
        week = week_starting(week.week_start_local + timedelta(days=7), timezone)
    return weeks
