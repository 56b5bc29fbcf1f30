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
    """Decide the fate of each due tick (ascending, all <= now).

    1. A paused job records every tick as skipped (paused), so resuming does not
       replay the pause.
    2. catch_up runs every tick, the oldest ``limit`` first (the rest next pass).
    3. coalesce runs only the latest tick; the older ones are recorded as coalesced.
    4. deadline runs a tick unless it is more than the deadline late.
    Policies that keep only recent ticks look at the newest ``limit`` of them.
    """
    if job.misfire == Misfire.CATCH_UP and not paused:
        return [PlannedTick(t, RunStatus.ENQUEUED) for t in ticks[:limit]]
    recent = ticks[-limit:]
    if paused:
        return [PlannedTick(t, RunStatus.SKIPPED, SkipReason.PAUSED) for t in recent]
    if job.misfire == Misfire.COALESCE:
        older = [PlannedTick(t, RunStatus.SKIPPED, SkipReason.COALESCED) for t in recent[:-1]]
        return older + [PlannedTick(t, RunStatus.ENQUEUED) for t in recent[-1:]]
    deadline = timedelta(seconds=job.misfire_deadline_seconds or 0)
    return [
        PlannedTick(t, RunStatus.SKIPPED, SkipReason.MISSED_DEADLINE)
        if now - t > deadline
        else PlannedTick(t, RunStatus.ENQUEUED)
        for t in recent
    ]
