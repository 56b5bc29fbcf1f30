"""Cron evaluation (placeholder over croniter, UTC only; DST rules land with the cron module work)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

from croniter import croniter


class CronError(ValueError):
    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronError(f"unknown time zone {name!r}") from None


def validate(expr: str) -> None:
    if len(expr.split()) != 5:
        raise CronError(f"{expr!r} must have five fields: minute hour day-of-month month day-of-week")
    if not croniter.is_valid(expr):
        raise CronError(f"{expr!r} is not a valid cron expression")


def next_ticks(expr: str, tz: str, after: datetime, count: int) -> list[datetime]:
    it = croniter(expr, after.astimezone(zone(tz)))
    return [it.get_next(datetime).astimezone(UTC) for _ in range(count)]


def ticks_between(expr: str, tz: str, after: datetime, until: datetime, limit: int | None = None) -> list[datetime]:
    it = croniter(expr, after.astimezone(zone(tz)))
    out: list[datetime] = []
    while limit is None or len(out) < limit:
        tick = it.get_next(datetime).astimezone(UTC)
        if tick > until:
            break
        out.append(tick)
    return out


def latest_tick(expr: str, tz: str, at: datetime) -> datetime | None:
    it = croniter(expr, at.astimezone(zone(tz)))
    return it.get_prev(datetime).astimezone(UTC)
