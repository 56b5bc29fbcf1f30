"""Pure policy decisions (no database): which missed ticks run and which are skipped."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduling.models import Misfire, RunStatus, SkipReason
from scheduling.registry import Job


@dataclass(frozen=True)
class PlannedTick:
    scheduled_for: datetime
    status: RunStatus
    skip_reason: str = ""


def misfire_plan(*, job: Job, ticks: list[datetime], now: datetime, paused: bool, limit: int) -> list[PlannedTick]:
    """Decide the fate of the oldest ``limit`` due ticks (ascending, all <= now).

    1. A paused job records every tick as skipped (paused), so resuming does not
       replay the pause.
    2. catch_up runs every tick.
    3. coalesce runs only the latest due tick; the older ones are recorded as coalesced.
    4. deadline runs a tick unless it is more than the deadline late.
    Every tick gets a row, oldest first: after a long outage the rest come in the next
    passes, so no missed tick is left without a record of what happened to it.
    """
    latest = ticks[-1] if ticks else None
    return [_decide(job=job, tick=tick, latest=latest, now=now, paused=paused) for tick in ticks[:limit]]


def _decide(*, job: Job, tick: datetime, latest: datetime | None, now: datetime, paused: bool) -> PlannedTick:
    if paused:
        return PlannedTick(tick, RunStatus.SKIPPED, SkipReason.PAUSED)
    if job.misfire == Misfire.COALESCE and tick != latest:
        return PlannedTick(tick, RunStatus.SKIPPED, SkipReason.COALESCED)
    deadline = timedelta(seconds=job.misfire_deadline_seconds or 0)
    if job.misfire == Misfire.DEADLINE and now - tick > deadline:
        return PlannedTick(tick, RunStatus.SKIPPED, SkipReason.MISSED_DEADLINE)
    return PlannedTick(tick, RunStatus.ENQUEUED)
